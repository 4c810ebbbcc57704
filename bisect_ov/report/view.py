"""One typed view of a `Report`, computed once, that every rendering formats: the terminal page
(`bisect_ov.report.text`), and the HTML page and its Jupyter form (`bisect_ov.report.html`).

`view(report)` gives a `View`: the verdict (`Verdict`: its ``kind``, the first divergences with their causes,
the headline numbers and the facts that follow), both sides (`Side`), the tolerance model (`ToleranceFacts`),
the ranked culprits' cells (`CulpritRow`), the experiments (`Block`), the run's facts (`Fact`, `RunFacts`), the
final outputs, the unmatched nodes and the notes. The renderers read the view only, never the report (the HTML
page's plots are drawn from the report by the function that assembles the page, and handed in). Every
record carries the numbers code reads and the sentence people read (``text``); renderers choose where a
sentence goes and how it looks (a ``Verdict: `` prefix, a badge, a card), never take another rendering's
output apart. Logic tests ``kind``, never the prose.

A node whose tensor exists only inside a kernel the untouched target fused (`NodeResult.inside_kernel`) is
marked wherever it shows (`inside_kernel_text`, the culprit table's `INSIDE_MARK`); nodes set aside for that
(role ``internal``: their kernel's output is within tolerance) are named in the verdict's facts, never as
culprits.

Assumes a finished `Report` (records of statistics, no tensors) and imports nothing from the renderers; the
sentences are plain text: the terminal escapes control characters, HTML escapes everything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from bisect_ov.analysis.headroom import NEAR
from bisect_ov.analysis.names import module_label
from bisect_ov.core.records import Cause, Fidelity, StageCost
from bisect_ov.report.blocks import Block, experiment_blocks
from bisect_ov.report.numbers import fmt, fmt_cosine, fmt_growth
from bisect_ov.report.sides import Side, ToleranceFacts, side, tolerance_facts

if TYPE_CHECKING:
    from bisect_ov.report.report import NodeResult, OutputResult, Report

__all__ = ["view", "View", "RunFacts", "Verdict", "FirstDivergence", "SamplesOver", "Fact", "Side", "ToleranceFacts",
           "CulpritRow", "CulpritTable", "Block", "COLUMNS", "OPTIONAL_COLUMNS", "VERDICT_KINDS", "fmt", "fmt_growth",
           "samples_over", "inside_kernel_text", "kernel_output", "INSIDE_MARK", "INSIDE_LEGEND"]

COLUMNS = ("rank", "node", "op", "#", "error", "inputs", "tol", "growth", "local", "x rounding", "impact", "over tol",
           "headroom", "role", "shape", "nan/inf", "target ran")
# Left out when no culprit has a value; "over tol": on how many of the samples the node is over its tolerance;
# "x rounding": its local error over what rounding alone gives it (the rounding-only baseline); "headroom":
# against an f16 target where some node comes within 2x of 65,504, the powers of two its reference values stay
# below that (`NodeResult.f16_headroom`).
OPTIONAL_COLUMNS = ("local", "x rounding", "impact", "over tol", "headroom", "nan/inf", "target ran")
# diverges: error starts at named nodes; accumulates: over tolerance at the outputs with no single source;
# absorbed: nodes over their tolerance, outputs within theirs; no_divergence: every node within its tolerance.
# When the taps changed what the target computed (the fidelity check failed): localized_by_partitions: error
# starts at a node found by partitioned runs that expose nothing; unfaithful: the outputs diverge and no node can
# be localized on this device (the reason is the headline), or a generation step diverges where the run measured
# node by node does not (a stateful model's plugin-kept cache: its stateless form is what is measured).
VERDICT_KINDS = ("diverges", "accumulates", "absorbed", "no_divergence", "localized_by_partitions", "unfaithful")
_SHORT_DTYPES = {"float32": "f32", "float16": "f16", "float64": "f64", "int32": "i32", "int64": "i64", "int8": "i8",
                 "uint8": "u8", "bool": "bool"}
# After the role of a culprit whose tensor exists only inside a fused kernel of the target, and its legend.
INSIDE_MARK = "^"
INSIDE_LEGEND = "^ = exists only inside a kernel the target fused"


# ----- records -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SamplesOver:
    """A node's error over many samples: over its tolerance on `over` of `count`; p50, p90, max, the worst sample."""

    over: int
    count: int
    p50: float
    p90: float
    max: float
    worst_sample: int
    text: str


