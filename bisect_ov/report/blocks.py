"""The experiments of a `Report` as `Block`s of sentences: generation steps, the fix, layer sensitivity, the
delegation range, the contribution curve, kernels that differ, many samples and the noise floor.

Part of the report's view (`bisect_ov.report.view`): each block says what it is (``kind``) and holds its
lines; the terminal prints them (indented lines are details of the line above), HTML lists them. Assumes a
finished `Report`; reads its records only.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bisect_ov.analysis.headroom import NEAR
from bisect_ov.report.numbers import fmt
from bisect_ov.report.remedies import rank

if TYPE_CHECKING:
    from bisect_ov.core.records import KernelSetting
    from bisect_ov.report.report import Report

__all__ = ["Block", "experiment_blocks"]


@dataclass(frozen=True)
class Block:
    """An experiment's lines (`kind`: ``steps``, ``headroom``, ``remedies``, ``kernel_setting``, ``scale_factor``,
    ``clamp``, ``fix``,
    ``sensitivity``, ``delegation``, ``curve``, ``kernels``, ``samples``, ``noise``); `gap`: set apart from what
    comes before by an empty line."""

    kind: str
    lines: tuple[str, ...]
    gap: bool = True


def experiment_blocks(report: "Report") -> list[Block]:
    """The blocks of the experiments that ran, in the order the report shows them."""
    blocks = [_steps(report), _headroom(report), _remedies(report), _kernel_setting(report), _scale_factor(report),
              _clamp(report), _fix(report),
              _sensitivity(report), _delegation(report),
              _curve(report), _kernels(report), _samples(report), _noise(report)]
    return [b for b in blocks if b is not None]


def _steps(report: "Report") -> Block | None:
    if not report.steps:
        return None
    flips = sum(s.flipped for s in report.steps)
    lines = [f"Generation: prefill + {len(report.steps) - 1} decode step(s), both sides fed the reference's token; "
             f"{flips} token flip(s).", "  step  token  target   error  own-step  cache     tol"]
    for s in report.steps:
        mark = " flip" if s.flipped else ""
        over = "*" if s.diverged else " "
        lines.append(f"  {s.step:>4}  {s.token:>5}  {s.target_token:>6}  {fmt(s.error)}{over} {fmt(s.local_error):>8}"
                     f"  {fmt(s.cache_error)} {fmt(s.tolerance)}{mark}")
    return Block("steps", tuple(lines))


def _fix_tolerance(report: "Report") -> str:
    """The tolerance a fix is held to: the final output's, or with several of different tolerances the tightest of
    them, each output's error scaled to it (`bisect_ov.experiments.whole.output_scales`)."""
    assert report.fix is not None
    if _scaled(report):
        return (f"{fmt(report.fix.tolerance)}, the tightest of the final outputs' tolerances (each output's error "
                "scaled by it over its own),")
    if len(report.outputs) > 1:
        return f"{fmt(report.fix.tolerance)}, the final outputs' tolerance,"
    return f"its tolerance {fmt(report.fix.tolerance)}"


def _scaled(report: "Report") -> bool:
    """Whether the fix held each output to its own tolerance on the tightest one's scale (no limit given, and
    outputs of different tolerances)."""
    given = report.options is not None and report.options.fix_tolerance is not None
    return not given and len({o.tolerance for o in report.outputs}) > 1


# A name OpenVINO or a converter made up from a process-wide counter (``Multiply_4330``: a convolution its
# BatchNorm was folded into): it changes with every conversion.
MADE_UP = re.compile(r"[A-Z][A-Za-z]*_\d+")


def made_up_names(names: list[str]) -> list[str]:
    """The `names` that look made up from a counter (`MADE_UP`), each quoted."""
    return [f"'{n}'" for n in names if MADE_UP.fullmatch(n)]


