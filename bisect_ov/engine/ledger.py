"""What a comparison cost and what it ran with: wall time per step and stage (`Clock`), and the `Ledger` of
compiles, inferences and the runtime facts (kernel, precision, fusion group) of every compiled layer.

Both only accumulate: nothing reads them to decide what to run next, so the order in which the engine's
functions are called never changes what they compute.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Any, Iterator

from bisect_ov.model.runtime import RuntimeGraph

log = logging.getLogger(__name__)

__all__ = ["Clock", "Ledger", "SIDES"]

SIDES = ("ref", "target")


class Clock:
    """Wall time per named step (`clock("compile")`), and per pipeline stage (`clock.stage("measure")`) the
    time and the compiles and inferences made on each side while it ran: what each stage cost."""

    def __init__(self) -> None:
        self.stages: dict[str, float] = {}
        self.costs: dict[str, dict[str, float]] = {}
        self._stage = "open"
        self._stage_start = time.perf_counter()

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages[stage] = round(self.stages.get(stage, 0.0) + time.perf_counter() - start, 4)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Attribute what happens meanwhile to pipeline stage `name`."""
        outer, outer_start = self._stage, self._stage_start
        self._stage, self._stage_start = name, time.perf_counter()
        log.debug("Stage '%s' starts.", name)
        try:
            yield
        finally:
            cost = self._cost(name)
            seconds = time.perf_counter() - self._stage_start
            cost["seconds"] = round(cost["seconds"] + seconds, 4)
            self._stage, self._stage_start = outer, outer_start
            log.info("Stage '%s': %.2f s, compiles %d + %d, inferences %d + %d (reference + target).", name, seconds,
                     cost.get("ref_compiles", 0), cost.get("target_compiles", 0), cost.get("ref_infers", 0),
                     cost.get("target_infers", 0))

    def snapshot(self) -> dict[str, dict[str, float]]:
        """The costs so far, the running stage's time included (a copy)."""
        costs = {k: dict(v) for k, v in self.costs.items()}
        running = costs.setdefault(self._stage, _empty_cost())
        running["seconds"] = round(running["seconds"] + time.perf_counter() - self._stage_start, 4)
        return costs

    def count(self, what: str, side: str, n: int = 1) -> None:
        """Count `n` compiles or inferences (`what`: ``compiles``/``infers``) on `side` in the current stage."""
        self._cost(self._stage)[f"{side}_{what}"] += n

    def _cost(self, name: str) -> dict[str, float]:
        return self.costs.setdefault(name, _empty_cost())


def _empty_cost() -> dict[str, float]:
    return {"seconds": 0.0, "ref_compiles": 0, "target_compiles": 0, "ref_infers": 0, "target_infers": 0}


class Ledger:
    """Compiles and inferences per side, and what every compile ran with.

    `runtime[side]` is the runtime facts of every compute layer seen in any compile, by original op name (the
    first compile that names an op wins), for the report. What a side ran with (its `DeviceInfo`) is in the
    untouched run's record (`bisect_ov.engine.untouched`): nothing reads the ledger to decide what to run.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self._compiles = {side: 0 for side in SIDES}
        self.runtime: dict[str, dict[str, dict[str, Any]]] = {side: {} for side in SIDES}

    @property
    def compiles(self) -> dict[str, int]:
        """Compiles made so far per side (a copy)."""
        return dict(self._compiles)

    def compiled(self, side: str, compiled: Any = None) -> None:
        """Count one compile on `side`; with the compiled model, note what it runs with."""
        self._compiles[side] += 1
        self.clock.count("compiles", side)
        if compiled is not None:
            self.note(side, compiled)

    def ran(self, side: str, n: int = 1) -> None:
        """Count `n` inferences on `side` (for the per-stage cost)."""
        self.clock.count("infers", side, n)

    def note(self, side: str, compiled: Any) -> None:
        """Remember the per-layer runtime facts of a side's compile."""
        if not compiled.info.emulated:
            _collect_runtime(self.runtime[side], compiled.runtime)


def _collect_runtime(into: dict[str, dict], runtime: RuntimeGraph) -> None:
    for name, layer in runtime.by_original.items():
        if layer.is_compute:
            into.setdefault(name, {"layer": layer.name, "layer_type": layer.layer_type,
                                   "precision": layer.runtime_precision, "kernel": layer.primitive_type,
                                   "fused": list(layer.original_names)})