@dataclass(frozen=True)
class FirstDivergence:
    """A node where error starts: `ratio` is its error over its tolerance (inf when that has no value); `inside`
    says that its tensor exists only inside a fused kernel of the target (`inside_kernel_text`), else ``""``."""

    node: "NodeResult"
    causes: tuple[Cause, ...]
    ratio: float
    samples: SamplesOver | None
    text: str
    inside: str = ""


@dataclass(frozen=True)
class Fact:
    """One sentence of the report with what it is about (`kind`); `value`, for a labelled fact (``Timings: ...``),
    what follows the label, for a rendering that shows the label its own way."""

    kind: str
    text: str
    value: str = ""


def _labelled(kind: str, label: str, value: str) -> Fact:
    return Fact(kind, f"{label}: {value}", value)


@dataclass(frozen=True)
class Verdict:
    """The answer: `kind` (one of `VERDICT_KINDS`), `label` (``DIVERGES`` or ``no divergence``), `headline` (the
    sentence after the label, capitalised) and `text` (label and sentence as one line), the first divergences
    (at most three; `more_first` the others), the worst final output, the node closest to its tolerance (when
    nothing diverges), the absorbed nodes, the nodes set aside because the untouched target never computed
    their tapped values (role ``internal``) and the facts that follow (kinds ``final_output``, ``absorbed``,
    ``set_aside``, ``inside_kernel``, ``by_layer``, ``downstream``)."""

    kind: str
    label: str
    headline: str
    text: str
    first: tuple[FirstDivergence, ...]
    more_first: tuple["NodeResult", ...]
    worst_output: "OutputResult | None"
    closest: "NodeResult | None"
    absorbed: tuple["NodeResult", ...]
    facts: tuple[Fact, ...]
    set_aside: tuple["NodeResult", ...] = ()

    @property
    def diverges(self) -> bool:
        return self.kind in ("diverges", "accumulates", "localized_by_partitions", "unfaithful")


@dataclass(frozen=True)
class CulpritRow:
    """One ranked culprit and its cells, one per `COLUMNS` entry."""

    node: "NodeResult"
    cells: tuple[str, ...]


@dataclass(frozen=True)
class CulpritTable:
    """The culprits a rendering lists: the columns shown and, per row, the cells of those columns."""

    columns: tuple[str, ...]
    rows: tuple[CulpritRow, ...]
    total: int  # diverged nodes ranked, listed or not

    def cells(self) -> list[tuple[str, ...]]:
        keep = [COLUMNS.index(c) for c in self.columns]
        return [tuple(r.cells[i] for i in keep) for r in self.rows]


@dataclass(frozen=True)
class View:
    """Everything a rendering shows, from one `Report` (see the module docstring)."""

    title: str
    verdict: Verdict
    sides: tuple[Side, Side]
    tolerance: ToleranceFacts
    culprits: tuple[CulpritRow, ...]
    experiments: tuple[Block, ...]
    coverage: Fact | None
    footer: tuple[Fact, ...]  # kinds: fidelity, timings, compiles, costs, cost (their one-line summary), openvino
    run: "RunFacts"
    outputs: tuple["OutputResult", ...]  # the final outputs, in model order
    unmatched: tuple[tuple[str, tuple[str, ...]], ...]  # (side, names) of nodes with no counterpart, non-empty only
    notes: tuple[str, ...]
    ranked: int  # nodes in the ranking (the culprit table shows the first of them)

    def table(self, top: int) -> CulpritTable:
        """The first `top` culprits, without the optional columns none of them fills."""
        rows = self.culprits[:max(0, top)]
        columns = tuple(h for i, h in enumerate(COLUMNS)
                        if h not in OPTIONAL_COLUMNS or any(r.cells[i] != "-" for r in rows))
        return CulpritTable(columns, rows, self.ranked)

    @property
    def any_over(self) -> bool:
        """Whether any node or final output is over its tolerance (generation steps aside)."""
        return bool(self.ranked) or any(o.diverged for o in self.outputs)

    def fact(self, kind: str) -> Fact | None:
        """The footer's fact of `kind`, if the report has one."""
        return next((f for f in self.footer if f.kind == kind), None)