def _fix(report: "Report") -> Block | None:
    fix = report.fix
    if fix is None:
        return None
    keep = fix.on_reference
    if not keep and fix.error_before <= fix.tolerance:
        return Block("fix", (f"Fix: none needed: the final error {fmt(fix.error_before)} is within {_fix_tolerance(report)} "
                             f"with everything on the target, so no node has to stay on the "
                             "reference.",))
    failed = ([f"  {fix.failed[0]} partitioned run(s) could not run on their side (the plugin: {fix.failed[1]}): "
               "those assignments count as unsolved"] if fix.failed else [])
    if not keep:
        names = list(dict.fromkeys(fix.tried))  # a node tried alone and as its pattern is one name
        tried = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
        return Block("fix", (f"Fix: none found: no node kept on the reference brings the final error {fmt(fix.error_before)} "
                             f"within {_fix_tolerance(report)} ({fix.runs} partitioned runs"
                             + (f"; tried: {tried})." if tried else "; no suspect to try)."), *failed))
    # What the fix reached comes after "to"; an unsolved fix says it reached it and that the tolerance was not met.
    scale = " of the worst output, each scaled to the tightest tolerance," if _scaled(report) else ""
    reached = (f"brings the final error{scale} from {fmt(fix.error_before)} to {fmt(fix.error_after)} (tolerance "
               f"{fmt(fix.tolerance)})" if fix.solved else
               f"takes the final error{scale} from {fmt(fix.error_before)} to {fmt(fix.error_after)}, still over its "
               "tolerance "
               f"{fmt(fix.tolerance)} (not solved)")
    minimal = ("; each is needed: with any one of them back on the target the final error is over the tolerance "
               "(checked)" if fix.minimal else "")
    where = (f"on the reference (as it computes them: the target runs {report.ref.precision} too)"
             if report.same_precision else f"on the reference ({report.ref.precision})")
    lines = [f"Fix: keeping {len(keep)} node(s) {where} {reached}, verified by "
             f"partitioned runs ({fix.runs} in all){minimal}:"]
    if fix.patterns:
        lines.append("  as patterns (the same op in each repeated block): " + "; ".join(fix.patterns))
    lines.append("  keep: " + ", ".join(keep[:12]) + (f" ... ({len(keep)} in all)" if len(keep) > 12 else ""))
    if fix.patched_model:
        lines.append(f"  patched model (those nodes marked to stay in f32, rt_info 'precise_0', saved as "
                     f"DisablePrecisionConversion, which the GPU and NPU plugins honour): {fix.patched_model}")
    elif report.options is not None and report.options.patched_model and not fix.solved:
        lines.append(f"  patched model not written to {report.options.patched_model}: the fix is not solved")
    if report.target_model and keep:
        lines.append(f"  NNCF: ignored_scope=nncf.IgnoredScope(names={report.ignored_scope()!r}) (quantizing again "
                     "calibrates the other nodes anew: measure the new model, its error is not the one above)")
        made_up = made_up_names(report.ignored_scope())
        if made_up:
            lines.append(f"  {', '.join(made_up)}: named by the converter from a counter, so another conversion of "
                         "the same model names it otherwise (NNCF then refuses the scope): quantize this IR file as "
                         "saved (ov.Core().read_model) for these names to hold")
    if fix.error_on_target is not None:
        held = ("it holds" if fix.error_on_target <= fix.tolerance else "over the tolerance: this device does not keep "
                "those nodes in f32 as the partitioned runs did (its plugin ignores some marks, or fuses marked ops with "
                "unmarked ones)")
        lines.append(f"  on the target as a patched model (those nodes marked to stay in f32, run whole): "
                     f"final error {fmt(fix.error_on_target)}, {held}")
    return Block("fix", tuple(lines + failed + _cost(fix.cost)))


def _sensitivity(report: "Report") -> Block | None:
    if not report.sensitivity:
        return None
    lines = [f"Layer sensitivity ({len(report.sensitivity)} quantized layers; impact = final error when only that "
             "layer is quantized; local = its own error fed with reference inputs):"]
    lines += [f"  {fmt(s.impact)} impact, {fmt(s.local_error)} local  {s.name} ({s.op_type}): {s.quantization}"
              + (f"; local of its fused group '{s.local_unit}'" if s.local_unit else "")
              for s in report.sensitivity[:10]]
    return Block("sensitivity", tuple(lines))


def _delegation(report: "Report") -> Block | None:
    d = report.delegation
    if d is None or d.first is None:
        return None
    span = f"'{d.first}'" if d.nodes == 1 else f"'{d.first}' .. '{d.last}' ({d.nodes} nodes)"
    return Block("delegation", (f"Delegation: running only {span} on the target gives a final error of "
                                f"{fmt(d.error)}, {d.error / d.full_error:.0%} of the {fmt(d.full_error)} with "
                                "everything on the target.",))


def _curve(report: "Report") -> Block | None:
    if not report.curve:
        return None
    points = ", ".join(f"{p.fraction:.0%}: {fmt(p.error)}" for p in report.curve)
    return Block("curve", (f"Error contribution curve (share of the graph on the target: final error): {points}",),
                 gap=False)


