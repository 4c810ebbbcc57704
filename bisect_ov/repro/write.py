"""Writing a reproducer folder: the smallest piece of the model that still shows a node's divergence, verified
by running it as ``run.py`` will before anything is written.

`write_repro(report, source, folder)` takes the report's first divergence (or `node`), cuts its fused group out
of the model (`bisect_ov.repro.piece`), feeds it the reference's values of the tensors it reads, and runs the
folder's own script (`bisect_ov.repro.script.run`) on the files written to a temporary folder beside `folder`.
The piece reproduces when its error on the target is over the node's tolerance and within `factor` (2x by
default) of the node's local error in the run (its error there when no local error was measured). When it does
not (the defect needs the kernels around it), the piece grows upstream step by step (`growth`) up to `max_nodes`;
when none reproduces, nothing is written and the error says what each size gave. With ``anonymize=True`` the
piece's weights and names are replaced (`bisect_ov.repro.anonymize`) and the replaced piece is kept only if it
still reproduces. The verified folder is then renamed into place (`bisect_ov.repro.folder.place`): `folder` is
checked before any work, and a failure leaves it as it was.

Assumptions: `source` holds the comparison and the examined sample of the run `report` came from
(`ReproSource`); both sides are devices ``run.py`` can rebuild (`bisect_ov.repro.sides`).
"""

from __future__ import annotations

import json
import math
import numbers
import os
import pathlib
import shutil
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import openvino as ov

from bisect_ov.core.checks import check_flag, check_seed, is_integer
from bisect_ov.core.errors import InputError
from bisect_ov.core.records import Repro
from bisect_ov.engine.comparison import Comparison, Sample
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap, tap_model
from bisect_ov.repro import script
from bisect_ov.repro.anonymize import anonymized
from bisect_ov.repro.culprit import choose, plain_goal
from bisect_ov.repro.folder import FILES, FORMAT, check_folder, place, scratch_beside
from bisect_ov.repro.piece import MAX_NODES, Piece, build_piece, feed_values, growth, unit_keys
from bisect_ov.repro.readme import readme
from bisect_ov.repro.sides import side_spec
from bisect_ov.run.emulate_ir import saveable_emulation

__all__ = ["FACTOR", "FILES", "OPTIONS", "ReproSource", "check_folder", "check_options", "reproduces", "write_repro"]

FACTOR = 2.0  # the piece alone must give the node's local error within this factor
OPTIONS = ("node", "anonymize", "overwrite", "factor", "max_nodes", "seed")


@dataclass(frozen=True, eq=False)
class ReproSource:
    """What a report needs to write a reproducer, kept in memory with it: the run's comparison (models, node
    match, devices), the examined sample's inputs and the untouched target's runtime graph."""

    comparison: Comparison
    sample: Sample
    target_runtime: RuntimeGraph

    def write(self, report: Any, folder: str | os.PathLike, **options: Any) -> Repro:
        """`write_repro(report, self, folder, **options)`; an option it does not take is refused by name."""
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise InputError(f"report.repro() takes no option {', '.join(map(repr, unknown))}. Its options: "
                             f"{', '.join(OPTIONS)}.")
        return write_repro(report, self, folder, **options)


def reproduces(error: float, local: float, tolerance: float, factor: float = FACTOR) -> bool:
    """Over `tolerance`, and within `factor` of `local` (an infinite local error wants an infinite one)."""
    if not error > tolerance:
        return False
    if math.isinf(local) or math.isinf(error):
        return math.isinf(local) and math.isinf(error)
    return local / factor <= error <= local * factor