@dataclass(frozen=True)
class RunFacts:
    """What ran, for the page's run section and its header: the models, the sides' labels, the metric and
    strategy, the inputs, the whole run's seconds, the fidelity figures and the OpenVINO release(s)."""

    model: str
    target_model: str | None
    model_hash: str
    ref_label: str
    target_label: str
    compared: int  # nodes compared
    metric: str
    strategy: str
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]  # (name, shape, dtype)
    seconds: float | None  # the sum of the stages' costs, which do not overlap (None without them)
    fidelity: Fidelity | None
    openvino_version: str
    openvino_versions: tuple[tuple[str, str], ...]  # `Report.openvino_versions`: by side when they differ
    schema_version: int


def run_facts(report: "Report") -> RunFacts:
    """The `RunFacts` of `report`."""
    return RunFacts(model=report.model, target_model=report.target_model, model_hash=report.model_hash,
                    ref_label=report.ref.label, target_label=report.target.label, compared=len(report.nodes),
                    metric=report.metric, strategy=report.strategy,
                    inputs=tuple((i.name, tuple(i.shape), i.dtype) for i in report.inputs),
                    seconds=sum(float(c.seconds) for c in report.costs.values()) if report.costs else None,
                    fidelity=report.fidelity,
                    openvino_version=report.openvino_version,
                    openvino_versions=tuple(report.openvino_versions.items()), schema_version=report.schema_version)


def view(report: "Report") -> View:
    """The `View` of `report`."""
    title = f"bisect_ov: {report.model}" + (f" vs {report.target_model}" if report.target_model else "")
    coverage = None
    if report.target_model and report.coverage is not None:
        coverage = _labelled("coverage", "Coverage", f"{report.coverage:.0%} of the model's compute nodes compared "
                                                     "with the twin (directly or inside a kernel the target fused)")
    # The headroom column when the target ran f16 and some node comes within 2x of its range (else the headroom
    # block's one line says how far the closest stays).
    near = report.f16_target and bool(report.headroom(NEAR))
    return View(title=title, verdict=verdict(report),
                sides=(side("ref", report.ref), side("target", report.target)),
                tolerance=tolerance_facts(report.tolerance), culprits=tuple(culprit_row(n, f16=near) for n in report.culprits),
                experiments=tuple(experiment_blocks(report)), coverage=coverage, footer=tuple(footer(report)),
                run=run_facts(report), outputs=tuple(report.outputs),
                unmatched=tuple((s, tuple(names)) for s, names in (report.unmatched or {}).items() if names),
                notes=tuple(report.notes), ranked=len(report.ranking))


# ----- the verdict -------------------------------------------------------------------------------------------

def samples_over(n: "NodeResult") -> tuple[int, int] | None:
    """(k, N): the node is over its tolerance on k of the N samples; None without a per-node pass over samples."""
    spread = n.over_samples or {}
    if "over_tolerance" not in spread or not spread.get("count"):
        return None
    return int(spread["over_tolerance"]), int(spread["count"])


def _samples(n: "NodeResult", metric: str) -> SamplesOver | None:
    counts = samples_over(n)
    if counts is None:
        return None
    s = n.over_samples
    text = (f"Over the {counts[1]} samples it is over its tolerance on {counts[0]}: {metric} p50 {fmt(s['p50'])}, "
            f"p90 {fmt(s['p90'])}, max {fmt(s['max'])} (sample #{int(s['worst_sample'])}).")
    return SamplesOver(counts[0], counts[1], s["p50"], s["p90"], s["max"], int(s["worst_sample"]), text)


def inside_kernel_text(n: "NodeResult", report: "Report | None" = None) -> str:
    """What a node inside a fused kernel of the target is, in a sentence (naming the kernel's compared output
    when `report` has it); ``""`` for a tensor the target stored."""
    if not n.inside_kernel:
        return ""
    output = kernel_output(report, n.inside_kernel) if report is not None else None
    ends = f" (whose output is '{output.label}')" if output is not None else ""
    return (f"It exists only inside the fused kernel '{n.inside_kernel}'{ends}: the tapped value is what a compile "
            "exposing it computed, not what the untouched target computed.")


