"""Which node a reproducer is written for, and what is refused: a report with nothing diverging, a node within
its tolerance, a node that cannot be cut out alone.

`choose(report, graph, node)` returns the `NodeResult` whose piece is written and the notes to show:

* no `node`: the report's first divergence; a report without one is refused (nothing diverges, or the final
  outputs diverge without a single source: then a node must be named), but one whose taps were unfaithful (no node
  could be named from them): its worst diverging final output is written, the piece ending there held to that
  output's error in the plain run (`plain_goal`);
* a node the target fused into a kernel measured through another node (`NodeResult.group`), or whose tensor
  exists only inside a kernel (`NodeResult.inside_kernel`): it cannot be cut out alone without splitting that
  kernel, so the smallest piece that can is written, the kernel's measured output node, and a note says so;
* a node within its tolerance is refused: there is nothing to reproduce.
"""

from __future__ import annotations

from typing import Any

from bisect_ov.core.errors import InputError
from bisect_ov.model.graph import ModelGraph

__all__ = ["choose", "plain_goal"]


def choose(report: Any, graph: ModelGraph, node: str | int | None) -> tuple[Any, list[tuple[str, str]], tuple[str, ...]]:
    """The node to reproduce, the notes (each as (with the model's names, naming nothing of it) for an anonymized
    README), and keys the piece must hold besides its fused group (the kernel a node that cannot be cut out alone
    lies in); see the module docstring."""
    notes: list[tuple[str, str]] = []
    sides = f"{report.ref.label} -> {report.target.label}"
    if node is None:
        first = report.first_divergence
        output = _unfaithful_output(report)
        if first is None and output is not None:
            notes.append((f"No node is named where error starts (the taps changed what the target computed): the "
                          f"piece ends at the final output '{output.name}'.",
                          "No node is named where error starts (the taps changed what the target computed): the piece "
                          "ends at a final output."))
            return output, notes, ()
        if first is None:
            if report.diverges:
                raise InputError(
                    f"The report ({sides}) has no first divergence: its final outputs diverge without a single "
                    "node where error starts. Name a node to reproduce: report.repro(folder, node=NAME) "
                    "(one of report.culprits).")
            raise InputError(
                f"Nothing diverges in this report ({sides}): every node and final output is within its tolerance, "
                "so there is no divergence to reproduce.")
        return first, notes, ()
    try:
        chosen = report.node(node)
    except InputError:
        holders = [n for n in report.nodes if str(node) in n.group]
        if not holders:
            raise
        chosen = holders[0]
        notes.append((f"'{node}' cannot be cut out alone: the target fused it into the kernel that ends at "
                      f"'{chosen.name}', so the piece is the smallest that can be: that kernel.",
                      "The node asked for cannot be cut out alone: the target fused it into a kernel, so the piece is "
                      "the smallest that can be: that kernel."))
    if chosen.inside_kernel is not None:
        stored = _kernel_output(report, graph, chosen)
        if stored is None:
            raise InputError(
                f"'{chosen.name}' exists only inside the target's fused kernel '{chosen.inside_kernel}', and no "
                "measured node stores that kernel's output: no piece can be cut out without splitting the kernel.")
        notes.append((f"'{chosen.name}' exists only inside the target's fused kernel '{chosen.inside_kernel}': cut "
                      f"out alone it would split that kernel, so the piece is the smallest that can be: the kernel up "
                      f"to '{stored.name}', which stores its output.",
                      "The node asked for exists only inside one of the target's fused kernels: cut out alone it would "
                      "split that kernel, so the piece is the smallest that can be: the kernel up to the node that "
                      "stores its output."))
        between = graph.downstream(chosen.key) & graph.upstream(stored.key)
        extra = tuple(sorted(between | set(chosen.group), key=lambda k: graph[k].index if k in graph else -1))
        chosen = stored
    else:
        extra = ()
    if not chosen.error > chosen.tolerance:
        raise InputError(f"'{chosen.name}' is within its tolerance ({chosen.error:.1e} <= {chosen.tolerance:.1e}): "
                         "there is no divergence to reproduce. Pick a node of report.culprits.")
    return chosen, notes, extra


def plain_goal(report: Any, culprit: Any) -> float | None:
    """What a piece ending at `culprit` must reproduce when the report's taps were unfaithful: the plain run's error
    of the final output it produces (its local error ran in a piece the target compiled otherwise too); None
    otherwise."""
    if report.fidelity is None or not report.fidelity.rejected:
        return None
    return next((o.error for o in report.outputs if o.name == culprit.name), None)


def _unfaithful_output(report: Any) -> Any:
    """The node of the worst diverging final output of a report whose taps were unfaithful, when measured."""
    if report.fidelity is None or not report.fidelity.rejected:
        return None
    over = sorted((o for o in report.outputs if o.diverged), key=lambda o: -o.error)
    measured = {n.name: n for n in report.nodes}
    return next((measured[o.name] for o in over if o.name in measured), None)


def _kernel_output(report: Any, graph: ModelGraph, inside: Any) -> Any:
    """The first measured node downstream of `inside` whose tensor the target stored (its kernel's output)."""
    measured = {n.key: n for n in report.nodes}
    reached = graph.downstream(inside.key)
    found = [measured[k] for k in reached if k in measured and measured[k].inside_kernel is None and k != inside.key]
    return min(found, key=lambda n: n.index) if found else None
