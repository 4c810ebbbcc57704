"""Which tensors to expose, and in how many compiles: the capture strategies, as search objects.

A strategy proposes its next step from the results so far (`next_step(results) -> Step | None`) and never
runs anything itself: the pipeline's driver measures what a step asks for through the engine, adds it to the
results and asks again, until the strategy says it is done (None). Strategies are registered by name
(`register_strategy`), like devices.

* ``full``: every output of every compute node, split into compiles of at most `max_tap_bytes`. Exact
  per-node attribution; breaks every fusion of the target.
* ``fusion`` (the default): only the tensors that leave one of the target's fusion groups, read from the
  runtime graph of the untouched target compile, so the instrumented target compiles the same groups. A
  group whose output diverges and one of whose members reads only clean tensors from outside the group may
  hold the place where error starts: its members (every unmeasured node feeding that output since the last
  measured tensors, which includes ops the runtime graph does not name) are exposed in one more compile so
  the report can name the member (``refine=False`` keeps group granularity). When local errors can run, the
  strategy first asks for them: a group whose members, alone on the target and fed the reference's values,
  stay within tolerance only passes on what it inherits and is not refined.
* ``bisection``: a search along the topological order that exposes only a cut per compile. The cut at
  position i is the set of tensors produced at or before i and read after it (model outputs included); all
  information computed up to i flows through it, so error created at or before i is visible in the cut
  unless the network masks it. The smallest i whose cut diverges is found by binary search, and the node at
  i is then the first divergence (its inputs lie in the clean cut at i - 1). That takes ceil(log2 N) compiles
  plus one to confirm, with a handful of tensors each: for models too big or too fragile for many taps.

* ``auto`` (the default), a composite: ``fusion``, then, when the fusion taps changed what the target computes
  (the driver's fidelity check, `Results.unfaithful`), ``bisection`` from scratch (its first step is `fresh`:
  nothing measured through the fusion taps speaks for it).

Scoring (`bisect_ov.analysis.scoring`) works with any subset of taps, unmeasured tensors passing their inputs'
error on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Generator, Mapping

from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.engine.comparison import Comparison
from bisect_ov.model.fusion import fusion_boundaries
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.partition import cut_after
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap, plan_chunks

__all__ = ["STRATEGIES", "Step", "Results", "Prefetch", "Strategy", "strategy_class", "AutoSearch", "FullSearch",
           "FusionSearch", "BisectionSearch",
           "register_strategy", "make_strategy", "strategy_names", "fusion_taps", "unmeasured_ancestors"]

Diverged = Callable[[Tap, TensorStats], bool]


@dataclass(frozen=True)
class Step:
    """What a strategy asks for next: `taps` to measure (in chunks of the tap budget when `chunked`, else in
    one compile), or, with `local=True`, the local errors of the measured groups (no taps)."""

    taps: tuple[Tap, ...] = ()
    desc: str = "compare"
    chunked: bool = True
    local: bool = False
    fresh: bool = False  # start over: what was measured before this step does not count (a composite's next part)


@dataclass(frozen=True)
class Results:
    """What was measured so far: statistics per tap, and for the groups whose local error was measured,
    whether each makes error of its own (its outputs over tolerance when run alone)."""

    stats: Mapping[Tap, TensorStats] = field(default_factory=dict)
    creates: Mapping[str, bool] = field(default_factory=dict)
    local_measured: bool = False  # a local step was answered (maybe with nothing: local errors unavailable)
    unfaithful: bool = False  # the taps so far changed what the target computes (the driver's fidelity check)

    def plus(self, stats: Mapping[Tap, TensorStats] = {}, creates: Mapping[str, bool] | None = None,
             unfaithful: bool | None = None) -> "Results":
        return Results({**self.stats, **stats}, dict(creates) if creates is not None else self.creates,
                       self.local_measured or creates is not None,
                       self.unfaithful if unfaithful is None else unfaithful)


@dataclass(frozen=True)
class Prefetch:
    """What a strategy's `prefetch` may read: the target's fusion boundaries and each boundary's local-error unit
    (read once, into the run's plan), the tensors' sizes for the inputs in use, the tap budget of one compile,
    the integer nodes' taps to check exactly, and whether the target runs a lower precision than f32 (exposing
    other tensors than the target does moves f32 results by ~1e-5 where ops cancel: noise against bf16 or f16
    rounding, a false divergence between two f32 runs)."""

    boundaries: tuple[Tap, ...] = ()
    units: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    sizes: Mapping[Tap, int] | None = None
    max_bytes: int | None = None
    exact: tuple[Tap, ...] = ()
    lower: bool = False


class Strategy:
    """A search over taps. Subclasses write `plan()`, a generator that yields `Step`s and reads `self.results`
    (the results after the step it yielded); `next_step` drives it. `groups()` gives, at the end, the fusion
    group each measured node stands for (its unmeasured members), by node key."""

    name = ""
    # Its first step may be measured as the reference's plain run streamed in segments (beyond the tap budget)
    # against a lower precision: the fusion search's boundaries, each segment's values dropped once compared.
    streams = False

    def __init__(self, comparison: Comparison, diverged: Diverged, **_):
        """`make_strategy`'s context (`runtime`, `untappable`, `fusion`, `refine`, `local`, `cut_diverged`: what
        a bisection counts as a diverged cut, `diverged` by default) is offered to every strategy; one that reads
        none of it need not write an ``__init__``."""
        self.comparison = comparison
        self.graph: ModelGraph = comparison.graph
        self.diverged = diverged
        self.results = Results()
        self._plan: Generator[Step, None, None] | None = None

    def next_step(self, results: Results) -> Step | None:
        """The next step given the results so far; None when done."""
        self.results = results
        if self._plan is None:
            self._plan = self.plan()
        try:
            return next(self._plan)
        except StopIteration:
            return None

    def plan(self) -> Generator[Step, None, None]:  # pragma: no cover - every strategy writes its own
        raise NotImplementedError
        yield

    @classmethod
    def prefetch(cls, comparison: Comparison, prefetch: Prefetch) -> tuple[list[Tap], list[Tap] | None]:
        """What the reference's plain run may expose for this strategy's later steps, so that the reference need
        not compile again for them: the taps, and of those the ones later stages compare (None: all of them).
        Nothing by default."""
        return [], None

    @classmethod
    def first_taps(cls, comparison: Comparison, prefetch: Prefetch) -> tuple[Tap, ...] | None:
        """The taps of this strategy's first step when they are known before it starts (its target compile
        can then start beside the reference's untouched run); None when they are not. None by default."""
        return None

    def groups(self) -> dict[str, tuple[str, ...]]:
        return {}

    @property
    def ran(self) -> str:
        """The name of the search that made the measurement (a composite's last part)."""
        return self.name

    @property
    def fell_back(self) -> bool:
        """Whether a composite gave up its first part for another."""
        return False