def _headroom(report: "Report") -> Block | None:
    """Against an f16 target: the nodes whose reference values cross the f16 range or come within 2x of it."""
    if not report.f16_target:
        return None
    ranked = report.headroom()
    if not ranked:
        return None
    near = [n for n in ranked if n.f16_headroom < NEAR]
    if not near:
        closest = ranked[0]
        if not math.isfinite(closest.f16_headroom):  # nothing finite and nonzero on the reference
            return Block("headroom", ("f16 headroom: no compared node holds a finite nonzero value on the reference.",))
        return Block("headroom", (f"f16 headroom: every compared node's reference values stay at least 2x below "
                                  f"65,504; the closest, '{closest.label}' ({closest.op_type}), reaches "
                                  f"{_absmax(closest)} (headroom {closest.f16_headroom:.1f} powers of two).",))
    over = sum(n.f16_headroom < 0 for n in near)
    lines = [f"f16 headroom: {over} node(s) whose reference values exceed 65,504 and {len(near) - over} within 2x "
             "of it (headroom = powers of two left; a norm downstream can hide an overflow, so these are listed "
             "even when the outputs stay finite):"]
    for n in near[:8]:
        lines.append(f"  '{n.label}' ({n.op_type}, #{n.index}): max |x| {_absmax(n)}, headroom "
                     f"{n.f16_headroom:.1f}" + (" (overflows f16)" if n.f16_headroom < 0 else ""))
    if len(near) > 8:
        lines.append(f"  ... {len(near) - 8} more (report.headroom(1.0))")
    return Block("headroom", tuple(lines))


def _remedies(report: "Report") -> Block | None:
    """The remedies tried, ranked (`bisect_ov.report.remedies`), when there is a choice or a bound to say about."""
    ranked = rank(report)
    if len(ranked) < 2 and not any(r.too_slow for r in ranked):
        return None
    bound = report.options.max_fix_slowdown if report.options is not None else None
    parts = []
    for i, r in enumerate(ranked, 1):
        cost = f"{r.slowdown:.2f}x the untouched latency" if r.slowdown is not None else "cost not measured"
        cost += f" and {r.memory_ratio:.2f}x its peak memory" if r.memory_ratio is not None else ""
        failed = r.kind == "fix" and report.fix is not None and report.fix.failed
        state = ("too slow (over max_fix_slowdown " + f"{bound:g}x)" if r.too_slow else cost if r.solves
                 else "not found: partitioned runs failed in the plugin (below)" if failed else "does not solve it")
        parts.append(f"{i}. {r.title}: " + (f"{cost}, {state}" if r.too_slow else state))
    use = next((r for r in ranked if r.usable), None)
    tail = (f" Use {use.title} (below)." if use is not None
            else " None solves it within the bound." if any(r.solves for r in ranked) else " None solves it."
            if not (report.fix is not None and report.fix.failed) else " None was found.")
    return Block("remedies", ("Remedies tried, those that solve first, then by measured latency: " + "; ".join(parts)
                              + "." + tail,))


def _kernel_setting(report: "Report") -> Block | None:
    """The untouched target compiled without the kernels its plugin generated for fused subgraphs, run whole."""
    found = report.kernel_setting
    if found is None:
        return None
    if found.quantization:
        return _quantization_setting(report, found)
    lead = _setting_lead("Generated kernels: compiled without them", found)
    count = len(found.kernels)
    if not found.solved:
        return Block("kernel_setting", (f"{lead}: the {count} kernel(s) the plugin generated for fused subgraphs do "
                                        "not explain the divergence.",))
    why = (f"the divergence is made by the {count} kernel(s) the plugin generated for fused subgraphs, not by the "
           f"model's numbers.{_holding(report, found.kernels)}" if found.explains else
           f"within tolerance, but the plain run was only {found.error_before / found.tolerance:.1f}x over it: how the "
           f"{count} generated kernel(s) sum is one of the differences between correct kernels, not shown to be a "
           "defect.")
    return Block("kernel_setting", (f"{lead}: {why}", _apply(report, found), *_cost(found.cost)))


def _setting_lead(title: str, found: "KernelSetting") -> str:
    """What the target compiled with `found`'s setting gave, against its plain run and the tolerance."""
    return (f"{title} ({found.setting}), the target's final error is {fmt(found.error_after)} (from "
            f"{fmt(found.error_before)}, tolerance {fmt(found.tolerance)}) on {found.device}")


def _apply(report: "Report", found: "KernelSetting") -> str:
    """The line that compiles the model as the target did, with `found`'s setting: the target's own properties
    (its precision among them) and the setting."""
    config = {**report.target.config, found.option: found.value}
    shown = ", ".join(f"\"{k}\": \"{v}\"" for k, v in config.items())
    return f"  apply: core.compile_model(model, \"{report.target.device}\", {{{shown}}})"


