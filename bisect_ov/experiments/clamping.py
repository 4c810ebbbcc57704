"""A clamp after the overflow's origins as a remedy for values that leave an f16 target's range, verified.

Where a node's values exceed what the target can hold, the target produces inf (or saturates), and what follows
turns it into NaN or zeros. A clamp there (`bisect_ov.model.clamping`) keeps the values finite; whether the final
outputs are then right depends on what follows (a Softmax or a saturating activation takes a large finite value
as well as the exact one; a normalization whose square overflowed does not), so the clamp is only proposed when
the patched model, run whole on the target, brings the final error under the tolerance.

The clamped nodes are the origins of the overflow (`overflow_origins`): nodes with a floating output whose values
on the reference exceed the target's largest finite value, or whose target output gains NaN/Inf from finite
inputs, and none of whose nearest measured producers does either (the walk the judge makes to its overflow
origins). Each bound is the largest magnitude the reference reaches there,
at most the largest finite f16 value. When the clamps together solve it and there are several, each is dropped
in turn and stays dropped when the rest still solve it: no clamp left can be removed (1-minimal, as delta
debugging makes it). Each patched model is one compile and one run of the whole target model.
"""

from __future__ import annotations

import logging
from typing import Callable, Collection, Mapping, Sequence

from bisect_ov.analysis.judge import measured_inputs
from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.core.errors import BisectError, InputError
from bisect_ov.core.numeric import F16_MAX
from bisect_ov.core.records import Clamp
from bisect_ov.engine.engine import Engine
from bisect_ov.experiments.whole import compile_variant, final_error
from bisect_ov.model.clamping import clamp_after

log = logging.getLogger(__name__)

__all__ = ["find_clamp", "overflow_origins", "MAX_CLAMPS"]

MAX_CLAMPS = 8
"""At most this many origins are clamped; past it the overflow is everywhere and a clamp is not the remedy."""


def overflow_origins(graph, stats: Collection[tuple[str, int, TensorStats]],
                     limit: float = F16_MAX) -> dict[str, float]:
    """Node key -> clamp bound for the origins of an overflow (see the module docstring), in graph order.

    `stats` holds (node key, output port, statistics) of the measured tensors; a node is over when a floating
    output of it reaches past `limit` on the reference or gains non-finite values on the target.
    """
    over: dict[str, float] = {}
    for key, _port, s in stats:
        if s.integer:
            continue
        if s.ref_absmax > limit or s.new_nonfinite > 0:
            over[key] = max(over.get(key, 0.0), s.ref_absmax)
    measured = {key for key, _port, _s in stats}
    origins = {}
    for node in graph:
        # Its nearest measured producers (through nodes not measured, as the judge walks to overflow origins).
        if node.key in over and not measured_inputs(graph, node.key, measured) & over.keys():
            origins[node.key] = min(limit, over[node.key]) if over[node.key] > 0 else limit
    return origins


def find_clamp(engine: Engine, error_of: Callable[[TensorStats], float], limit: float, error_before: float,
               origins: Mapping[str, float], scales: Sequence[float] = ()) -> Clamp | None:
    """The clamps after `origins` (node key -> bound) that bring the final error under `limit`, made 1-minimal,
    or the record of the clamps that did not (see the module docstring); None when there is nothing to clamp or
    the patched model cannot be made or run."""
    if not origins or len(origins) > MAX_CLAMPS:
        return None
    graph = engine.runner.comparison.target_graph
    model = graph.model
    names = {k: graph[k].name for k in origins if k in graph}
    if not names:
        return None
    target = engine.runner.comparison.target
    runs = 0

    def error_with(keys: tuple[str, ...]) -> float:
        nonlocal runs
        patched = clamp_after(model, {names[k]: origins[k] for k in keys})
        runs += 1
        error = final_error(engine, compile_variant(engine, target, patched), error_of, scales)
        log.info("Clamps after %d node(s): final error %.3e (limit %.3e)", len(keys), error, limit)
        return error

    kept = tuple(names)
    try:
        error = error_with(kept)
        if error <= limit:
            for key in list(kept):
                if len(kept) == 1:
                    break
                rest = tuple(k for k in kept if k != key)
                without = error_with(rest)
                if without <= limit:
                    kept, error = rest, without
    except (BisectError, InputError, RuntimeError) as err:
        log.info("The clamp remedy stopped: %s", err)
        return None
    return Clamp(bounds=tuple((names[k], float(origins[k])) for k in kept), error_before=error_before,
                 error_after=error, tolerance=limit, device=target.name.split(" (")[0],
                 emulated=bool(getattr(target, "emulated", False)), runs=runs)