class FullSearch(Strategy):
    """Every matched candidate tensor."""

    name = "full"

    def __init__(self, comparison: Comparison, diverged: Diverged, *, untappable: frozenset[Tap] = frozenset(), **_):
        super().__init__(comparison, diverged)

    def plan(self) -> Generator[Step, None, None]:
        yield Step(tuple(r for r, _ in self.comparison.match.pairs))

    @classmethod
    def prefetch(cls, comparison: Comparison, prefetch: Prefetch) -> tuple[list[Tap], list[Tap] | None]:
        """The first chunk, whatever the target's precision: both sides then tap the same tensors."""
        pairs = [r for r, _ in comparison.match.pairs]
        return (plan_chunks(comparison.graph, pairs, prefetch.max_bytes, prefetch.sizes)[0] if pairs else []), None


class FusionSearch(Strategy):
    """Fusion-group boundaries, then the members of the groups where error starts (see the module docstring)."""

    name = "fusion"
    streams = True

    def __init__(self, comparison: Comparison, diverged: Diverged, *, runtime: RuntimeGraph | None = None,
                 untappable: frozenset[Tap] = frozenset(),
                 fusion: tuple[tuple[Tap, ...], Mapping[str, tuple[str, ...]]] | None = None, refine: bool = True,
                 local: bool = False, **_):
        """`fusion`: the boundaries and groups already read (`fusion_taps`), else read here from `runtime`."""
        super().__init__(comparison, diverged)
        if fusion is not None:
            self.taps, self._groups = list(fusion[0]), dict(fusion[1])
        else:
            self.taps, self._groups = fusion_taps(comparison, runtime or RuntimeGraph(), untappable)
        self.refine, self.local = refine, local

    def groups(self) -> dict[str, tuple[str, ...]]:
        return self._groups

    @classmethod
    def prefetch(cls, comparison: Comparison, prefetch: Prefetch) -> tuple[list[Tap], list[Tap] | None]:
        """Against a lower precision: the boundaries, and every tensor a unit reads from outside what it computes
        (the values the local-error runs feed in, which only the reference needs: fetched, not compared)."""
        if not prefetch.lower:
            return [], None
        graph = comparison.graph
        fed = [Tap(i, p) for unit in prefetch.units.values() for m in unit for i, p in graph.data_inputs(m)
               if i not in unit and graph[i].kind != "parameter"]
        compared = list(dict.fromkeys([*prefetch.boundaries, *prefetch.exact]))
        return list(dict.fromkeys([*prefetch.boundaries, *fed, *prefetch.exact])), compared

    @classmethod
    def first_taps(cls, comparison: Comparison, prefetch: Prefetch) -> tuple[Tap, ...] | None:
        """The fusion-group boundaries, measured first (`plan`)."""
        return tuple(prefetch.boundaries)

    def plan(self) -> Generator[Step, None, None]:
        yield Step(tuple(self.taps), desc="compare groups")
        if not self.refine:
            return
        graph, stats = self.graph, self.results.stats
        measured = {t.key for t in stats}
        candidates: dict[str, set[str]] = {}
        for tap, s in stats.items():
            if not self.diverged(tap, s):
                continue
            # Everything unmeasured that feeds this tensor since the last measured tensors: the group's members,
            # and ops the runtime graph does not name (the plugin folds some into neighbours silently).
            inside = unmeasured_ancestors(graph, tap.key, measured)
            if len(inside) < 2:
                continue
            # A candidate when some member reads only clean tensors from outside: error may start inside.
            if any(_reads_clean(graph, m, inside, stats, self.diverged) for m in inside):
                candidates.setdefault(tap.key, set()).update(inside)
        if candidates and self.local:
            yield Step(local=True)
        creates = self.results.creates
        to_refine: set[str] = set()
        for key, inside in candidates.items():
            if creates.get(key, True):
                to_refine.update(inside)
        extra = tuple(r for r, _ in self.comparison.match.pairs if r.key in to_refine and r not in stats)
        if extra:
            yield Step(extra, desc="refine")
            measured = {t.key for t in self.results.stats}
            self._groups = {k: tuple(sorted(unmeasured_ancestors(graph, k, measured) - {k},
                                            key=lambda m: graph[m].index)) for k in measured}