def _quantization_setting(report: "Report", found: "KernelSetting") -> Block:
    """The untouched target compiled without quantizing compressed-weight products' activations, run whole."""
    count = len(found.kernels)
    names = ", ".join(f"'{k}'" for k in found.kernels[:4]) + (f" and {count - 4} more" if count > 4 else "")
    lead = _setting_lead("Activation quantization: compiled without it", found)
    what = (f"the plugin's int8 quantization of the activations of the {count} matrix product(s) over compressed "
            f"weights ({names})")
    if not found.solved:
        if found.error_after * found.MARGIN <= found.error_before:  # most of it, not all
            share = 1 - found.error_after / found.error_before
            return Block("kernel_setting", (f"{lead}: {what} makes most of the divergence ({share:.0%} of the final "
                                            "error), not all of it: the rest is over the tolerance without it.",))
        return Block("kernel_setting", (f"{lead}: {what} does not explain the divergence.",))
    why = (f"the divergence is made by {what}, not by the model's numbers or its precision." if found.explains else
           f"within tolerance, but the plain run was only {found.error_before / found.tolerance:.1f}x over it.")
    return Block("kernel_setting", (f"{lead}: {why}", _apply(report, found), *_cost(found.cost)))


def _holding(report: "Report", kernels: tuple[str, ...], members: int = 6) -> str:
    """The generated kernel that holds the first divergence, else the first that fuses several ops, as a
    sentence (empty when none is either)."""
    parsed = [(out, tuple(m.strip() for m in ops.split(","))) for out, _, ops in (k.partition(": ") for k in kernels)]
    first = report.first_divergence.name if report.first_divergence is not None else None
    held = next(((out, ops) for out, ops in parsed if first in ops), None)
    if held is None:
        held = next(((out, ops) for out, ops in parsed if len(ops) > 1), None)
        if held is None:
            return ""
        lead = "The first that fuses several ops"
    else:
        lead = f"The first divergence '{first}' is inside one"
    out, ops = held
    more = f" and {len(ops) - members} more" if len(ops) > members else ""
    return f" {lead}: '{out}' fuses {', '.join(ops[:members])}{more}."


def _scale_factor(report: "Report") -> Block | None:
    """The activation scale factor searched for an f16 overflow: the smallest power of two that solves it."""
    found = report.scale_factor
    if found is None:
        return None
    how = ("the GPU plugin's activation scaling written out as ops" if found.emulated
           else "the plugin's own activation scaling")
    if found.factor is None:
        factors = ", ".join(f"{f:g}" for f, _ in found.tried)
        errors = ", ".join(fmt(e) for _, e in found.tried)
        return Block("scale_factor", (
            f"Activation scale factor: none of {factors} brings the final error under {fmt(found.tolerance)} on "
            f"{found.device} ({how}; final errors {errors}): the values that overflow are not only between a linear "
            "layer and a norm, where the scaling acts (values from an embedding table, a Gather, are not scaled).",))
    smaller = found.error_at(found.factor / 2)
    lines = [f"Activation scale factor: ACTIVATIONS_SCALE_FACTOR={found.factor:g} brings the final error from "
             f"{fmt(found.error_before)} to {fmt(found.error_after or 0.0)} (tolerance {fmt(found.tolerance)}) on "
             f"{found.device}, {how}"
             + (f"; {found.factor / 2:g} does not ({fmt(smaller)})" if smaller is not None else "") + "."
             + (" Norms written out as ops round their squares there, where a GPU's fused norm kernel may not: "
                "the GPU may need a smaller factor." if found.emulated else ""),
             f"  apply: core.compile_model(model, \"GPU\", {{\"ACTIVATIONS_SCALE_FACTOR\": \"{found.factor:g}\"}})"]
    return Block("scale_factor", tuple(lines + _cost(found.cost)))