def kernel_output(report: "Report", kernel: str) -> "NodeResult | None":
    """The compared node whose tensor the target's fused kernel `kernel` stores (the first), if any."""
    return next((n for n in report.nodes if n.inside_kernel is None
                 and ((n.runtime or {}).get("target") or {}).get("layer") == kernel), None)


def _first(n: "NodeResult", metric: str, report: "Report | None" = None) -> FirstDivergence:
    why = f"; {'; '.join(c.text for c in n.diagnosis)}" if n.diagnosis else ""
    inside = inside_kernel_text(n, report)
    within = n.error <= n.tolerance  # named for what the error is, not its size (an overflow, a few elements wrong)
    members = [m for m in n.group if m != n.name]
    fused = (f" It stands for {', '.join(repr(module_label(m)) for m in members[:3])}"
             + (f" and {len(members) - 3} more" if len(members) > 3 else "") + " too (fused with it, not measured on "
             "their own): the error may start in any of them (strategy='full' measures each)."
             if members and not inside else "")
    own = ""
    if within and n.local_error is not None and n.expected_error:
        # Named within tolerance for making far more error than its precision explains (the judge's rule 7).
        precision = report.tolerance.precision if report is not None and report.tolerance.precision else "the target's"
        own = (f" Run alone on the reference's inputs it makes {fmt(n.local_error)}, "
               f"{fmt_growth(n.local_error / max(n.expected_error, 1e-7))} what {precision} rounding alone makes there.")
    text = (f"'{n.label}': {metric} {fmt(n.error)} {'within' if within else '>'} tolerance {fmt(n.tolerance)}, its inputs carry "
            f"{fmt(n.input_error)} (growth {fmt_growth(n.growth)}){why}." + own + (f" {inside}" if inside else "") + fused)
    ratio = n.error / n.tolerance if n.tolerance and math.isfinite(n.error) else math.inf
    return FirstDivergence(n, n.diagnosis, ratio, _samples(n, metric), text, inside)


def verdict(report: "Report") -> Verdict:
    """Where it starts, how bad, why (see `Verdict`)."""
    metric = report.metric
    # The headline's output: one over its tolerance first, then the model's own (logits) before a stateful model's
    # variables ('state:...'), then the largest error.
    worst = max(report.outputs, key=lambda o: (o.diverged, not o.name.startswith("state:"), o.error), default=None)
    firsts = report.first_divergences
    absorbed = tuple(n for n in report.nodes if n.absorbed)
    aside = tuple(n for n in report.nodes if n.set_aside)
    closest = None
    found = report.fidelity
    if found is not None and found.outcome:
        return _unfaithful_verdict(report, found, worst)
    over = [s for s in report.steps if s.diverged]
    if over and not firsts and not report.ranking and not any(o.diverged for o in report.outputs):
        step = over[0]
        headline = (f"Generation step {step.step} diverges ({metric} {fmt(step.error)} > {fmt(step.tolerance)}"
                    f"{', its token flips' if step.flipped else ''}), but the run measured node by node (step "
                    f"{report.examined_step or 0}) stays within tolerance, so no node is named: see the generation "
                    "notes below.")
        return Verdict(kind="unfaithful", label="DIVERGES", headline=headline, text=f"DIVERGES. {headline}", first=(),
                       more_first=(), worst_output=worst, closest=None, absorbed=absorbed,
                       facts=tuple(_verdict_facts(report, worst, absorbed)))
    if not report.diverges and absorbed:
        kind, label = "absorbed", "no divergence"
        start = absorbed_start(absorbed)
        headline = (f"Every final output is within its tolerance; {len(absorbed)} node(s) exceed theirs but the "
                    f"network absorbs the error (it starts at '{start.label}' ({start.op_type}), {metric} "
                    f"{fmt(start.error)} > {fmt(start.tolerance)}): absorbed, not culprits.")
    elif not report.diverges:
        kind, label = "no_divergence", "no divergence"
        predicts = (f"{report.tolerance.precision or 'f32'} rounding"
                    + (" and the twin's quantization" if report.tolerance.quantization else "") + " predicts")
        headline = (f"Every compared node is within what {predicts}" if not aside else
                    f"Every compared value the target computed is within what {predicts} ({len(aside)} set aside: "
                    "see below)")
        closest = max((n for n in report.nodes if n.tolerance > 0 and not n.set_aside),
                      key=lambda n: n.error / n.tolerance, default=None)
        if closest is not None and closest.error > 0:
            headline += (f"; the largest error is {closest.error / closest.tolerance:.0%} of its tolerance "
                         f"({metric} {fmt(closest.error)} at '{closest.name}'): expected error, not a culprit")
        headline += "."
    elif firsts:
        kind, label = "diverges", "DIVERGES"
        names = ", ".join(f"'{n.label}' ({n.op_type}, #{n.index})" for n in firsts[:3])
        more = f" and {len(firsts) - 3} more" if len(firsts) > 3 else ""
        headline = f"Error starts at {names}{more}."
    else:
        kind, label = "accumulates", "DIVERGES"
        headline = ("but no single node creates the error: it accumulates through depth (each node adds less than "
                    "the tolerance). See the nodes that inherit it below.")
    text = f"{label}{', ' if kind == 'accumulates' else '. '}{headline}"
    return Verdict(kind=kind, label=label, headline=headline[:1].upper() + headline[1:], text=text,
                   first=tuple(_first(n, metric, report) for n in firsts[:3]) if kind == "diverges" else (),
                   more_first=tuple(firsts[3:]), worst_output=worst, closest=closest, absorbed=absorbed,
                   facts=tuple(_verdict_facts(report, worst, absorbed) + _kernel_facts(report, aside)),
                   set_aside=aside)