def write_repro(report: Any, source: ReproSource, folder: str | os.PathLike, *, node: str | None = None,
                anonymize: bool = False, overwrite: bool = False, factor: float = FACTOR,
                max_nodes: int = MAX_NODES, seed: int = 0) -> Repro:
    """Write the reproducer of `node` (default: the first divergence) into `folder`; see the module docstring.

    Raises
    ------
    InputError
        Nothing diverges; the node is within its tolerance; `folder` is not empty (without `overwrite`) or cannot
        be written; a side run.py cannot rebuild; anonymizing with a recorded reference; no piece up to
        `max_nodes` reproduces (the message gives each size's error).
    """
    check_options(node=node, anonymize=anonymize, factor=factor, max_nodes=max_nodes, seed=seed)
    folder = check_folder(folder, overwrite)
    comparison = source.comparison
    graph = comparison.graph
    if report.metric not in script.METRICS:
        raise InputError(f"A reproducer measures with {sorted(script.METRICS)}; this report's metric is "
                         f"'{report.metric}'. Run bisect(..., metric='rel_l2') and write the reproducer from that report.")
    culprit, notes, extra = choose(report, graph, node)
    ref_spec = side_spec(comparison.ref, report.ref, "reference")
    target_spec = side_spec(comparison.target, report.target, "target")
    if anonymize and not ref_spec["runnable"]:
        raise InputError("An anonymized piece needs the reference run on it (its expected values change with the "
                         "weights), and the reference is a recorded run. Write the reproducer without anonymize, or "
                         "compare against a live reference.")
    precision = {"ref": _typed(comparison.ref), "target": _typed(comparison.target)}
    ref_spec["activation_precision"], target_spec["activation_precision"] = precision["ref"], precision["target"]
    unit = unit_keys(graph, culprit.key, tuple(culprit.group) + extra)
    outputs = [Tap(culprit.key, t.port) for t in graph[culprit.key].outputs if Tap(culprit.key, t.port) in comparison.target_of]
    pieces = [build_piece(comparison, source.target_runtime, keys, outputs, target_precision=precision["target"],
                          ref_precision=precision["ref"]) for keys in growth(graph, unit, max_nodes=max_nodes)]
    values = _ref_values(comparison, source.sample, [t for p in pieces for t in p.fed_taps()] + outputs)
    plain = plain_goal(report, culprit)
    # Against a quantized twin a local error runs the node without its input quantizers, which the piece holds.
    quantized = comparison.twin and bool(comparison.match.quantized)
    local_error = culprit.local_error if not quantized else None
    local = plain if plain is not None else local_error if local_error is not None else culprit.error
    held_to = ("error in the plain run" if plain is not None else
               "local error" if local_error is not None else "error in the run")
    if plain is not None:
        notes.append((f"The taps were unfaithful: the piece is held to '{culprit.name}''s error in the plain run, not "
                      "to a local error measured by a piece the target compiled otherwise.",
                      "The taps were unfaithful: the piece is held to the node's error in the plain run, not to a "
                      "local error measured by a piece the target compiled otherwise."))
    elif quantized and culprit.local_error is not None:
        notes.append((f"Against a twin '{culprit.name}''s local error ran it without its input quantizers, which the "
                      "piece holds: the piece is held to its error in the run.", "Against a twin a node's local error "
                      "runs it without its input quantizers, which the piece holds: it is held to its error in the run."))
    elif culprit.local_error is None:
        notes.append((f"No local error was measured for '{culprit.name}': the piece is held to its error in the run.",
                      "No local error was measured for the node: the piece is held to its error in the run."))
    common = {"report": report, "culprit": culprit, "ref_spec": ref_spec, "target_spec": target_spec,
              "tolerance": culprit.tolerance}
    with scratch_beside(folder) as scratch:
        attempts: list[float] = []
        chosen = None
        for step, piece in enumerate(pieces):
            where = pathlib.Path(scratch) / f"size{step}"
            _write_files(where, piece, feed_values(piece, source.sample, values),
                         {f"out{i}": values[t] for i, t in enumerate(outputs)}, **common)
            error = script.run(where)["error"]
            attempts.append(error)
            if reproduces(error, local, culprit.tolerance, factor):
                chosen = (step, piece, where, error)
                break
        if chosen is None:
            sizes = ", ".join(f"{len(p.keys)} node(s): {_fmt(e)}" for p, e in zip(pieces, attempts))
            raise InputError(
                f"No piece around '{culprit.name}'" + (f" (standing for '{node}', which cannot be cut out alone)"
                                                       if node is not None and str(node) != culprit.name else "")
                + f" reproduces its {held_to} {_fmt(local)} (tolerance "
                f"{_fmt(culprit.tolerance)}, within {factor:g}x) on {report.target.name}: {sizes}. The divergence needs "
                f"more of the model than {max_nodes} nodes upstream (max_nodes=), or the node's error is inherited; "
                "nothing was written.")
        step, piece, where, error = chosen
        anonymize_result: tuple[pathlib.Path, float] | None = None
        if anonymize:
            anonymize_result = _anonymize(pathlib.Path(scratch), piece, source.sample, values, seed=seed, local=local,
                                          factor=factor, **common)
        if anonymize_result is not None:
            where, anon_error = anonymize_result
        record = Repro(
            folder=str(folder), node=culprit.name, op_type=culprit.op_type,
            nodes=tuple(graph[k].name for k in piece.keys), error=error, local_error=local,
            tolerance=culprit.tolerance, factor=factor, reproduces=True, grown=step, attempts=tuple(attempts),
            anonymize_tried=anonymize, anonymized=anonymize_result is not None,
            anonymized_error=anonymize_result[1] if anonymize_result is not None else None,
            files=tuple(sorted(p.name for p in where.iterdir()) + ["README.md"]), notes=tuple(n for n, _ in notes),
            held_to=held_to,
        )
        written = json.loads((where / "repro.json").read_text(encoding="utf-8"))
        (where / "README.md").write_text(readme(record, report, written["reference"], written["target"],
                                                pieces=pieces[:step + 1], hidden_notes=tuple(a for _, a in notes)),
                                         encoding="utf-8")
        place(where, folder, pathlib.Path(scratch))
    return record