def _clamp(report: "Report") -> Block | None:
    """Clamps after the overflow's origins, run whole on the target: whether they solve it, and what they cost."""
    found = report.clamp
    if found is None:
        return None
    # The bound as it is (65504, not "6.6e+04": a clamp at the rounded value overflows f16 again).
    shown = ", ".join(f"'{name}' at {bound:.8g}" for name, bound in found.bounds[:4])
    shown += f" and {len(found.bounds) - 4} more" if len(found.bounds) > 4 else ""
    if not found.solved:
        return Block("clamp", (
            f"Clamp: clamping {shown} leaves the final error at {fmt(found.error_after)} (it was "
            f"{fmt(found.error_before)}; tolerance {fmt(found.tolerance)}) on {found.device}: what follows needs the "
            "values themselves, not a bounded stand-in.",))
    minimal = (f", none of them can be dropped ({found.runs} patched models run)" if len(found.bounds) > 1 else "")
    lines = [f"Clamp: clamping {shown} brings the final error from {fmt(found.error_before)} to "
             f"{fmt(found.error_after)} (tolerance {fmt(found.tolerance)}) on {found.device}{minimal}.",
             "  apply: ov.save_model(bisect_ov.clamp_after(model, dict(report.clamp.bounds)), \"clamped.xml\")"]
    return Block("clamp", tuple(lines + _cost(found.cost)))


def _cost(cost) -> list[str]:
    """A remedy's measured latency against the untouched model's, as one indented line (none when not measured)."""
    if cost is None:
        return []
    where = (f"{cost.device}, the CPU running the emulation: not the real device's cost" if cost.emulated
             else cost.device)
    memory = (f"; peak memory to compile and run +{cost.peak_mb:.0f} MB against +{cost.untouched_peak_mb:.0f} MB "
              "untouched, each in a fresh process" if cost.peak_mb is not None and cost.untouched_peak_mb is not None
              else "")
    return [f"  cost: {cost.seconds * 1e3:.3g} ms per inference against {cost.untouched_seconds * 1e3:.3g} ms "
            f"untouched ({cost.slowdown:.2f}x; median of {cost.repeats}, on {where}){memory}"]


def _absmax(n) -> str:
    return fmt(n.ref_absmax if n.ref_absmax is not None else 0.0)


def _kernels(report: "Report") -> Block | None:
    differ = report.kernel_differences
    if not differ:
        return None
    shown = ", ".join(f"'{n.name}'" + ("*" if n.diverged else "") for n in differ[:8])
    return Block("kernels", (f"Kernels differ between the sides on {len(differ)} of {len(report.nodes)} nodes "
                             f"(* = diverged): {shown}" + (" ..." if len(differ) > 8 else ""),))


def _samples(report: "Report") -> Block | None:
    samples = report.samples
    if samples is None:
        return None
    missing = set(samples.missing)
    measured = [e for i, e in enumerate(samples.errors) if i not in missing]
    nonfinite = sum(not math.isfinite(e) for e in measured)
    mean = (f"mean {fmt(samples.error_mean)}" if not nonfinite else "not finite on any sample" if nonfinite == len(measured)
            else f"mean {fmt(samples.error_mean)} over the {len(measured) - nonfinite} finite ({nonfinite} not finite)")
    median = f", median {fmt(statistics.median(measured))}" if len(measured) > 2 and not nonfinite else ""
    processes = f" ({samples.workers} worker process{'es' if samples.workers != 1 else ''})" if samples.workers else ""
    where = "" if samples.executor in ("", "in-process") else f" on {samples.executor}{processes}"
    line = (f"Samples: {samples.count} run on both sides{where}; final error {mean}{median}, "
            f"max {fmt(samples.error_max)} (sample #{samples.worst}"
            + (f", '{samples.worst_file}'" if samples.worst_file else "") + ", " + (
                "on which the search ran)" if samples.examined in (None, samples.worst)
                else f"the search ran on sample #{samples.examined})"))
    if samples.classifier:
        line += (f"; top-1 answer differs on {samples.top1_flips} of {samples.count}"
                 f", reference top-1 outside the target's top-{samples.k} on {samples.topk_misses}")
        if samples.class_outputs:
            line += f" (class scores: {', '.join(samples.class_outputs)})"
    if samples.partial:
        line += (f"; PARTIAL: {len(samples.missing)} of {samples.given} not measured, "
                 f"{len(samples.spread_missing)} missing from the per-node spread")
    return Block("samples", (line + ".",))


def _noise(report: "Report") -> Block | None:
    noise = report.noise
    if noise is None:
        return None
    measured = noise.items()
    if not measured:
        return None
    what = " and ".join({"run_to_run": "two runs", "compile_to_compile": "two compiles"}[k] for k, _ in measured)
    if not noise.floor:
        line = f"Noise: the target gave bit-identical outputs across {what}."
    else:
        line = ("Noise: the target's outputs differ by "
                + ", ".join(f"{fmt(v)} {k.replace('_', ' ')}" for k, v in measured) + ".")
    return Block("noise", (line,), gap=False)