def absorbed_start(absorbed: Sequence["NodeResult"]) -> "NodeResult":
    """Where absorbed error starts: the earliest absorbed node that makes error of its own (its local error over
    its tolerance, else its growth), else the earliest absorbed node; never merely the largest."""
    own = [n for n in absorbed if n.local_error is not None and n.local_error > n.tolerance]
    grown = [n for n in absorbed if n.growth >= 2.0]
    return min(own or grown or list(absorbed), key=lambda n: n.index)


def _unfaithful_verdict(report: "Report", found: Fidelity, worst: "OutputResult | None") -> Verdict:
    """The verdict when the taps changed what the target computed: no node named from them (see `VERDICT_KINDS`)."""
    facts = tuple(_verdict_facts(report, worst, ()))[:1]
    fidelity = f"fidelity {found.ratio:.2f}: {fmt(found.plain_error)} plain, {fmt(found.tapped_error)} with taps"
    if not any(o.diverged for o in report.outputs):
        headline = (f"Every final output is within its tolerance; the per-node errors were measured with taps that "
                    f"changed what the target computed ({fidelity}), so no node is named from them.")
        return Verdict(kind="no_divergence", label="no divergence", headline=headline, text=f"no divergence. {headline}",
                       first=(), more_first=(), worst_output=worst, closest=None, absorbed=(), facts=facts)
    firsts = report.first_divergences
    if found.outcome == "localized_by_partitions" and firsts:
        n = firsts[0]
        group = f" (fused on the target with {', '.join(found.group[:3])})" if found.group else ""
        headline = (f"Error starts at '{n.label}' ({n.op_type}, #{n.index}){group}, found by {found.partitioned_runs} "
                    f"partitioned runs that expose nothing: {found.partition_finding(fmt)}. The per-node "
                    f"errors measured with taps are unfaithful ({fidelity}).")
        first = FirstDivergence(n, n.diagnosis[:1], math.inf, None, f"'{n.label}': {n.diagnosis[0].text}."
                                if n.diagnosis else f"'{n.label}'.")
        return Verdict(kind="localized_by_partitions", label="DIVERGES", headline=headline,
                       text=f"DIVERGES. {headline}", first=(first,), more_first=(), worst_output=worst, closest=None,
                       absorbed=(), facts=facts)
    reason = found.reason or "the taps changed what the target computed"
    headline = (f"The final outputs diverge, but the node where error starts cannot be localized on this device: "
                f"{reason[:1].lower() + reason[1:]}.")
    kernels = report.kernel_setting
    if kernels is not None and kernels.explains:
        headline += (f" Compiled without the kernels it generates for fused subgraphs ({kernels.setting}), the target "
                     f"gives {fmt(kernels.error_after)}: those kernels make the divergence (below).")
    return Verdict(kind="unfaithful", label="DIVERGES", headline=headline, text=f"DIVERGES. {headline}", first=(),
                   more_first=(), worst_output=worst, closest=None, absorbed=(), facts=facts)


