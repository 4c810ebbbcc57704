"""`bisect()`: from a model and two devices to a ranked culprit report.

The front door. Its keywords become one `BisectOptions` record; the run is the composition of the stages in
`bisect_ov.pipeline.stages` (open -> plain -> measure -> score -> experiments) and `bisect_ov.pipeline.assemble` (-> Report).
See ARCHITECTURE.md for the data flow and the record each stage hands on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import textwrap
from dataclasses import fields, replace
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

import numpy as np
from tqdm import tqdm

from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.analysis.tolerance import Tolerance
from bisect_ov.core.errors import DeviceError, InputError
from bisect_ov.core.fileio import files_read
from bisect_ov.engine.ledger import Clock
from bisect_ov.pipeline.assemble import assemble
from bisect_ov.pipeline.decide import decide
from bisect_ov.pipeline.generate import generate
from bisect_ov.pipeline.measure import measure
from bisect_ov.pipeline.options import DEFAULT_MAX_TAP_BYTES, KEYWORDS, BisectOptions
from bisect_ov.pipeline.sides import resolve_sides
from bisect_ov.pipeline.stages import experiments, open_comparison, run_untouched, score
from bisect_ov.pipeline.truth import judge_truth
from bisect_ov.report.report import Report
from bisect_ov.run.devices import Device
from bisect_ov.run.inputs import parameter_specs

__all__ = ["bisect", "run", "documented"]

F = TypeVar("F", bound=Callable[..., Any])
_MARKER = "    {options}\n"


def documented(func: F) -> F:
    """`func` with the ``{options}`` line of its docstring's Parameters replaced by one numpydoc entry per
    option keyword (`KEYWORDS`): the name, the annotation and default of `func`'s signature, the field's doc."""
    parameters = inspect.signature(func).parameters
    missing = [name for name in KEYWORDS if name not in parameters]
    if missing:
        raise TypeError(f"{func.__name__}() lacks the option keyword(s) {missing} of BisectOptions.")
    doc = func.__doc__
    if doc is None:  # python -OO
        return func
    if _MARKER not in doc:
        raise TypeError(f"{func.__name__}'s docstring has no '{_MARKER.strip()}' line for the options.")
    by_name = {f.name: f for f in fields(BisectOptions)}
    entries = []
    for name in KEYWORDS:
        parameter = parameters[name]
        text = textwrap.fill(by_name[name].metadata["doc"], width=112, initial_indent=" " * 8,
                             subsequent_indent=" " * 8, break_on_hyphens=False)
        entries.append(f"    {name} : {parameter.annotation}, default {parameter.default!r}\n{text}\n")
    func.__doc__ = doc.replace(_MARKER, "".join(entries))
    return func


@documented
def bisect(
    model: Any,
    ref: str | Device = "CPU",
    target: str | Device = "GPU",
    inputs: Any = None,
    *,
    target_model: Any = None,
    # devices and compiling
    ref_config: Mapping[str, Any] | None = None,
    target_config: Mapping[str, Any] | None = None,
    # what to tap and search
    strategy: str = "auto",
    metric: str | Callable[[TensorStats], float] = "rel_l2",
    tolerance: float | Tolerance | None = None,
    refine: bool = True,
    max_tap_bytes: int | str | None = DEFAULT_MAX_TAP_BYTES,
    # which experiments run
    budget: str = "default",
    local: bool = True,
    noise: bool = True,
    baseline: bool = True,
    impact: int = 3,
    fix: bool | float = False,
    max_fix_slowdown: float | None = None,
    delegation: bool = False,
    curve: int = 0,
    sensitivity: bool = False,
    truth: Any = None,
    keep: Sequence[str] = (),
    patched_model: str | os.PathLike | None = None,
    # inputs, samples and executors
    seed: int = 0,
    executor: Any = None,
    samples_per_batch: int = 16,
    batch_retries: int = 2,
    classifier_outputs: Sequence[str] | None = None,
    # LLM prompts and generation
    prompt_length: int = 16,
    prompt_lengths: Sequence[int] = (),
    steps: int = 0,
    # output
    progress: bool | None = None,
) -> Report:
    """Find where `target` starts to disagree with `ref` on `model`.

    The keywords after `target_model` are the fields of `BisectOptions`, in its groups and order; their
    entries below are made from the fields' docs (`documented`).

    Parameters
    ----------
    model
        An `ov.Model`, a path to an IR ``.xml`` or an ``.onnx`` file, or anything `openvino.convert_model`
        takes. It is never modified. None with a PyTorch side: ``ov.convert_model(module, example_input=inputs)``.
    ref, target
        Device names: OpenVINO devices (``CPU``, ``GPU``, ``GPU.1``, ``NPU``), precision variants
        (``CPU:f32``, ``CPU:bf16``), emulated devices (``EMU:f16``), or `Device` objects. The reference
        runs in f32 unless its name or `ref_config` chooses a precision. Or the framework the model came from
        (`bisect_ov.frameworks`): a `torch.nn.Module` or ``Torch(module, dtype="f32" | "f64")`` (PyTorch eager),
        ``"ORT"`` (ONNX Runtime on the .onnx model); its values are matched to the nodes by name.
    inputs
        None (seeded random values), a dict name -> array, a list in input order, or a ``.npz``/``.npy`` path;
        or many samples: a `Samples`, a list of dicts (or of lists), a generator, or a folder of ``.npz``/``.npy``
        files. With many samples every one runs on both sides (ranked by final error, top-1 flips counted),
        the search runs on the worst, and each measured node's error is summarised over all samples.
    target_model
        A second model run on the target side and compared node by node with `model` (an int8 or f16 twin,
        or the model after a change). Nodes match by friendly name, then by tensor name.
    {options}

    Returns
    -------
    Report
        Ranked culprits, first divergence, final-output errors, what each side ran with. "No divergence"
        is a valid answer (``report.first_divergence is None``).

    Raises
    ------
    InputError
        Bad model, inputs, device name or option.
    DeviceError
        Compiling or running the model failed on a device.
    """
    given = locals()  # the parameters only: this is the first statement
    options = BisectOptions.from_keywords(**{name: given[name] for name in KEYWORDS})
    return run(model, ref, target, inputs, options, target_model=target_model)


def _made_up(err: DeviceError, setup: Any) -> DeviceError:
    """`err` with the inputs that were made up for a model of dynamic shapes, and how to give others."""
    specs = parameter_specs(setup.comparison.graph.model)  # the sample's order
    if all(spec.pshape.is_static for spec in specs):
        return err
    shapes = ", ".join(f"'{spec.name}' {list(np.shape(a))}" for spec, a in zip(specs, setup.sample.ref))
    said = str(err) if str(err).endswith(".") else f"{err}."
    return DeviceError(f"{said} The inputs were made up ({shapes}: batch 1 and {setup.options.prompt_length} tokens "
                       "where a dimension is dynamic): give inputs of the shapes the model runs at (inputs=, --input, "
                       "--inputs), or another prompt_length (--prompt-length).")


def run(model: Any, ref: str | Device, target: str | Device, inputs: Any, options: BisectOptions, *,
        target_model: Any = None) -> Report:
    """`bisect()` with its options as one record: the stages of `bisect_ov.pipeline.stages`, composed."""
    options.tolerance_model().check_metric(options.metric)
    if options.patched_model is not None:
        from bisect_ov.core.fileio import labelled_files, refuse_overlaps

        if target_model is not None:
            raise InputError("patched_model (--patched-model) marks the model's nodes to stay in f32 on GPU/NPU; against "
                             "target_model (--target-model) the fix keeps the twin's layers as the model has them, which "
                             "no mark does: write the nodes as an NNCF ignored scope (--ignored-scope, or "
                             "report.ignored_scope()) and quantize again with it.")

        refuse_overlaps(labelled_files("patched_model", options.patched_model),
                        [*labelled_files("the model", model), *labelled_files("target_model", target_model)])
    reads = files_read(model, target_model, inputs, ref, target)
    clock = Clock()
    with clock.stage("open"):
        sides = resolve_sides(model, ref, target, options.truth, inputs)
        model = sides.model
        setup = open_comparison(model, sides.ref, sides.target, sides.inputs, target_model, options, clock,
                                truth=sides.truth)
    # Which stage runs, on a bar of its own (a 24-layer model's compiles take seconds with nothing else moving)
    bar = tqdm(total=6, desc="bisect", unit="stage", disable=not setup.runner.progress, leave=False,
               bar_format="{desc}: {n_fmt}/{total_fmt} stages [{elapsed}]")

    @contextlib.contextmanager
    def stage(name: str, doing: str) -> Iterator[None]:
        bar.set_description_str(f"bisect: {doing}")
        with clock.stage(name):
            yield
        bar.update(1)

    try:
        with stage("plain", "untouched runs (compile and run both sides)"):
            try:
                examined = run_untouched(setup)
            except DeviceError as err:  # on inputs it made up, at shapes the model may not run at: say which
                said = _made_up(err, setup) if sides.inputs is None else err
                if said is err:
                    raise
                raise said from err
            setup = replace(setup, untouched=None)  # the samples pass's compiles: released once that run is made
        with stage("generate", "generation steps"):
            generation, examined = generate(setup, examined)
        with stage("measure", "measuring tensors"):
            measurement = measure(setup, examined)
        with stage("score", "scoring"):
            scored = score(setup, examined, measurement)
        with stage("experiments", "experiments (local errors, impact, fix)"):
            findings = experiments(setup, examined, measurement, scored)
            scored = decide(setup, examined, measurement, scored, findings)
            truth = judge_truth(setup, examined, measurement, scored)
        with stage("assemble", "report"):
            report = assemble(setup, examined, measurement, scored, findings, model_source=model,
                              target_source=target_model, generation=generation, truth=truth)
            return dataclasses.replace(report, reads=reads)
    finally:
        bar.close()
        if setup.samples is not None:  # an executor setup from a name, a generator's spill folder
            setup.samples.close()
