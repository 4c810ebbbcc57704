"""The README of a reproducer folder: what diverges, on which devices, precisions and OpenVINO versions, the
figures seen in the whole model and in the piece alone, and, for an anonymized piece, what was replaced.

An anonymized reproducer's README names no op of the model: the node is described by its type alone, and the
notes are given in their words that name nothing. Every text taken from the model or the user (node names, op
types, device labels, the notes) is escaped for Markdown and HTML alike: a control character is written as its
Python escape (a newline cannot start a heading, an ANSI sequence cannot reach a terminal that shows the file),
``<``, ``>`` and ``&`` as HTML entities, Markdown's punctuation behind a backslash.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any, Sequence

from bisect_ov.core.records import Repro

__all__ = ["readme"]


_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069]")
_MARKDOWN = re.compile(r"([\\`*_\[\]#|~])")


def shown(text: object) -> str:
    r"""`text` safe in Markdown and HTML: control characters as Python escapes, HTML's specials as entities,
    Markdown's punctuation escaped.

    Examples
    --------
    >>> print(shown("a\n## b <img src=x onerror=alert(1)>"))
    a\\n\#\# b &lt;img src=x onerror=alert(1)&gt;
    """
    text = _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], str(text))
    return _MARKDOWN.sub(r"\\\1", html.escape(text, quote=False))


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2e}" if math.isfinite(x) else str(x)


def _side_line(spec: dict) -> str:
    config = ", ".join(f"{k}={v}" for k, v in spec["config"].items()) or "default properties"
    where = f" ({spec['full_name']})" if spec.get("full_name") else ""
    line = f"{spec['device']}{where}, {config}; ran {spec['precision']}"
    if spec["emulated"]:
        acc = (f", reductions accumulating in {spec['emulated']} over {spec['lanes']} lane(s) (a Loop)"
               if spec.get("lanes") else "")
        line += (f"; emulated: the CPU in f32 with every tensor rounded to {spec['emulated']} between ops{acc}, "
                 f"written in opset arithmetic ({spec['model']}); on another device run.py runs {spec['model_elsewhere']}")
    if not spec["runnable"]:
        line += f"; not run by run.py ({spec.get('recorded', '')}): its values are expected.npz"
    return line


def readme(record: Repro, report: Any, ref_spec: dict, target_spec: dict, *, pieces: Sequence[Any],
           hidden_notes: Sequence[str] = ()) -> str:
    """The README.md text of the folder `record` describes; `hidden_notes`: the notes in words that name nothing
    of the model, shown instead of `record.notes` when the piece is anonymized."""
    hidden = record.anonymized
    what = shown(record.op_type) if hidden else f"{shown(record.op_type)} '{shown(record.node)}'"
    ref_label, target_label = shown(ref_spec["label"]), shown(target_spec["label"])
    ref_version, target_version = ref_spec.get("openvino") or "", target_spec.get("openvino") or ""
    lines = [
        f"# Reproducer: {what} diverges on {target_label} against {ref_label}",
        "",
        "Run it with only OpenVINO and numpy installed (`pip install openvino numpy`):",
        "",
        "```",
        "python run.py                # the devices below; exit code 1 when the divergence reproduces",
        "python run.py --target GPU   # another target device, with its default properties",
        "python run.py --target GPU:f32   # ... or with that inference precision (f32, f16, bf16)",
        "```",
        "",
        "| | |",
        "|---|---|",
        f"| reference | {shown(report.ref.label)}: {shown(_side_line(ref_spec))} |",
        f"| target | {shown(report.target.label)}: {shown(_side_line(target_spec))} |",
    ]
    if ref_version and target_version and ref_version != target_version:
        lines.append(f"| OpenVINO | reference {shown(ref_version)}, target {shown(target_version)}: the sides ran different "
                     "releases |")
    else:
        lines.append(f"| OpenVINO | {shown(target_version or report.openvino_version)} |")
    first = report.first_divergence
    plain = record.held_to == "error in the plain run"
    role = ("first divergence" if first is not None and first.name == record.node else
            "final output that shows the divergence" if first is None and plain else "node asked for")
    goal = ("its error in the plain run (the taps were unfaithful, so no local error stands)" if plain else
            "its local error in the run (alone on the target, fed the reference's inputs)")
    lines += [
        f"| the node | {what}, the {role} of {'the model' if hidden else shown(repr(report.model))} "
        f"({len(report.nodes)} nodes compared) |",
        f"| metric, tolerance | {shown(report.metric)}, {_fmt(record.tolerance)} |",
        f"| {goal} | {_fmt(record.local_error)} |",
        f"| this piece on the target | {_fmt(record.anonymized_error if hidden else record.error)} "
        f"(reproduces: over the tolerance and within {record.factor:g}x of {'that' if plain else 'the local'} error) |",
        f"| the piece | {_piece_line(record, pieces, hidden)} |",
        "",
        "## Files",
        "",
        "* `piece.xml`/`piece.bin`: the piece as OpenVINO IR, weights in f32; its inputs are `in0`, `in1`, ... (the "
        "tensors it reads, with the reference's values) and `model_input<i>` (the model's own inputs a shape "
        "computation reads); its outputs `out0`, ...",
    ]
    if "target_piece.xml" in record.files:
        lines.append("* `target_piece.xml`/`.bin`: the same piece of the target's own model (a second model: a "
                     "quantized twin, the model after a change), fed the same values.")
    if any(f.endswith("_emulated.xml") for f in record.files):
        lines.append("* `*_emulated.xml`: the emulated side's piece with the rounding written in opset arithmetic.")
    lines += [
        "* `inputs.npz`: the values fed, by input name; `expected.npz`: the reference's values of the outputs"
        + (" (the reference run on this piece)." if hidden else " (in the whole model)."),
        "* `repro.json`: devices, properties, tolerance, which inputs and outputs the target stores in its "
        "activation precision (run.py hands them over in it, as the whole model did); `run.py`: the script.",
    ]
    if record.anonymize_tried:
        lines += ["", "## Anonymization", ""]
        if hidden:
            lines.append("Every weight (floating constants of two or more values, integer weights read by a Convert) "
                         "was replaced by seeded normal values of the same shape, dtype, mean and standard deviation; "
                         "every op was renamed after its type and position and its runtime info cleared. The "
                         f"replaced piece still reproduces: {_fmt(record.anonymized_error)} on the target (the "
                         f"original piece: {_fmt(record.error)}).")
        else:
            lines.append("Replacing the weights was tried and the replaced piece did NOT reproduce, so this folder "
                         "holds the model's own weights and names: do not share it where the model must stay private.")
    notes = hidden_notes if hidden else record.notes
    if notes:
        lines += ["", "## Notes", ""] + [f"* {shown(n)}" for n in notes]
    lines += ["", "Written by bisect_ov (`report.repro(folder)` or `bisect-ov repro`)."]
    return "\n".join(lines) + "\n"


def _piece_line(record: Repro, pieces: Sequence[Any], hidden: bool) -> str:
    size = len(record.nodes)
    names = "" if hidden else ": " + ", ".join(f"'{shown(n)}'" for n in record.nodes[:8]) + (" ..." if size > 8 else "")
    if record.grown == 0:
        return f"{size} node(s), the node's fused group{names}"
    tried = "; ".join(f"{len(p.keys)} node(s): {_fmt(e)}" for p, e in zip(pieces, record.attempts))
    return (f"{size} node(s){names}. The fused group alone did not reproduce: the piece grew {record.grown} step(s) "
            f"upstream ({tried})")