def _verdict_facts(report: "Report", worst: "OutputResult | None", absorbed: Sequence["NodeResult"]) -> list[Fact]:
    facts = []
    if worst is not None:
        state = "over" if worst.diverged else "within"
        facts.append(Fact("final_output", f"Final output '{worst.name}': {report.metric} {fmt(worst.error)} ({state} "
                                          f"tolerance {fmt(worst.tolerance)}), max abs {fmt(worst.stats.max_abs)}, "
                                          f"cosine {fmt_cosine(worst.stats.cosine)}."))
        ratio = worst.over_expected
        if ratio is not None and worst.expected is not None:
            facts.append(Fact("rounding_baseline", f"Rounding alone gives it {fmt(worst.expected)}: the target's "
                                                   f"output error is {ratio:.1f}x what its precision explains."))
    if report.diverges and absorbed:
        facts.append(Fact("absorbed", f"Absorbed: {len(absorbed)} node(s) over their tolerance whose error the network "
                                      "takes out again (not first divergences): "
                                      + ", ".join(f"'{n.label}'" for n in absorbed[:3])
                                      + (" ..." if len(absorbed) > 3 else "") + "."))
    from bisect_ov.analysis.names import layer_of

    layers = {k: v for k, v in report.by_layer().items() if layer_of(v[0].name) is not None}
    if len(layers) > 1 and len(report.culprits) > 3:
        facts.append(Fact("by_layer", "By layer: " + "; ".join(f"{k}: {len(v)}" for k, v in list(layers.items())[:6])
                          + (f"; ... ({len(layers)} groups)" if len(layers) > 6 else "") + "."))
    amplifiers = [n for n in report.culprits if n.role == "amplifier"]
    inheritors = [n for n in report.culprits if n.role == "inherits"]
    if amplifiers or inheritors:
        facts.append(Fact("downstream", f"Downstream: {len(amplifiers)} node(s) amplify inherited error, "
                                        f"{len(inheritors)} only pass it on."))
    return facts


def _kernel_facts(report: "Report", aside: Sequence["NodeResult"]) -> list[Fact]:
    """Values the untouched target never computed: those set aside, and the culprits inside a fused kernel."""
    facts = []
    if aside:
        shown = ", ".join(f"'{n.label}' ({report.metric} {fmt(n.error)}, inside '{n.inside_kernel}')" for n in aside[:3])
        facts.append(Fact("set_aside", f"Set aside: {len(aside)} node(s) over their tolerance as tapped exist only "
                                       f"inside a fused kernel of the target whose output is within tolerance: {shown}"
                                       + (" ..." if len(aside) > 3 else "") + "; the untouched target never computed "
                                       "those values, so they are not culprits."))
    inside = [n for n in report.culprits if n.inside_kernel]
    if inside:
        shown = ", ".join(f"'{n.label}' (in '{n.inside_kernel}'" + (f", whose output is '{out.label}')" if (
            out := kernel_output(report, n.inside_kernel or "")) is not None else ")") for n in inside[:3])
        facts.append(Fact("inside_kernel", f"Inside kernels: {len(inside)} culprit(s) exist only inside a kernel the "
                                           f"target fused ({shown}{' ...' if len(inside) > 3 else ''}): their tapped "
                                           "values are what a compile exposing them computed, not what the untouched "
                                           "target computed; the kernel's output is what it computed."))
    return facts


# ----- culprits ----------------------------------------------------------------------------

def _runtime(n: "NodeResult", side: str = "target") -> str:
    rt = n.runtime.get(side) if n.runtime else None
    if not rt:
        return "-"
    text = " ".join(str(p) for p in (rt.get("precision") or "?", rt.get("kernel") or "") if p)
    fused = [f for f in rt.get("fused", []) if f != n.name]
    if fused:
        text += f" +{len(fused)} fused"
    return text


def _nan_inf(n: "NodeResult") -> str:
    c = n.nan_inf
    if not any(c.values()):
        return "-"
    return f"{c['ref_nan']}/{c['ref_inf']} -> {c['target_nan']}/{c['target_inf']}"