class BisectionSearch(Strategy):
    """Binary search for the first position whose cut diverges; see the module docstring."""

    name = "bisection"

    def __init__(self, comparison: Comparison, diverged: Diverged, *, untappable: frozenset[Tap] = frozenset(),
                 cut_diverged: Diverged | None = None, **_):
        super().__init__(comparison, diverged)
        self.cut_diverged = cut_diverged or diverged
        self.matched = {r for r, _ in comparison.match.pairs} - untappable
        self.order = [n.key for n in self.graph.candidates()
                      if any(Tap(n.key, t.port) in self.matched for t in n.outputs)]

    @classmethod
    def prefetch(cls, comparison: Comparison, prefetch: Prefetch) -> tuple[list[Tap], list[Tap] | None]:
        """Against a lower precision: every matched tensor, when all of them fit one compile's budget."""
        if not prefetch.lower:
            return [], None
        every = list(dict.fromkeys([*(r for r, _ in comparison.match.pairs), *prefetch.exact]))
        fits = len(plan_chunks(comparison.graph, every, prefetch.max_bytes, prefetch.sizes)) == 1
        return (every if fits else []), None

    def _cut(self, i: int) -> list[Tap]:
        return [t for t in cut_after(self.graph, self.order, i) if t in self.matched]

    def _missing(self, taps: list[Tap]) -> tuple[Tap, ...]:
        return tuple(t for t in taps if t not in self.results.stats)

    def _diverges(self, cut: list[Tap]) -> bool:
        stats = self.results.stats
        return any(self.cut_diverged(t, stats[t]) for t in cut)

    def plan(self) -> Generator[Step, None, None]:
        order = self.order
        if not order:
            return
        # Each probe measures the cut's tensors not measured yet, in one compile, then reads the cut.
        last = self._cut(len(order) - 1)
        if self._missing(last):
            yield Step(self._missing(last), chunked=False)
        if not self._diverges(last):
            return
        lo, hi = 0, len(order) - 1  # invariant: cut(hi) diverges; cuts before lo do not
        while lo < hi:
            mid = (lo + hi) // 2
            cut = self._cut(mid)
            if self._missing(cut):
                yield Step(self._missing(cut), chunked=False)
            if self._diverges(cut):
                hi = mid
            else:
                lo = mid + 1
        # Confirm: the node at hi with every tensor it reads, so scoring sees a clean input and a dirty output.
        found = order[hi]
        confirm = [Tap(found, t.port) for t in self.graph[found].outputs if Tap(found, t.port) in self.matched]
        confirm += [Tap(k, p) for k, p in self.graph.data_inputs(found) if Tap(k, p) in self.matched]
        if self._missing(confirm):
            yield Step(self._missing(confirm), chunked=False)