def check_options(*, node: Any = None, anonymize: Any = False, factor: Any = FACTOR, max_nodes: Any = MAX_NODES,
                  seed: Any = 0) -> None:
    """Refuse a reproducer option of the wrong type or range, naming it (`bisect()`'s words for its options).

    Raises
    ------
    InputError
        With the option, what is valid and what was given.
    """
    if node is not None and not (isinstance(node, str) or is_integer(node)):
        raise InputError(f"node must be a node's name (a str, one of report.culprits) or its index; got {node!r:.60}.")
    check_flag("anonymize", anonymize)
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or not (math.isfinite(factor) and float(factor) >= 1):
        raise InputError(f"factor must be a finite number >= 1 (how far the piece's error may be from the local error); "
                         f"got {factor!r:.60}.")
    if not is_integer(max_nodes) or max_nodes < 1:
        raise InputError(f"max_nodes must be an integer >= 1 (the largest piece growth tries, {MAX_NODES} by default); "
                         f"got {max_nodes!r:.60}.")
    check_seed("seed", seed)


def _typed(device) -> str:
    """The precision a side's pieces hand values over in (bf16, f16), as `OpenVINODevice` types them."""
    precision = getattr(device, "activation_precision", "")
    return precision if precision in ("bf16", "f16") and not getattr(device, "emulated", False) else ""


def _ref_values(comparison: Comparison, sample: Sample, taps: Sequence[Tap]) -> dict[Tap, np.ndarray]:
    """The reference's values of `taps` in the whole model, in one tapped compile."""
    graph = comparison.graph
    taps = [t for t in dict.fromkeys(taps) if graph[t.key].kind != "parameter"]
    tapped = tap_model(graph, taps)
    compiled = comparison.ref.compile(tapped.model, taps=tapped.added_outputs)
    out = compiled.infer(list(sample.ref), share_outputs=False)
    return {t: np.array(out[i]) for t, i in zip(taps, tapped.tap_outputs)}


def _write_files(where: pathlib.Path, piece: Piece, inputs: dict[str, Any], expected: dict[str, np.ndarray] | None,
                 *, report: Any, culprit: Any, ref_spec: dict, target_spec: dict, tolerance: float) -> None:
    """The folder's files for `piece`; `expected` None: the reference run on the piece gives them."""
    where.mkdir(parents=True)
    ov.save_model(piece.ref.model, str(where / "piece.xml"), compress_to_fp16=False)
    sides = {"reference": dict(ref_spec), "target": dict(target_spec)}
    for role, side, real in (("reference", piece.ref, "piece.xml"),
                             ("target", piece.target, "target_piece.xml" if piece.twin else "piece.xml")):
        spec = sides[role]
        if real != "piece.xml":
            ov.save_model(side.model, str(where / real), compress_to_fp16=False)
        spec["model"] = spec["model_elsewhere"] = real
        if spec["emulated"]:
            emulated = f"{role}_emulated.xml"
            lanes = spec.get("lanes")
            model = saveable_emulation(side.model, spec["emulated"], reductions=lanes is not None, lanes=lanes or 16)
            ov.save_model(model, str(where / emulated), compress_to_fp16=False)
            spec["model"] = emulated
        precision = spec.pop("activation_precision", "") or None
        spec["typed_precision"] = precision
        spec["typed_inputs"] = list(side.typed_inputs) if precision else []
        spec["typed_outputs"] = list(side.typed_outputs) if precision else []
    spec_doc = {
        "format": FORMAT, "version": 1,
        "title": f"{culprit.op_type} diverges on {target_spec['label']} against {ref_spec['label']}",
        "metric": report.metric, "node_op_type": culprit.op_type,
        "reference": sides["reference"], "target": sides["target"],
        "outputs": [{"name": n, "tolerance": tolerance} for n in piece.names],
        "inputs": sorted(inputs),
        "openvino": ov.get_version(),
    }
    (where / "repro.json").write_text(json.dumps(spec_doc, indent=1), encoding="utf-8")
    _savez(where / "inputs.npz", {k: np.asarray(v) for k, v in inputs.items()})
    shutil.copyfile(script.__file__, where / "run.py")
    if expected is None:
        spec_loaded = json.loads((where / "repro.json").read_text(encoding="utf-8"))
        expected = dict(zip(piece.names, script.run_side(ov.Core(), where, spec_loaded, "reference",
                                                         {k: np.asarray(v) for k, v in inputs.items()})))
    _savez(where / "expected.npz", expected)


def _savez(path: pathlib.Path, arrays: dict[str, np.ndarray]) -> None:
    np.savez(path, **arrays)  # type: ignore[arg-type]  # numpy's stub types the keyword arrays as allow_pickle


def _anonymize(scratch: pathlib.Path, piece: Piece, sample: Sample, values, *, seed: int, local: float, factor: float,
               **common) -> tuple[pathlib.Path, float] | None:
    """The anonymized piece's folder and error when it still reproduces (a few seeds tried), else None."""
    for attempt in range(3):
        replaced = anonymized(piece, seed=seed + attempt)
        where = scratch / f"anonymized{attempt}"
        _write_files(where, replaced, feed_values(replaced, sample, values), None, **common)
        error = script.run(where)["error"]
        if reproduces(error, local, common["tolerance"], factor):
            return where, error
    return None


def _fmt(x: float) -> str:
    return f"{x:.1e}" if math.isfinite(x) else str(x)
