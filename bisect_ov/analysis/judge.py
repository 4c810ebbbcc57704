"""The verdict, decided once: every measured node's role, the first divergences and the ranking.

`judge(graph, evidence)` is a pure function of records: the walked graph's topology and an `Evidence` record
(all the run measured and found). No other code decides a role, a first divergence or the order of the culprits;
the renderers and the report only read the `Verdict`.

The rules, in the order they are applied (each reads the evidence, none edits another's answer):

1. **Growth** (`score_graph`): a node over its tolerance that multiplied what it was given by `min_growth` is a
   source (clean inputs) or an amplifier; over its tolerance with less growth it inherits.
2. **Overflow origins**: a node whose target output gains NaN/Inf from inputs that hold none (its nearest
   measured inputs gained none, even where an earlier overflow was taken out by a norm) is where that
   overflow starts. It is protected: never absorbed, never a bystander, whatever an impact run measured, and it
   is a first divergence unless a first divergence lies upstream of it (or it is internal, rule 4).
   **Concentrated errors** are origins the same way: a node whose worst element is off by `SPIKE` tolerances of
   the tensor's largest value and `CONCENTRATED` times its relative L2 error (rounding spreads error over every
   element in proportion to the values), `min_growth` times what its nearest measured inputs carried that way;
   or so against each element's own size plus the rms (`OWN_CONCENTRATED`, twice `min_growth`), from inputs
   within tolerance, made by no `REDUCING` op nor product of two varying tensors (`PRODUCTS`: a factor's tail
   multiplies the other's own-size error). Never ops whose output steps (`STEPS`); a movement op only where
   its producer was measured without those elements (rule 6), not by own size where it selects or adds values;
   nor an elementwise function of bounded slope `L` (`LIPSCHITZ`: a cosine, GELU, ...) whose largest absolute
   error is within `min_growth` times `L` times its measured input's (it carries that error, as a cosine of
   large angles carries their rounding).
3. **Origins within tolerance** (every final output within its tolerance and no top-1 answer flipped): a node
   whose local error is over its tolerance and `EXCESS` times its rounding-only local error, or that alone on
   the target makes most of the final error, is an origin; every other diverged node that is not downstream of
   an origin is absorbed.
4. **Set aside inside kernels**: a node over its tolerance whose tensor exists only inside a kernel of the
   untouched target whose measured outputs are all within their tolerance is internal (a value the target never
   computed), unless its local error is far beyond rounding (rule 3's first test) or a few of its elements are
   wrong (rule 2): then the fault is in the kernel, and it is named at the member that makes it.
5. **Absorbed with diverging outputs**: a node whose measured consumers come back within their tolerance and
   whose impact is below the outputs' tolerance; a source whose impact is a small share of the final error and
   of the outputs' tolerance (a bystander), while another source with local error of its own remains.
   **Dominant origins**: a node whose local error is over its tolerance (a source by growth: whatever its local
   error, which a twin's unit measures without its input quantizers) and whose impact alone takes the outputs over
   their tolerance with `MOST` of the final error is a first divergence, also below a source by growth (unless an
   origin with evidence of its own is named upstream of it); a first divergence whose local error is within its
   tolerance is then not one (it amplified what it was handed), unless its impact so explains the outputs. Where
   no impact can be measured (another framework, a recording), a local error over its tolerance and `EXCESS` times
   its rounding-only one stands in.
6. **Data movement never originates**: a Reshape, Transpose, Split, Slice, Concat, Gather ... adds no error. A
   first divergence there is named at the arithmetic node that produced the values it moves (`moved_inputs`: a
   Gather's table, not its indices; walking up through other movement ops), which it stands for when that node
   stored nothing of its own (a fused kernel's member) or whose error it only carries; the movement op inherits.
   When nothing computes those values (weights or model inputs: an embedding lookup), or the producer was
   measured clean and the movement op's error is `min_growth` times the producer's (or its few wrong elements
   are, rule 2; not a part it selects with no element further off: `only_selects`), the values changed at the
   movement op (a twin's own input or table, a kernel that moved them wrongly): it is named.
7. **No silent "no divergence"**: when nothing is named but a node's local error is `EXCESS` times its
   rounding-only one and at least `OWN_SHARE` of its tolerance, that node is the origin, within its tolerance or
   not (with diverging outputs, rounding-only local errors are measured for nodes within their tolerance only).
8. **Fidelity**: when the taps were rejected, nothing measured through them is named; a node localized by
   partitioned runs is the only first divergence.
9. **Ranking**: first divergences first, always (in graph order); then the other sources and amplifiers, those
   with a measured impact first (largest first), then by growth; then the nodes that only inherit, by error.

Invariants (`tests/analysis/test_judge.py` checks them on every case of its table): an overflow origin is never
absorbed or a bystander; a movement op is a first divergence only when its measured producer is clean;
first divergences rank first; a node named is a node measured (or localized, or stood for by a movement op).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping

from bisect_ov.analysis.bodies import WITH_BODIES
from bisect_ov.analysis.diagnosis import (
    CONCENTRATED,
    LIPSCHITZ,
    OWN_CONCENTRATED,
    PRODUCTS,
    REDUCING,
    SPIKE,
    is_concentrated,
    is_concentrated_own,
)
from bisect_ov.analysis.movement import MOVEMENT, RESCALING, carried_from, only_selects
from bisect_ov.analysis.scoring import NodeScore, Scores, score_graph
from bisect_ov.analysis.topology import Topology
from bisect_ov.core.numeric import F32_AGREEMENT

__all__ = ["Evidence", "Verdict", "Topology", "judge", "carried_from", "whole_unit", "excess", "measured_inputs", "MOVEMENT",
           "RESCALING", "REDUCING", "STEPS", "EXCESS", "OWN_SHARE", "MOST", "NOTABLE", "SPIKE", "CONCENTRATED", "OWN_CONCENTRATED"]

# Ops whose output steps as its input crosses a threshold: a value within rounding of a step gives a whole step
# of difference at a few elements, which is their nature, not a fault.
STEPS = frozenset({"FakeQuantize", "Round", "Floor", "Ceiling", "Sign", "Select", "Quantize", "Dequantize"})
EXCESS = 4.0  # a local error this many times the rounding-only one is worse than its precision explains
# ... and is an origin though within its tolerance (rule 7) from this share of it: the tolerance allows about 8
# unit roundoffs, a node's own rounding is about one, so half the tolerance is already 4 of them.
OWN_SHARE = 0.5
MOST = 0.5  # an impact of at least this share of the final error accounts for most of it
NOTABLE = 0.1  # ... when it is this share of the outputs' tolerance and beyond f32-level agreement


@dataclass(frozen=True)
class Evidence:
    """Everything the verdict rests on, as measured (no OpenVINO objects).

    errors
        Error of each measured tensor under the run's metric, by (node key, port); NaN counts as infinite.
    tolerances
        Tolerance of each measured node, by key (a movement op carries its producer's).
    outputs, flips
        (error, tolerance) of each final output; top-1 answers that flipped over many samples.
    local, expected, impacts
        By node key: local error (alone on the target, fed the reference's inputs), the rounding-only local error
        (the emulated device of the target's precision), the final error with only that node on the target.
    nonfinite
        Keys of nodes whose target output gained NaN/Inf where the reference's is finite.
    movement, steps
        Keys of nodes that only move values (`MOVEMENT`); of nodes whose output steps (`STEPS`).
    inside_kernel, kernel_outputs
        Key -> kernel name, for tensors that exist only inside a kernel of the untouched target; kernel name ->
        keys of its nodes whose tensors the target stored (the kernel's outputs).
    peaks
        By node key: (largest element error / the reference's largest magnitude, relative L2 error) of its worst
        floating output, when the run's metric is relative L2 (empty otherwise: no concentrated-error rule).
    own_peaks
        The same with the worst element's error against its own size plus the rms (`TensorStats.max_elem_rel`).
    max_abs
        By node key: the largest absolute element error of its floating outputs (rule 2's bounded slopes).
    rejected, localized
        The fidelity check rejected the taps; the node partitioned runs localized instead (or None).
    impacts_possible
        Both sides can run pieces of the model, so impacts can be measured (False: a framework or recorded side).
    whole_units
        Keys whose local error ran everything that made their measured value (`whole_unit`): the ops the target
        fused with it and, for an op that only moves values, the arithmetic that produced them.
    """

    errors: Mapping[tuple[str, int], float]
    tolerances: Mapping[str, float]
    min_growth: float = 2.0
    outputs: tuple[tuple[float, float], ...] = ()
    flips: int = 0
    local: Mapping[str, float] = field(default_factory=dict)
    expected: Mapping[str, float] = field(default_factory=dict)
    impacts: Mapping[str, float] = field(default_factory=dict)
    nonfinite: frozenset[str] = frozenset()
    movement: frozenset[str] = frozenset()
    inside_kernel: Mapping[str, str] = field(default_factory=dict)
    kernel_outputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    rejected: bool = False
    localized: str | None = None
    peaks: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    own_peaks: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    max_abs: Mapping[str, float] = field(default_factory=dict)
    steps: frozenset[str] = frozenset()
    impacts_possible: bool = True
    whole_units: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Verdict:
    """The decision: each measured node's score and role, the first divergences, the ranking, the nodes set aside
    by each rule (absorbed, bystanders, internal), the origins, overflow origins and concentrated-error origins
    (`spikes`), the dominant origins of diverging outputs that growth alone did not name (`dominant`) and the
    first divergences by growth they showed to make no error of their own (`demoted`), and `moved` (movement op
    -> the node named in its place)."""

    scores: Scores
    first: tuple[str, ...]
    ranking: tuple[str, ...]
    absorbed: tuple[str, ...] = ()
    bystanders: tuple[str, ...] = ()
    internal: tuple[str, ...] = ()
    origins: tuple[str, ...] = ()
    overflow: tuple[str, ...] = ()
    moved: Mapping[str, str] = field(default_factory=dict)
    outputs_ok: bool = False
    spikes: tuple[str, ...] = ()
    dominant: tuple[str, ...] = ()
    demoted: tuple[str, ...] = ()

    def role(self, key: str) -> str | None:
        s = self.scores.nodes.get(key)
        return s.role if s is not None else None


def judge(graph: Any, ev: Evidence) -> Verdict:
    """The verdict from the evidence (see the module docstring for the rules and the invariants)."""
    base = score_graph(graph, ev.errors, ev.tolerances, min_growth=ev.min_growth)
    nodes = base.nodes
    diverged = [k for k in base.ranking if nodes[k].diverged]
    outputs_ok = bool(ev.outputs) and all(e <= t for e, t in ev.outputs) and not ev.flips
    limit = min((t for _, t in ev.outputs), default=0.0)
    final = max((e for e, _ in ev.outputs), default=0.0)

    overflow = _overflow_origins(graph, ev, nodes)
    spikes = _concentrated(graph, ev, nodes) - overflow
    beyond = {k for k in diverged if _origin(k, ev, nodes, final, limit)}
    origins = [k for k in diverged if k in overflow or k in beyond] + list(_ordered(graph, spikes))
    dominant = set() if outputs_ok or not ev.outputs else _dominant(diverged, ev, nodes, final, limit) - overflow
    # Never absorbed: where an overflow starts, where a few elements go wrong, what alone explains diverging
    # outputs; within tolerance, every origin.
    protected = set(overflow) | spikes | dominant | (set(origins) if outputs_ok else set())
    # A tapped inf inside a kernel may be a value the kernel never computed (a fused RMS norm never stores x*x),
    # so an overflow alone does not keep a node from being set aside there; error of its own far beyond
    # rounding does (the fault is in the kernel, named at its member).
    internal = _internal(ev, nodes, beyond | spikes)
    absorbed: set[str] = set()
    bystanders: set[str] = set()
    if outputs_ok:
        inheriting = {d for k in origins for d in graph.downstream(k, include_self=True)}
        absorbed = {k for k in diverged if k not in inheriting and k not in internal}
    elif ev.outputs:
        absorbed = _absorbed_by_consumers(graph, ev, nodes, diverged, limit, protected | internal)
        bystanders = _bystanders(graph, ev, nodes, diverged, limit, final, protected, absorbed, internal,
                                 explained=bool(dominant - internal))
    scores = score_graph(graph, ev.errors, ev.tolerances, min_growth=ev.min_growth, absorbed=absorbed | bystanders, internal=internal)
    nodes = dict(scores.nodes)
    first = list(scores.first)
    # rule 2: where the overflow starts, and where a few elements go wrong, is named whatever growth says (in
    # graph order, so that a spike downstream of a named one only inherits)
    for key in sorted(overflow | spikes, key=lambda k: graph[k].index if k in graph else math.inf):
        if key in internal:
            continue
        s = nodes[key]
        if s.role not in ("source", "amplifier"):
            nodes[key] = _with(s, role="amplifier" if s.inherited > s.tolerance else "source")
        if key not in first and not any(f in graph.upstream(key, include_self=False) for f in first):
            first.append(key)
        if key in spikes and key in first:  # what reads its wrong elements read a diverged input: not a first
            for later in [f for f in first if f != key and key in graph.upstream(f, include_self=False)]:
                first.remove(later)
                if nodes[later].role == "source":
                    nodes[later] = _with(nodes[later], role="amplifier")
    # rule 5, dominant origins: error of its own that alone takes the outputs over their tolerance is where the
    # divergence starts, also below another first divergence; a first divergence that makes no error of its own
    # (its local error is within its tolerance: it passed on, amplified, what it was handed) is then not one
    named = [k for k in _ordered(graph, dominant) if k not in internal]
    added: list[str] = []
    for key in named:
        # Below another origin with evidence of its own, its local error may hold that one's (a unit runs its
        # fused group's members with it): it is named only when no such origin upstream is named.
        evidenced = [f for f in first if f in overflow or f in spikes or f in dominant]
        if key in first or any(f in graph.upstream(key, include_self=False) for f in evidenced):
            continue
        added.append(key)
        s = nodes[key]
        if s.role not in ("source", "amplifier"):
            nodes[key] = _with(s, role="amplifier" if s.inherited > s.tolerance else "source")
        first.append(key)
    # (Also without a dominant origin when the local error ran all that made the node's value: within its tolerance,
    # its growth is what it amplified of what it inherited, a Softmax turning logits' absolute differences into
    # relative ones; a cancellation shows its own error in its local error and stays. Not one whose impact explains
    # the outputs: its local run lacked what made its value, a twin's input quantizers. With no first divergence
    # left, the outputs' divergence has no single source.)
    demoted = [f for f in first if f not in protected and f in ev.local and ev.local[f] <= nodes[f].tolerance
               and (named or f in ev.whole_units) and not _explains(ev, f, final, limit)]
    for key in demoted:
        first.remove(key)
        nodes[key] = _with(nodes[key], first=False)
    moved: dict[str, str] = {}
    for key in list(first):  # rule 6
        if key in ev.movement:
            at = _arithmetic_producer(graph, key, ev)
            if at is None or at in nodes and (key in spikes or nodes[key].error >= ev.min_growth * max(
                    nodes[at].error, 0.0)) and not only_selects(graph[key].op_type, ev.max_abs.get(key), ev.max_abs.get(at)):
                # Nothing computes the values it moves (they come from the weights or the model's inputs, as an
                # embedding lookup's), or its producer was measured clean (of the spread error, or of its few
                # wrong elements): its values changed between the two (a twin's foreign input, a kernel that
                # moved them wrongly). What it shows is its own.
                continue
            first.remove(key)
            nodes[key] = _with(nodes[key], role="inherits", first=False)
            moved[key] = at
            if at not in first:
                first.append(at)
            # The movement op's values are its producer's, moved: where the producer stored none of its own (a
            # kernel's member), they are its measurement.
            s = nodes.get(at) or _with(nodes[key], key=at)
            nodes[at] = _with(s, role="source" if s.inherited <= s.tolerance else "amplifier", first=True)
    if not first:  # rule 7
        worst = _far_beyond_rounding(ev, nodes)
        if worst is not None:
            first.append(worst)
            nodes[worst] = _with(nodes[worst], role="source", first=True)
    if ev.rejected:  # rule 8
        first = [ev.localized] if ev.localized is not None else []
    first = sorted(dict.fromkeys(first), key=lambda k: graph[k].index if k in graph else math.inf)
    for key in first:
        if key in nodes:
            nodes[key] = _with(nodes[key], first=True)
    for key, s in nodes.items():
        if s.first and key not in first:
            nodes[key] = _with(s, first=False)
    ranking = _ranking(first, nodes, ev) if not ev.rejected else tuple(first)
    rank_of = {k: i for i, k in enumerate(ranking, start=1)}
    nodes = {k: _with(s, rank=rank_of.get(k)) for k, s in nodes.items()}
    return Verdict(
        scores=Scores(nodes, tuple(first), ranking), first=tuple(first), ranking=ranking,
        absorbed=_ordered(graph, absorbed), bystanders=_ordered(graph, bystanders), internal=_ordered(graph, internal),
        origins=_ordered(graph, set(origins) if outputs_ok else set(overflow)), overflow=_ordered(graph, overflow),
        moved=moved, outputs_ok=outputs_ok, spikes=_ordered(graph, spikes), dominant=tuple(added),
        demoted=tuple(demoted))


# ----- the rules ------------------------------------------------------------------------------------------
def _overflow_origins(graph: Any, ev: Evidence, nodes: Mapping[str, NodeScore]) -> set[str]:
    """Measured nodes whose target output gained NaN/Inf from inputs that hold none: the nearest measured nodes
    upstream (walking through unmeasured ones) gained none. An overflow that a norm took out again (rsqrt of inf
    is 0) does not make a later overflow inherited: each place that overflows from finite values is an origin."""
    if not ev.nonfinite:
        return set()
    return {key for key in ev.nonfinite if key in nodes and not measured_inputs(graph, key, nodes) & ev.nonfinite}


def _concentrated(graph: Any, ev: Evidence, nodes: Mapping[str, NodeScore]) -> set[str]:
    """Rule 2, concentrated errors (the module's docstring), by share of the largest value or by own size; from
    inputs within tolerance only by own size (where error is everywhere, tails are no fault's mark)."""
    found = set()
    for peaks, holds in ((ev.peaks, is_concentrated), (ev.own_peaks, is_concentrated_own)):
        for key, (peak, rel) in peaks.items():
            s = nodes.get(key)
            if (s is None or key in ev.steps or key in ev.nonfinite or not holds(peak, rel, s.tolerance)
                    or key in graph and graph[key].op_type in WITH_BODIES):  # many ops in one node: no kernel's mark
                continue
            passed: set[str] = set()
            inputs = measured_inputs(graph, key, nodes, passed)
            if peaks is ev.own_peaks and (s.inherited > s.tolerance or any(
                    graph[k].op_type in REDUCING or graph[k].op_type in PRODUCTS and len(graph.data_inputs(k)) > 1
                    for k in passed | {key} if k in graph) or key in ev.movement
                    and graph[key].op_type in RESCALING and _arithmetic_producer(graph, key, ev) in nodes):
                continue
            slope = LIPSCHITZ.get(graph[key].op_type) if key in graph else None
            if (slope is not None and not passed and inputs and key in ev.max_abs
                    and ev.max_abs[key] <= ev.min_growth * slope * max(ev.max_abs.get(k, 0.0) for k in inputs)):
                continue  # bounded slope: what its input carried, whatever the sizes
            carried = max((peaks.get(k, (0.0, 0.0))[0] for k in inputs), default=0.0)
            # By own size, elementwise arithmetic adds its inputs' errors (a square doubles them): twice the growth.
            if peak >= ev.min_growth * (2 if peaks is ev.own_peaks else 1) * max(carried, s.tolerance * 0.1):
                found.add(key)
    return found


def measured_inputs(graph: Any, key: str, nodes: Collection[str], passed: set[str] | None = None) -> set[str]:
    """The measured nodes nearest upstream of `key` along its data inputs, through unmeasured ones (to `passed`)."""
    found: set[str] = set()
    seen: set[str] = set() if passed is None else passed
    stack = [k for k, _ in graph.data_inputs(key)]
    while stack:
        k = stack.pop()
        if k in seen or k in found:
            continue
        if k in nodes:
            found.add(k)
        else:
            seen.add(k)
            stack.extend(i for i, _ in graph.data_inputs(k))
    return found


def _origin(key: str, ev: Evidence, nodes: Mapping[str, NodeScore], final: float, limit: float) -> bool:
    """Rule 3: local error over its tolerance, and far beyond rounding or most of the final error alone."""
    local = ev.local.get(key)
    tol = nodes[key].tolerance
    if local is None or local <= tol:
        return False
    ratio = excess(local, ev.expected.get(key))
    impact = ev.impacts.get(key)
    dominant = impact is not None and impact >= MOST * final and impact >= max(NOTABLE * limit, F32_AGREEMENT)
    return (ratio is not None and ratio >= EXCESS) or dominant


def excess(local: float | None, expected: float | None, floor: float = 1e-7) -> float | None:
    """How many times its rounding-only local error a node's local error is (None when either is unknown)."""
    if local is None or expected is None:
        return None
    return local / max(expected, floor)


def _internal(ev: Evidence, nodes: Mapping[str, NodeScore], protected: Collection[str]) -> set[str]:
    """Rule 4: over tolerance, inside a kernel whose measured outputs are all within their tolerance."""
    found = set()
    for key, kernel in ev.inside_kernel.items():
        s = nodes.get(key)
        if s is None or s.error <= s.tolerance or key in protected:
            continue
        outs = [nodes[k] for k in ev.kernel_outputs.get(kernel, ()) if k in nodes and k != key]
        if outs and all(o.error <= o.tolerance for o in outs):
            found.add(key)
    return found


def _absorbed_by_consumers(graph: Any, ev: Evidence, nodes: Mapping[str, NodeScore], diverged: list[str],
                           limit: float, protected: Collection[str]) -> set[str]:
    """Rule 5, first half: the measured consumers come back within tolerance and the impact is below `limit`."""
    found = set()
    for key in diverged:
        impact = ev.impacts.get(key)
        if key in protected or impact is None or impact >= limit:
            continue
        consumers = [c for c in graph.downstream(key, include_self=False, stop=lambda c: c in nodes) if c in nodes]
        if consumers and all(nodes[c].error <= nodes[c].tolerance for c in consumers):
            found.add(key)
    return found


def _explains(ev: Evidence, key: str, final: float, limit: float) -> bool:
    """Alone on the target, `key` takes the outputs over their tolerance (`limit`) with `MOST` of the final error."""
    return (impact := ev.impacts.get(key)) is not None and impact >= MOST * final and impact > limit


def _dominant(diverged: list[str], ev: Evidence, nodes: Mapping[str, NodeScore], final: float,
              limit: float) -> set[str]:
    """Rule 5, dominant origins (outputs over their tolerance): local error over its tolerance, and alone on the
    target the outputs go over their tolerance with most of the final error; where no impact can be measured,
    local error `EXCESS` times its rounding-only one instead."""
    found = set()
    for key in diverged:
        local, s, explains = ev.local.get(key), nodes[key], _explains(ev, key, final, limit)
        # A source over inputs within whose impact explains the outputs is one whatever its local run (a twin's lacks its input quantizers)
        if local is None or (local <= s.tolerance and not (explains and s.role == "source" and s.inherited <= s.tolerance)):
            continue
        if explains:
            found.add(key)
        elif not ev.impacts_possible and (ratio := excess(local, ev.expected.get(key))) is not None and ratio >= EXCESS:
            found.add(key)
    return found


def _bystanders(graph: Any, ev: Evidence, nodes: Mapping[str, NodeScore], diverged: list[str], limit: float,
                final: float, protected: Collection[str], absorbed: set[str], internal: set[str], *,
                explained: bool = False) -> set[str]:
    """Rule 5, second half: sources whose impact is a small share of the final error and of the outputs'
    tolerance, kept only while another source with local error of its own remains once they are set aside (a
    consumer that turns source only because its inputs now count as clean carries what it was handed), or a
    dominant origin explains the outputs (`explained`)."""
    found = {k for k in diverged if k not in protected and k not in absorbed and k not in internal
             and nodes[k].role == "source" and (v := ev.impacts.get(k)) is not None and v < limit
             and v < NOTABLE * final}
    if not found:
        return set()
    if explained:
        return found
    trial = score_graph(graph, ev.errors, ev.tolerances, min_growth=ev.min_growth, absorbed=found | absorbed,
                        internal=internal)
    remains = any(n.role == "source" and (local := ev.local.get(k)) is not None and local > n.tolerance
                  for k, n in trial.nodes.items() if k not in found)
    return found if remains else set()


def _arithmetic_producer(graph: Any, key: str, ev: Evidence) -> str | None:
    """The nearest node upstream of movement op `key` that computes, walking up the input carrying most error for
    its tolerance (an unmeasured one at its tolerance: past clean ones); None when only parameters lie upstream."""
    chain = carried_from(graph, key, moves=lambda k: k in ev.movement, pick=lambda kp: 1.0 if kp not in ev.errors else
                         ev.errors[kp] / max(ev.tolerances.get(kp[0], 0.0), 1e-30))
    return chain[-1] if chain and chain[-1] not in ev.movement else None


def whole_unit(graph: Any, key: str, unit: Collection[str], kernel_of: Callable[[str], str | None],
               members: Callable[[str], Collection[str]]) -> bool:
    """Whether `unit` (what ran alone for `key`'s local error) holds everything that made `key`'s measured value:
    `key`, for an op that only moves values the arithmetic it carries from (`carried_from`), and the members of
    the kernels of the target those ran in (`kernel_of`: a key's kernel, None when stored by its own; `members`:
    a kernel's keys)."""
    made = {key, *carried_from(graph, key)}
    for kernel in {found for k in made if (found := kernel_of(k)) is not None}:
        made |= set(members(kernel))
    return made <= set(unit)


def _far_beyond_rounding(ev: Evidence, nodes: Mapping[str, NodeScore]) -> str | None:
    """Rule 7: the measured node whose local error is at least `OWN_SHARE` of its tolerance and the most times its
    rounding-only one (at least `EXCESS`); None when there is none."""
    best, best_ratio = None, EXCESS
    for key, local in ev.local.items():
        s = nodes.get(key)
        if s is None or key in ev.movement or local < OWN_SHARE * s.tolerance:
            continue
        ratio = excess(local, ev.expected.get(key))
        if ratio is not None and ratio >= best_ratio:
            best, best_ratio = key, ratio
    return best


def _ranking(first: list[str], nodes: Mapping[str, NodeScore], ev: Evidence) -> tuple[str, ...]:
    """Rule 9."""
    rest = [s for k, s in nodes.items() if s.diverged and k not in first]

    def key(s: NodeScore):
        if s.role in ("source", "amplifier"):
            impact = ev.impacts.get(s.key)
            return (0, 0 if impact is not None else 1, -(impact or 0.0), -s.growth, s.key)
        return (1, 0, 0.0, -s.error, s.key)

    return tuple([*first, *(s.key for s in sorted(rest, key=key))])


def _with(s: NodeScore, **changes: Any) -> NodeScore:
    values = {"key": s.key, "error": s.error, "inherited": s.inherited, "tolerance": s.tolerance, "growth": s.growth,
              "role": s.role, "first": s.first, "rank": s.rank, **changes}
    return NodeScore(**values)


def _ordered(graph: Any, keys: Collection[str]) -> tuple[str, ...]:
    return tuple(sorted(keys, key=lambda k: graph[k].index if k in graph else math.inf))