class AutoSearch(Strategy):
    """``fusion``, then ``bisection`` from scratch when the fusion taps were unfaithful; see the module docstring."""

    name = "auto"
    streams = True

    def __init__(self, comparison: Comparison, diverged: Diverged, **context):
        super().__init__(comparison, diverged)
        self._context = context
        self._part: Strategy = FusionSearch(comparison, diverged, **context)
        self._fell_back = False

    @classmethod
    def prefetch(cls, comparison: Comparison, prefetch: Prefetch) -> tuple[list[Tap], list[Tap] | None]:
        return FusionSearch.prefetch(comparison, prefetch)

    @classmethod
    def first_taps(cls, comparison: Comparison, prefetch: Prefetch) -> tuple[Tap, ...] | None:
        return FusionSearch.first_taps(comparison, prefetch)

    def groups(self) -> dict[str, tuple[str, ...]]:
        return {} if self._fell_back else self._part.groups()

    @property
    def ran(self) -> str:
        return self._part.name

    @property
    def fell_back(self) -> bool:
        return self._fell_back

    def plan(self) -> Generator[Step, None, None]:
        yield from self._drive(self.results)
        if not self.results.unfaithful:
            return
        self._fell_back = True
        self._part = BisectionSearch(self.comparison, self.diverged, **self._context)
        first = True
        for step in self._drive(Results()):
            yield replace(step, fresh=True) if first else step
            first = False

    def _drive(self, results: Results) -> Generator[Step, None, None]:
        """The current part's steps, each answered with the results the driver hands back."""
        while (step := self._part.next_step(results)) is not None:
            yield step
            results = self.results


_REGISTRY: dict[str, type[Strategy]] = {}


def register_strategy(cls: type[Strategy]) -> type[Strategy]:
    """Make a `Strategy` subclass available by its `name` (``strategy=`` of `bisect()`)."""
    _REGISTRY[cls.name] = cls
    return cls


for _cls in (AutoSearch, FusionSearch, FullSearch, BisectionSearch):
    register_strategy(_cls)


def strategy_names() -> tuple[str, ...]:
    """The registered strategies' names, ``auto`` first."""
    return tuple(_REGISTRY)


STRATEGIES = strategy_names()


def strategy_class(name: str) -> type[Strategy]:
    """The registered strategy `name`."""
    return _REGISTRY[name]


def make_strategy(name: str, comparison: Comparison, diverged: Diverged, **context) -> Strategy:
    """A fresh search of strategy `name`; `context` holds what strategies may use (`runtime`, `untappable`,
    `fusion`, `refine`, `local`), each taking what it needs."""
    return _REGISTRY[name](comparison, diverged, **context)


def fusion_taps(comparison: Comparison, runtime: RuntimeGraph, untappable: frozenset[Tap]
                ) -> tuple[list[Tap], dict[str, tuple[str, ...]]]:
    """The boundaries of the untouched target's fusion groups (from its runtime graph) and the group each
    stands for: what the fusion strategy measures first."""
    graph = comparison.graph
    taps, groups = fusion_boundaries(graph, comparison.target_graph, comparison.match, runtime)
    if untappable:
        # Tensors inside a twin's int8 computation are not exposed: their nodes belong to the next tap's group.
        taps = [t for t in taps if t not in untappable]
        kept = {t.key for t in taps}
        groups = {k: tuple(sorted(unmeasured_ancestors(graph, k, kept) - {k}, key=lambda m: graph[m].index))
                  for k in kept}
    return taps, groups


def _reads_clean(graph: ModelGraph, member: str, inside: set[str], stats: Mapping[Tap, TensorStats],
                 diverged: Diverged) -> bool:
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


def unmeasured_ancestors(graph: ModelGraph, key: str, measured: set[str]) -> set[str]:
    """`key` and the candidates upstream of it reached without crossing a measured node."""
    return graph.upstream(key, stop=lambda k: k in measured or not graph[k].is_candidate)
