"""The remedies a run tried, ranked: those that solve before those that do not, then by their measured cost.

A run with ``fix=True`` against an f16 target may try three remedies, in order of what applying them costs the
user: the activation scale factor (a compile property), clamps (a patched model) and the f32 island (nodes kept
in f32). A diverging run against an f32 target with generated kernels (the CPU's snippets) tries a compile
property before them: the target without those kernels (``SNIPPETS_MODE=DISABLE``). `rank` lists the ones
tried; a remedy that solves but is slower than the bound the user set (``max_fix_slowdown``) is too slow, and
the first remedy that solves within the bound is the one to use. A remedy whose cost was not measured (the f32
island on the CPU plugin, which ignores precision marks; any remedy when ``fix`` was not asked for) keeps its
place in that order after the measured ones. The f32 island solves when its partitioned runs say so and, where
its patched model was run whole on the target, that run does too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bisect_ov.report.report import Report

__all__ = ["Remedy", "rank"]


@dataclass(frozen=True)
class Remedy:
    """One remedy the run tried: what it is, whether it solves, its slowdown (None: not measured) and whether that
    is over the user's bound."""

    kind: str  # "kernel_setting", "scale_factor", "clamp" or "fix"
    title: str
    solves: bool
    slowdown: float | None = None
    too_slow: bool = False
    memory_ratio: float | None = None  # its peak memory against the untouched model's (None: not measured)

    @property
    def usable(self) -> bool:
        """It solves, and within the user's bound (or its cost is not known to be over it)."""
        return self.solves and not self.too_slow


def rank(report: "Report") -> list[Remedy]:
    """The remedies `report` tried (see the module docstring), ranked."""
    bound = report.options.max_fix_slowdown if report.options is not None else None
    found: list[Remedy] = []

    def add(kind: str, title: str, solves: bool, cost) -> None:
        slowdown = cost.slowdown if cost is not None else None
        too_slow = bool(solves and bound is not None and slowdown is not None and slowdown > bound)
        found.append(Remedy(kind, title, solves, slowdown, too_slow, cost.memory_ratio if cost is not None else None))

    if report.kernel_setting is not None:
        add("kernel_setting", report.kernel_setting.setting, report.kernel_setting.solved, report.kernel_setting.cost)
    if report.scale_factor is not None:
        factor = report.scale_factor.factor
        add("scale_factor", f"ACTIVATIONS_SCALE_FACTOR={factor:g}" if factor else "an activation scale factor",
            report.scale_factor.solved, report.scale_factor.cost)
    if report.clamp is not None:
        add("clamp", f"clamps after {len(report.clamp.bounds)} node(s)", report.clamp.solved, report.clamp.cost)
    if report.fix is not None:
        fix = report.fix
        on_target = fix.error_on_target is None or fix.error_on_target <= fix.tolerance  # applied as the user would
        kept = "run as on the reference" if report.same_precision else f"kept in {report.ref.precision}"
        add("fix", f"{len(fix.on_reference)} node(s) {kept}", fix.solved and on_target, fix.cost)
    order = {r.kind: i for i, r in enumerate(found)}
    return sorted(found, key=lambda r: (not r.solves, r.too_slow, math.inf if r.slowdown is None else r.slowdown,
                                        order[r.kind]))
