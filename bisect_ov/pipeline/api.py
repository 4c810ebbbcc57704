"""`bisect()`: from a model and two devices to a ranked culprit report.

The front door. Its keywords become one `BisectOptions` record; the run is the composition of the stages in
`bisect_ov.pipeline.stages` (open -> plain -> capture -> score -> experiments) and `bisect_ov.pipeline.assemble` (-> Report).
See ARCHITECTURE.md for the data flow and the record each stage hands on.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Sequence

from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.analysis.tolerance import Tolerance
from bisect_ov.engine.session import Clock
from bisect_ov.pipeline.assemble import assemble
from bisect_ov.pipeline.options import DEFAULT_MAX_TAP_BYTES, BisectOptions
from bisect_ov.pipeline.stages import absorb, experiments, generate, measure, open_comparison, plain_run, score
from bisect_ov.report.report import Report
from bisect_ov.run.devices import Device

__all__ = ["bisect", "run"]



def bisect(
    model: Any,
    ref: str | Device = "CPU",
    target: str | Device = "GPU",
    inputs: Any = None,
    *,
    ref_config: Mapping[str, Any] | None = None,
    target_config: Mapping[str, Any] | None = None,
    target_model: Any = None,
    metric: str | Callable[[TensorStats], float] = "rel_l2",
    tolerance: float | Tolerance | None = None,
    seed: int = 0,
    strategy: str = "auto",
    budget: str = "default",
    refine: bool = True,
    local: bool = True,
    impact: int = 3,
    fix: bool | float = False,
    delegation: bool = False,
    curve: int = 0,
    sensitivity: bool = False,
    noise: bool = True,
    patched_model: str | os.PathLike | None = None,
    keep: Sequence[str] = (),
    classifier_outputs: Sequence[str] | None = None,
    max_tap_bytes: int | str | None = DEFAULT_MAX_TAP_BYTES,
    progress: bool | None = None,
    executor: Any = None,
    samples_per_unit: int = 16,
    unit_retries: int = 2,
    prompt_length: int = 16,
    steps: int = 0,
) -> Report:
    """Find where `target` starts to disagree with `ref` on `model`.

    Parameters
    ----------
    model
        An `ov.Model`, a path to an IR ``.xml`` or an ``.onnx`` file, or anything `openvino.convert_model`
        takes. It is never modified.
    ref, target
        Device names: OpenVINO devices (``CPU``, ``GPU``, ``GPU.1``, ``NPU``), precision variants
        (``CPU:f32``, ``CPU:bf16``), emulated devices (``EMU:f16``), or `Device` objects. The reference
        runs in f32 unless its name or `ref_config` chooses a precision.
    inputs
        None (seeded random values), a dict name -> array, a list in input order, or a ``.npz``/``.npy`` path;
        or many samples: a `Samples`, a list of dicts (or of lists), a generator, or a folder of ``.npz``/``.npy``
        files. With many samples every one runs on both sides (ranked by final error, top-1 flips counted),
        the search runs on the worst, and each measured node's error is summarised over all samples.
    ref_config, target_config
        Properties passed to `compile_model` on each side.
    target_model
        A second model run on the target side and compared node by node with `model` (an int8 or f16 twin,
        or the model after a change). Nodes match by friendly name, then by tensor name.
    metric
        Error measure per tensor: a name in `bisect_ov.analysis.metrics.METRICS` or a callable on
        `TensorStats`. The default tolerance model is calibrated for ``rel_l2``.
    tolerance
        None for the precision-aware default, a float for one threshold everywhere, or a `Tolerance`.
    seed
        Seed of the random inputs.
    strategy
        Which tensors to expose (see `bisect_ov.search.strategies`): ``fusion`` taps only the outputs of the
        target's fusion groups, so the instrumented target compiles the same kernels; ``full`` taps every
        node; ``bisection`` searches with a few taps per compile (about log2(N) compiles); ``auto`` (default)
        is ``fusion``, falling back to ``bisection`` when the fidelity check fails.
    budget
        ``default``: every experiment asked for. ``fast``: no local errors, no impact runs, fusion groups not
        refined (the report names a group by its output), no per-node pass over many samples (they are still
        run and ranked by final-output error), and the noise floor read from the compiles made anyway (no
        extra compile or run): about twice the plain compile-and-run of both sides, for a first look at a big
        model.
    refine
        With ``fusion``: re-measure the members of the groups where error starts, to name the member node.
    local
        Run every measured node (or fusion group) on the target fed with the reference's inputs, so its own
        (local) error is told from what it inherited; one reference and one target compile per memory chunk.
        Not available with `target_model`.
    impact
        For this many top suspects, the final-output error when only that node runs on the target
        (partitioned runs); the culprit ranking puts higher impact first.
    fix
        Search the smallest set of nodes which, kept on the reference, brings the final-output error under a
        tolerance (True: each output's tolerance; a float: that value), verified by partitioned runs.
    delegation
        Search the shortest node range whose delegation to the target alone reproduces half the final error.
    curve
        Points of the error contribution curve (final error with the first fraction of the graph on the
        target); 0 for none.
    sensitivity
        With a quantized twin (`target_model`): rank its quantized layers by their own error and by the
        final-output error when each alone is quantized (one partitioned run per layer); `Report.sensitivity`.
    noise
        Run the target against itself (twice, and a second compile): differences below that floor are noise.
    patched_model
        With `fix`, also save the model with the fix as runtime info that GPU/NPU plugins honour
        (``disable_fp16_compression``) to this path (IR .xml).
    keep
        Names of nodes whose reference and target tensors the report keeps in memory, for
        ``report.tensors(name)`` and ``report.plot_values(name)`` (one more compile per side). ``"culprits"``
        keeps the top five culprits' tensors.
    classifier_outputs
        With many samples: the outputs holding class scores, whose top-1 and top-5 answers are compared. None
        takes ``[batch, classes]`` outputs and outputs named like logits (``[batch, seq, vocab]``).
    max_tap_bytes
        Most bytes of exposed tensors per compile; more taps are measured segment by segment (one model on
        both sides) or split into several compiles. ``"auto"`` (the default): half the model's weight bytes,
        at least 64 MB (`bisect_ov.pipeline.options.auto_tap_bytes`). None: no limit.
    progress
        Show progress bars; None shows them when stderr is a terminal.
    executor
        Where many samples run: None (this process), any `concurrent.futures.Executor` (Dask's
        ``distributed.Client(...).get_executor()``, Ray's, a ``ProcessPoolExecutor``), or ``'processes:N'``,
        ``'threads:N'``, ``'dask://HOST:PORT'``. Units of `samples_per_unit` samples travel to the workers
        with the model as IR and the devices, and return summaries, never tensors (`bisect_ov.samples.executors`).
    samples_per_unit
        Samples per work unit.
    unit_retries
        Times a unit that raised (or whose worker died) runs again; what still fails is reported with its
        sample indices and the run is marked partial (`SamplesSummary.partial`).
    prompt_length
        Tokens of the generated prompt when `inputs` is None and the model takes LLM inputs (``input_ids``,
        ``attention_mask``, ``position_ids``, ``beam_idx``) with a dynamic sequence length.
    steps
        For a stateful LLM (KV-cache variables): after the prefill, run this many decode steps on both sides,
        each side on its own cache, both fed the reference's next token; the report gives each step's
        final-output error, token flips, and the first step and node where divergence starts.

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
        Compiling or running failed on a device.
    """
    options = BisectOptions.from_keywords(
        ref_config=ref_config, target_config=target_config, metric=metric, tolerance=tolerance, seed=seed,
        strategy=strategy, budget=budget, refine=refine, local=local, impact=impact, fix=fix, delegation=delegation, curve=curve,
        sensitivity=sensitivity, noise=noise, patched_model=patched_model, keep=keep,
        classifier_outputs=classifier_outputs, max_tap_bytes=max_tap_bytes,
        progress=progress, executor=executor, samples_per_unit=samples_per_unit, unit_retries=unit_retries,
        prompt_length=prompt_length, steps=steps)
    return run(model, ref, target, inputs, options, target_model=target_model)


def run(model: Any, ref: str | Device, target: str | Device, inputs: Any, options: BisectOptions, *,
        target_model: Any = None) -> Report:
    """`bisect()` with its options as one record: the stages of `bisect_ov.pipeline.stages`, composed."""
    options.tolerance_model().check_metric(options.metric)
    clock = Clock()
    with clock.stage("open"):
        opened = open_comparison(model, ref, target, inputs, target_model, options, clock)
    try:
        with clock.stage("plain"):
            plain = plain_run(opened)
        with clock.stage("generate"):
            generation = generate(opened, plain)
        with clock.stage("measure"):
            measurement = measure(opened, plain)
        with clock.stage("score"):
            scored = score(opened, plain, measurement)
        with clock.stage("experiments"):
            findings = experiments(opened, measurement, scored)
            scored = absorb(opened, plain, scored, findings)
        with clock.stage("assemble"):
            return assemble(opened, plain, measurement, scored, findings, model_source=model,
                            target_source=target_model, generation=generation)
    finally:
        if opened.samples is not None:  # an executor opened from a name, a generator's spill folder
            opened.samples.close()
