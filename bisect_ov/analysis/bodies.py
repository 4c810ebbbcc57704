"""Ops that run bodies of other ops (sub-models: If's branches, a Loop's or TensorIterator's body). Nothing inside
a body can be tapped, so such an op is compared as one node at its outputs; the emulated devices round inside the
bodies as outside (`bisect_ov.run.emulate`)."""

from __future__ import annotations

from typing import Any

__all__ = ["WITH_BODIES", "bodies_note"]

WITH_BODIES = frozenset({"If", "Loop", "TensorIterator"})


def bodies_note(graph: Any) -> tuple[str, ...]:
    """A note naming the compared ops that run bodies (If, Loop, TensorIterator): what happens inside them is seen
    only at their outputs."""
    found = [n for n in graph.candidates() if n.op_type in WITH_BODIES]
    if not found:
        return ()
    named = ", ".join(f"'{n.name}' ({n.op_type})" for n in found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
    one = len(found) == 1
    return (f"{named} {'runs a body' if one else 'run bodies'} of ops inside {'it' if one else 'them'}: those ops are "
            f"not tapped, so {'it is' if one else 'each is'} compared as one node, at its outputs, with the tolerance of "
            "one op; an error named there may come from any op of the body.",)
