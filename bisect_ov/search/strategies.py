"""Which tensors to expose, and in how many compiles: the capture strategies.

* ``full``: every output of every compute node, split into compiles of at most `max_tap_bytes`. Exact
  per-node attribution; breaks every fusion of the target.
* ``fusion`` (the default): only the tensors that leave one of the target's fusion groups, read from the
  runtime graph of the untouched target compile, so the instrumented target compiles the same groups. A
  group whose output diverges and one of whose members reads only clean tensors from outside the group may
  hold the place where error starts: its members (every unmeasured node feeding that output since the last
  measured tensors, which includes ops the runtime graph does not name) are exposed in one more compile so
  the report can name the member (``refine=False`` keeps group granularity).
* ``bisection``: a search along the topological order that exposes only a cut per compile. The cut at
  position i is the set of tensors produced at or before i and read after it (model outputs included); all
  information computed up to i flows through it, so error created at or before i is visible in the cut
  unless the network masks it. The smallest i whose cut diverges is found by binary search, and the node at
  i is then the first divergence (its inputs lie in the clean cut at i - 1). That takes ceil(log2 N) compiles
  plus one to confirm, with a handful of tensors each: for models too big or too fragile for many taps.

Each strategy returns statistics per measured tap; scoring (`bisect_ov.analysis.scoring`) works with any
subset of taps, unmeasured tensors passing their inputs' error on.
"""

from __future__ import annotations

from typing import Callable

from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.engine.session import Session
from bisect_ov.model.fusion import fusion_boundaries
from bisect_ov.model.partition import cut_after
from bisect_ov.model.taps import Tap

STRATEGIES = ("auto", "fusion", "full", "bisection")  # "auto": fusion, falling back to bisection

__all__ = ["STRATEGIES", "run_full", "run_fusion", "run_bisection", "fusion_boundaries", "fusion_taps"]

Diverged = Callable[[Tap, TensorStats], bool]
OwnError = Callable[[dict[Tap, TensorStats], dict[str, tuple[str, ...]]], dict[str, bool]]


def run_full(session: Session, max_bytes: int | None) -> dict[Tap, TensorStats]:
    """Expose every matched candidate tensor."""
    return session.measure_chunked([r for r, _ in session.match.pairs], max_bytes)


def run_fusion(session: Session, max_bytes: int | None, diverged: Diverged, *, refine: bool = True,
               own_error: OwnError | None = None, on_segment: Callable | None = None
               ) -> tuple[dict[Tap, TensorStats], dict[str, tuple[str, ...]]]:
    """Measure fusion-group boundaries; refine the groups where error starts. Returns stats and groups.

    `own_error(stats, groups)`, when given, tells for groups it can measure whether the group makes error of
    its own (its members alone on the target, fed with the reference's values, over tolerance): only those
    are refined, as a group within its tolerance when isolated only passes on what it inherits. Groups it
    does not answer for are refined when one of their members reads only clean tensors from outside.
    `on_segment` is handed to `Session.measure_chunked` (called per segment when the model is streamed).
    """
    taps, groups = fusion_taps(session)
    stats = session.measure_chunked(taps, max_bytes, desc="compare groups", on_segment=on_segment)
    if not refine:
        return stats, groups
    graph = session.graph
    measured = {t.key for t in stats}
    candidates: dict[str, set[str]] = {}
    for tap, s in stats.items():
        if not diverged(tap, s):
            continue
        # Everything unmeasured that feeds this tensor since the last measured tensors: the group's members,
        # and ops the runtime graph does not name (the plugin folds some into neighbours silently).
        inside = _unmeasured_ancestors(graph, tap.key, measured)
        if len(inside) < 2:
            continue
        # A candidate when some member reads only clean tensors from outside: error may start inside.
        if any(_reads_clean(graph, m, inside, stats, diverged) for m in inside):
            candidates.setdefault(tap.key, set()).update(inside)
    creates = own_error(stats, groups) if own_error is not None and candidates else {}
    to_refine: set[str] = set()
    for key, inside in candidates.items():
        if creates.get(key, True):
            to_refine.update(inside)
    extra = [r for r, _ in session.match.pairs if r.key in to_refine and r not in stats]
    if extra:
        stats.update(session.measure_chunked(extra, max_bytes, desc="refine"))
        measured = {t.key for t in stats}
        groups = {k: tuple(sorted(_unmeasured_ancestors(graph, k, measured) - {k}, key=lambda m: graph[m].index))
                  for k in measured}
    return stats, groups


def fusion_taps(session: Session) -> tuple[list[Tap], dict[str, tuple[str, ...]]]:
    """The taps `run_fusion` measures first (the boundaries of the untouched target's fusion groups) and the
    group each stands for; known once the plain run has compiled the target."""
    taps, groups = fusion_boundaries(session.graph, session.target_graph, session.match, session.target_runtime)
    if session.untappable:
        # Tensors inside a twin's int8 computation are not exposed: their nodes belong to the next tap's group.
        taps = [t for t in taps if t not in session.untappable]
        kept = {t.key for t in taps}
        groups = {k: tuple(sorted(_unmeasured_ancestors(session.graph, k, kept) - {k},
                                  key=lambda m: session.graph[m].index)) for k in kept}
    return taps, groups


def _reads_clean(graph, member: str, inside: set[str], stats, diverged: Diverged) -> bool:
    """True when `member` reads something from outside `inside`, and all of that is measured clean or an input."""
    outside = [(k, p) for k, p in graph.data_inputs(member) if k not in inside]
    if not outside:
        return False
    for k, p in outside:
        if graph[k].kind == "parameter":
            continue
        tap = Tap(k, p)
        if tap not in stats or diverged(tap, stats[tap]):
            return False
    return True


def _unmeasured_ancestors(graph, key: str, measured: set[str]) -> set[str]:
    """`key` and the candidates upstream of it reached without crossing a measured node."""
    return graph.upstream(key, stop=lambda k: k in measured or not graph[k].is_candidate)


def run_bisection(session: Session, diverged: Diverged) -> dict[Tap, TensorStats]:
    """Binary search for the first position whose cut diverges; see the module docstring."""
    graph = session.graph
    matched = {r for r, _ in session.match.pairs} - session.untappable
    order = [n.key for n in graph.candidates() if any(Tap(n.key, t.port) in matched for t in n.outputs)]
    stats: dict[Tap, TensorStats] = {}

    def cut_diverges(i: int) -> bool:
        cut = [t for t in cut_after(graph, order, i) if t in matched]
        missing = [t for t in cut if t not in stats]
        if missing:
            stats.update(session.measure(missing))
        return any(diverged(t, stats[t]) for t in cut)

    if not order or not cut_diverges(len(order) - 1):
        return stats
    lo, hi = 0, len(order) - 1  # invariant: cut(hi) diverges; cuts before lo do not
    while lo < hi:
        mid = (lo + hi) // 2
        if cut_diverges(mid):
            hi = mid
        else:
            lo = mid + 1
    # Confirm: the node at hi with every tensor it reads, so scoring sees a clean input and a dirty output.
    found = order[hi]
    confirm = [Tap(found, t.port) for t in graph[found].outputs if Tap(found, t.port) in matched]
    confirm += [Tap(k, p) for k, p in graph.data_inputs(found) if Tap(k, p) in matched]
    missing = [t for t in confirm if t not in stats]
    if missing:
        stats.update(session.measure(missing))
    return stats