def _over_rounding(n: "NodeResult") -> str:
    if n.local_error is None or n.expected_error is None:
        return "-"
    return fmt_growth(n.local_error / max(n.expected_error, 1e-7))


def _headroom(n: "NodeResult") -> str:
    room = n.f16_headroom
    return "-" if math.isnan(room) else "inf" if math.isinf(room) and room > 0 else f"{room:.1f}"


def culprit_row(n: "NodeResult", *, f16: bool = False) -> CulpritRow:
    """A culprit's cells, one per `COLUMNS` entry (``-`` where there is nothing; the headroom only when the target
    ran `f16`)."""
    shape = "x".join(str(d) for d in n.shapes[0]) if n.shapes and n.shapes[0] is not None else "?"
    dtypes = ",".join(sorted({_SHORT_DTYPES.get(d, d) for d in n.dtypes}))
    counts = samples_over(n)
    return CulpritRow(n, (
        str(n.rank), n.label, n.op_type, str(n.index), fmt(n.error), fmt(n.input_error), fmt(n.tolerance),
        fmt_growth(n.growth), fmt(n.local_error), _over_rounding(n), fmt(n.impact),
        "-" if counts is None else f"{counts[0]}/{counts[1]}", _headroom(n) if f16 else "-",
        n.role + ("*" if n.first else "") + (INSIDE_MARK if n.inside_kernel else ""), f"{shape} {dtypes}",
        _nan_inf(n), _runtime(n),
    ))


# ----- the run's facts ---------------------------------------------------------------------------------------

def _cost(name: str, cost: StageCost) -> str:
    """``measure 1.20s (target 1 compile, 1 run)``: what one pipeline stage cost."""
    parts = []
    for which in ("ref", "target"):
        compiles, runs = getattr(cost, f"{which}_compiles"), getattr(cost, f"{which}_infers")
        if compiles or runs:
            parts.append(f"{which} {compiles} compile{'s' * (compiles != 1)}, {runs} run{'s' * (runs != 1)}")
    return f"{name} {float(cost.seconds):.2f}s" + (f" ({'; '.join(parts)})" if parts else "")


def _cost_summary(report: "Report") -> Fact:
    """One short line of what the run cost (the text's default; the three lines above are its ``costs=True``)."""
    # The stages do not overlap, so their times add up; the older reports' timings overlap (a compile inside
    # "experiments"), so without stages no total is given.
    parts = [f"{sum(float(c.seconds) for c in report.costs.values()):.1f}s"] if report.costs else []
    if report.compiles:
        parts.append("compiles " + ", ".join(f"{k} {v}" for k, v in report.compiles.items()))
    value = ", ".join(parts)
    return Fact("cost", f"Cost: {value} (per stage: bisect-ov -v, report.to_text(costs=True))", value)


def footer(report: "Report") -> list[Fact]:
    """The run's facts: the fidelity check, timings, compiles, cost per stage, OpenVINO version and tolerance."""
    facts = []
    if report.fidelity is not None:
        f = report.fidelity
        facts.append(Fact("fidelity", f"Fidelity: final-output error {fmt(f.plain_error)} plain, {fmt(f.tapped_error)} "
                                      f"with taps (ratio {f.ratio:.2f}; 1 means the taps did not change what ran)"))
    if report.timings:
        facts.append(_labelled("timings", "Timings", ", ".join(f"{k} {v:.2f}s" for k, v in report.timings.items())))
    if report.compiles:
        facts.append(_labelled("compiles", "Compiles", ", ".join(f"{k} {v}" for k, v in report.compiles.items())))
    if report.costs:
        facts.append(_labelled("costs", "Cost per stage", "; ".join(_cost(k, c) for k, c in report.costs.items())))
    if report.timings or report.costs or report.compiles:
        facts.append(_cost_summary(report))
    versions = report.openvino_versions
    if len(versions) > 1:
        facts.append(Fact("openvino", f"OpenVINO: reference {versions['reference'].split('-')[0]}, target "
                                      f"{versions['target'].split('-')[0]} (different releases); tolerance: "
                                      f"{tolerance_facts(report.tolerance).text}"))
    elif report.openvino_version:
        facts.append(Fact("openvino", f"OpenVINO {report.openvino_version.split('-')[0]}; tolerance: "
                                      f"{tolerance_facts(report.tolerance).text}"))
    return facts
