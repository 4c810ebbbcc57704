"""Recorded runs, the device side: play a capture back as the ``ref=`` or ``target=`` of `bisect()`.

`RecordedDevice(path)` turns a file written by `bisect_ov.capture.write.capture` on machine A into a `Device`
on machine B; `SampledDevice` / `sampled_like` sample a live device the way a ``stats`` capture was sampled;
`plan_recorded` tells `bisect()` what to switch off, which inputs to use and what to sample:

>>> bisect("model.xml", ref=RecordedDevice("epyc.npz"), target="CPU")         # doctest: +SKIP

Assumptions: the file format and the helpers both machines must compute identically (`playback_hash`,
`inputs_hash`, `sample_array`) come from `bisect_ov.capture.format`, and `load_capture` from
`bisect_ov.capture.read`. Importing this module registers the ``capture:<path>`` and ``<path>.npz`` device
names with `bisect_ov.run.devices.register_device`, so `make_device` builds a `RecordedDevice` for them.
A compiled model is accepted only when its `playback_hash` matches the
recorded one, and `infer` only with inputs whose `inputs_hash` was recorded. A ``stats`` capture holds samples
(flat, at `sample_positions`), so the other side must be sampled with the same sample size and seed.

A recorded device cannot run pieces of the model, which local errors and partitioned runs need: see
`plan_recorded`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np
import openvino as ov

from bisect_ov.capture.format import check_sample, check_seed, inputs_hash, playback_hash, sample_array, weights_hash
from bisect_ov.capture.read import Capture, load_capture
from bisect_ov.core.errors import CaptureError, InputError
from bisect_ov.core.records import DeviceInfo
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.load import model_label
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap
from bisect_ov.run.devices import Compiled, Device, infer_each, make_device, register_device

__all__ = ["RecordedDevice", "RecordedCompiled", "SampledDevice", "SampledCompiled", "sampled_like", "RecordedPlan",
           "plan_recorded", "refuse_recorded_target"]


# ------------------------------------------------------------------------------------------------------------
# Playing back
# ------------------------------------------------------------------------------------------------------------


class RecordedDevice(Device):
    """A `Device` that plays a capture back: the ``ref=`` or ``target=`` of `bisect()` on another machine.

    `compile(model, taps=...)` accepts the captured model (checked by `playback_hash`) with any
    recorded tensors exposed, in any order, as `tap_model` builds them; `infer(inputs)` checks the inputs
    against the recorded ones (by `inputs_hash`; with a merged capture, the matching sample is used) and
    returns the recorded arrays in the model's output order. A compile without added taps returns the plain
    run's outputs; a tapped one returns the tensors of the tapped runs (the model's own outputs included).

    In ``stats`` mode the arrays returned are the recorded samples (flat, `sample_positions`), so the other side
    must be sampled the same way: `SampledDevice` / `sampled_like`.

    Parameters
    ----------
    capture
        A path or a `Capture`.
    name
        Name in reports; ``capture:<file name>`` by default.
    """

    recorded = True  # cannot run pieces of the model (`fed`, so `can_run_pieces` is False): bisect skips them

    def __init__(self, capture: str | os.PathLike | Capture, *, name: str | None = None):
        self.capture = load_capture(capture)
        self.name = name or f"capture:{self.capture.path.name}"

    @property
    def inputs(self) -> list[np.ndarray]:
        """The recorded inputs (of the first sample): what `bisect()` should run when given none."""
        return self.capture.inputs

    @property
    def sampled(self) -> bool:  # type: ignore[override]
        return self.capture.mode == "stats"

    @property
    def other_implementation(self) -> bool:  # type: ignore[override]
        """A recorded framework side (PyTorch, ONNX Runtime) is another implementation, as it was live."""
        return bool(self.capture.header["device"].get("provides_only_recorded"))

    def provides(self, graph: ModelGraph) -> frozenset[Tap] | None:
        """A recorded framework side (PyTorch, ONNX Runtime) has its recorded tensors only; other captures all."""
        if not self.capture.header["device"].get("provides_only_recorded"):
            return None
        return frozenset(Tap(t["key"], t["port"]) for t in self.capture.header["taps"] if t is not None)

    def repro_side(self, info: DeviceInfo, role: str) -> dict:
        """As the reference, the device it was recorded on, not run by default (its recorded values are the
        expected ones); as the target, refused: a recording cannot run a piece of the model."""
        if role == "target":
            raise InputError(
                f"The target is a recorded run ('{info.name}'): it cannot run a piece of the model, so no reproducer "
                "can be verified. Compare against the live device instead (bisect(model, ref=..., target='CPU')), or "
                "make the recording the reference.")
        return {"device": info.device, "config": dict(info.config), "runnable": False,
                "recorded": f"a recorded run, {self.capture.path.name}"}

    def device_info(self) -> DeviceInfo:
        """The recorded `DeviceInfo`, named ``capture:<file>``, with a note saying where it was recorded."""
        header = self.capture.header
        recorded = self.capture.device_info
        where = recorded.full_name or recorded.device
        note = f"recorded with {header['device'].get('spec', recorded.name)} on {where}, OpenVINO {header.get('openvino_version', '?')}"
        if self.sampled:
            note += f"; {self.capture.sample_size} sampled values per tensor"
        if recorded.note:
            note += f"; {recorded.note}"
        # The runtime that recorded it, even in captures whose device record predates the field.
        version = recorded.openvino_version or str(header.get("openvino_version", ""))
        return replace(recorded, name=self.name, note=note, openvino_version=version, recorded=True)

    def check_model(self, model: ov.Model, *, label: str | None = None) -> ModelGraph:
        """`model`'s graph, when it is the model the capture was recorded on (its structure and weights).

        Raises
        ------
        CaptureError
            Another structure, or the same with other weights (another checkpoint).
        """
        cap, label = self.capture, label or model_label(model)
        graph = ModelGraph(model)
        digest = playback_hash(graph)
        if digest != cap.playback_hash:
            raise CaptureError(
                f"The capture '{cap.path.name}' was recorded on model '{cap.model_label}' (structure hash "
                f"{cap.playback_hash}), but the model given is '{label}' (structure hash {digest}): they differ. "
                "Compare the model the capture was made with, or record this model."
            )
        recorded = cap.header["model"].get("weights_hash")  # captures from before it was recorded: not checked
        if recorded is not None and weights_hash(model) != recorded:
            raise CaptureError(
                f"The capture '{cap.path.name}' was recorded on model '{cap.model_label}' with other weights than "
                f"those of '{label}': the same structure, different values (another checkpoint?). "
                "Compare the model the capture was made with, or record this model.")
        return graph

    def _compile(self, model: ov.Model, taps: tuple[int, ...], fed: tuple[int, ...] = ()) -> "RecordedCompiled":
        cap = self.capture
        if fed:
            raise CaptureError(
                f"The capture '{cap.path.name}' cannot run a piece of the model fed with other values: a recorded "
                "run only plays back the tensors of the whole captured model. With a recorded device, turn off "
                "what runs pieces: bisect(..., local=False, impact=0) and no fix, delegation or curve."
            )
        added = set(taps)
        results = model.get_results()
        if added:
            keep = [r for i, r in enumerate(results) if i not in added]
            sinks = list(model.get_sinks())
            view = (ov.Model(keep, sinks, model.get_parameters(), model.get_friendly_name()) if sinks
                    else ov.Model(keep, model.get_parameters(), model.get_friendly_name()))
        else:
            view = model
        graph = self.check_model(view, label=model_label(model))
        key_of = {op.get_name(): key for key, op in zip(graph.order, view.get_ordered_ops())}
        original = [i for i in range(len(results)) if i not in added]
        sources: list[tuple[str, str, tuple[int, ...]]] = []  # (kind, member, full shape)
        missing: list[str] = []
        for i, out in enumerate(model.outputs):
            producer = out.get_node().input_value(0)
            op = producer.get_node()
            key = key_of.get(op.get_name(), op.get_friendly_name())
            port = producer.get_index()
            if not added:  # the untouched model: the plain run's outputs
                j = original.index(i)
                sources.append(("o", f"o/{j}", tuple(cap.header["model"]["outputs"][j]["shape"])))
            elif key in graph and graph[key].kind == "parameter":
                position = graph.parameter_position[key]
                sources.append(("input", f"input/{position}", tuple(cap.header["model"]["inputs"][position]["shape"])))
            elif key in graph and (index := cap.locate(graph[key], port)) is not None:
                sources.append(("tap", cap.member(index), tuple(cap.header["taps"][index]["shape"])))
            elif i not in added:
                j = original.index(i)
                sources.append(("o", f"o/{j}", tuple(cap.header["model"]["outputs"][j]["shape"])))
            else:
                missing.append(str(Tap(key, port)))
                continue
            _check_shape(cap, str(Tap(key, port)), out.get_partial_shape(), sources[-1][2])
        if missing:
            raise CaptureError(
                f"The capture '{cap.path.name}' holds {len(cap.taps)} recorded tensors, but {len(missing)} "
                f"requested tensor(s) were not recorded: {missing[:5]}{' ...' if len(missing) > 5 else ''}. "
                "Captures hold the outputs of every compute node; use strategy='full' in bisect(), or record "
                "the capture again with this bisect_ov."
            )
        return RecordedCompiled(self, [(kind, member) for kind, member, _ in sources], self.device_info(), cap.runtime)


def _check_shape(cap: Capture, what: str, pshape: ov.PartialShape, recorded: tuple[int, ...]) -> None:
    if not pshape.compatible(ov.PartialShape(list(recorded))):
        raise CaptureError(
            f"The capture '{cap.path.name}' recorded '{what}' with shape {list(recorded)}, but the model given "
            f"produces {pshape}: the model or its input shapes differ from the recorded ones."
        )


class RecordedCompiled:
    """What `RecordedDevice.compile` returns: a `Compiled` whose `infer` reads the capture."""

    def __init__(self, device: RecordedDevice, sources: Sequence[tuple[str, str]], info: DeviceInfo, runtime: RuntimeGraph):
        self.device = device
        self.capture = device.capture
        self.sources = list(sources)
        self.info = info
        self.runtime = runtime
        self.n_outputs = len(self.sources)

    def infer(self, inputs: Sequence[np.ndarray], *, share_outputs: bool = True) -> list[np.ndarray]:
        """The recorded arrays for these inputs, in the model's output order.

        Raises
        ------
        CaptureError
            When `inputs` are not (one of) the recorded input sets.
        """
        cap = self.capture
        inputs = list(inputs)
        if len(inputs) != len(cap.input_names):
            raise CaptureError(f"The capture '{cap.path.name}' was captured with {len(cap.input_names)} input(s); got {len(inputs)}.")
        digest = inputs_hash(cap.input_names, inputs)
        sample = cap.current if cap.inputs_hash == digest else cap.find_sample(digest)
        if sample is None and len(cap.samples) > 1:  # a merged capture: none of its input sets is this one
            raise CaptureError(
                f"None of the {len(cap.samples)} input sets recorded in the capture '{cap.path.name}' is this one "
                f"(hash {digest[:16]}...): run with the samples it recorded (RecordedDevice(...).inputs), or record "
                "these inputs too and merge the captures.")
        if sample is None:
            recorded = ", ".join(f"{i['name']} {i['shape']} {i['dtype']}" for i in cap.header["model"]["inputs"])
            given = ", ".join(f"{list(np.shape(a))} {np.asarray(a).dtype}" for a in inputs)
            raise CaptureError(
                f"The capture '{cap.path.name}' was captured with different inputs (inputs hash "
                f"{cap.inputs_hash[:16]}...; these hash {digest[:16]}...; recorded: {recorded}; given: {given}). "
                "Run with the recorded inputs (RecordedDevice(...).inputs, or inputs=None with the capture's seed "
                f"{cap.seed} when it was recorded from random inputs), or record a capture with these inputs."
            )
        return [cap.read(member, sample) for _, member in self.sources]

    def infer_many(self, inputs: Sequence[Sequence[np.ndarray]], *, jobs: int = 2) -> list[list[np.ndarray]]:
        """The recorded arrays of every input set, one at a time (reading a file needs no parallel requests); an
        input set that was not recorded is refused with its position (`infer_each`)."""
        return infer_each(self, inputs)


# ------------------------------------------------------------------------------------------------------------
# Sampling a live device the way a stats capture was
# ------------------------------------------------------------------------------------------------------------


class SampledDevice(Device):
    """Wraps a device so every output is `sample_array(output, sample, seed)`: what a ``stats`` capture holds.

    Compare a stats capture only with a device sampled with the same `sample` and `seed` (`sampled_like`).
    """

    def __init__(self, inner: str | Device, sample: int, seed: int = 0, *, config: Mapping[str, Any] | None = None,
                 role: str = "target"):
        self.inner = make_device(inner, dict(config or {}), role=role)
        self.sample = check_sample(sample)
        self.seed = check_seed(seed)
        self.name = self.inner.name

    sampled = True  # outputs are samples: values fed between pieces (local errors) cannot be used

    @property
    def emulated(self) -> bool:  # type: ignore[override]
        return self.inner.emulated

    def _compile(self, model: ov.Model, taps: tuple[int, ...], fed: tuple[int, ...] = ()) -> SampledCompiled:
        inner = self.inner.compile(model, taps=taps, fed=fed) if fed else self.inner.compile(model, taps=taps)
        return SampledCompiled(inner, self.sample, self.seed)


class SampledCompiled:
    """What `SampledDevice.compile` returns: the inner `Compiled`, each output replaced by its sample."""

    def __init__(self, inner: Compiled, sample: int, seed: int):
        self.inner = inner
        self.sample, self.seed = sample, seed
        note = f"{sample} sampled values per tensor"
        self.info = replace(inner.info, note=f"{inner.info.note}; {note}" if inner.info.note else note)
        self.runtime = inner.runtime
        self.n_outputs = inner.n_outputs

    def infer(self, inputs: Sequence[np.ndarray], *, share_outputs: bool = True) -> list[np.ndarray]:
        return [sample_array(a, self.sample, self.seed) for a in self.inner.infer(inputs, share_outputs=share_outputs)]

    def infer_many(self, inputs: Sequence[Sequence[np.ndarray]], *, jobs: int = 2) -> list[list[np.ndarray]]:
        return [[sample_array(a, self.sample, self.seed) for a in outs] for outs in self.inner.infer_many(inputs, jobs=jobs)]


def sampled_like(device: str | Device, capture: str | os.PathLike | Capture | RecordedDevice, *,
                 config: Mapping[str, Any] | None = None, role: str = "target") -> Device:
    """`device` sampled as `capture` was when it is a ``stats`` capture; `device` itself for a ``full`` one."""
    cap = capture.capture if isinstance(capture, RecordedDevice) else load_capture(capture)
    if cap.mode != "stats":
        return make_device(device, dict(config or {}), role=role)
    return SampledDevice(device, cap.sample_size, cap.seed, config=config, role=role)


@dataclass
class RecordedPlan:
    """How `bisect()` runs when a side is a recorded (or sampled) device; see `plan_recorded`."""

    ref: Device
    target: Device
    inputs: Any
    local: bool = True  # local errors: pieces of the model run on the target, fed with reference values
    pieces: bool = True  # partitioned runs (impact, fix, delegation, curve): pieces on both sides
    exact: bool = True  # exact integer checks of Conv/MatMul: need whole tensors
    notes: list[str] = field(default_factory=list)


def refuse_recorded_target(name: Any) -> None:
    """Refuse a reproducer whose target is a recording (``capture:FILE``), before anything runs."""
    if isinstance(name, str) and name.startswith("capture:"):
        device = make_device(name, role="target")
        if isinstance(device, RecordedDevice):
            device.repro_side(device.device_info(), "target")


def plan_recorded(ref: Device, target: Device, inputs: Any = None, *, twin: bool = False,
                  models: tuple[Any, Any] | None = None, labels: tuple[str | None, str | None] = (None, None)
                  ) -> RecordedPlan:
    """Adapt a comparison to recorded devices: the one integration point `bisect()` needs.

    * `inputs` None: the capture's recorded inputs (the reference's capture first; a recorded target's by
      input name when it ran a `target_model` twin); every input set of a merged capture, as many samples.
    * A ``stats`` capture on either side: the other side is wrapped in `SampledDevice` with the capture's
      sample size and seed (two stats captures must agree on both); exact integer checks are off.
    * A recorded device cannot run pieces of the model: local errors are off when the target is recorded or
      a side is sampled, partitioned runs (impact, fix, delegation, curve) whenever a side is recorded.
    * `models` (the compared model, the twin or None): each capture is checked against the model its side runs
      before its inputs are used (a capture of another model said "got 1 input array(s) for 2 inputs"); `labels`
      name them as the user gave them (a file, where the loaded model read as "ov.Model from ONNX").

    Raises
    ------
    CaptureError
        Two stats captures sampled differently.
    """
    sides = {"ref": ref, "target": target}
    recorded = {k: d for k, d in sides.items() if isinstance(d, RecordedDevice)}
    if not recorded and not any(d.sampled for d in sides.values()):
        return RecordedPlan(ref, target, inputs)
    for key, device in recorded.items():
        side = 1 if key == "target" and models is not None and models[1] is not None else 0
        model = models and models[side]
        if model is not None:
            device.check_model(model, label=labels[side])
    notes: list[str] = []
    stats = {k: d.capture for k, d in recorded.items() if d.capture.mode == "stats"}
    if stats:
        sampling = {(c.sample_size, c.seed) for c in stats.values()}
        if len(sampling) > 1:
            raise CaptureError("The two stats captures were sampled differently ("
                               + ", ".join(f"'{c.path.name}': sample={c.sample_size}, seed={c.seed}" for c in stats.values())
                               + "); record them with the same sample and seed, or record in full mode.")
        sample, seed = sampling.pop()
        for key, dev in sides.items():
            if key not in stats and not isinstance(dev, SampledDevice):
                sides[key] = SampledDevice(dev, sample, seed)
        notes.append(f"A stats capture holds {sample} sampled values per tensor: both sides are compared at the "
                     "same positions, so errors are estimates from those values.")
    if inputs is None and recorded:
        key = "ref" if "ref" in recorded else "target"
        cap = recorded[key].capture
        names = cap.input_names
        by_name = key == "target" and twin and not any(n.startswith("#") for n in names)
        # Every input set a merged capture holds: many samples (a list of samples), else the one.
        sets = [cap.select(n).inputs for n in range(len(cap.samples))]
        given = [dict(zip(names, arrays)) if by_name else list(arrays) for arrays in sets]
        inputs = given if len(given) > 1 else (given[0] if by_name else sets[0])
        notes.append(f"Inputs: the {f'{len(sets)} input sets' if len(sets) > 1 else 'ones'} recorded in "
                     f"'{cap.path.name}' (a seed given does not change them).")
    sampled = any(d.sampled for d in sides.values())
    plan = RecordedPlan(sides["ref"], sides["target"], inputs, local="target" not in recorded and not sampled,
                        pieces=not recorded and not sampled, exact=not sampled, notes=notes)
    if recorded:
        role = {"ref": "reference", "target": "target"}
        which = " and ".join(f"the {role[k]} ('{d.capture.path.name}')" for k, d in recorded.items())
        # What this switches off of what was asked is said once, by the options (`ResolvedOptions.left_out`).
        plan.notes.append(f"{which[0].upper()}{which[1:]} {'is a recorded run' if len(recorded) == 1 else 'are recorded runs'}"
                          ", replayed whole: no piece of the model runs on "
                          + ("it" if len(recorded) == 1 else "them") + ".")
    return plan


def _recorded_device(spec: str, config: dict[str, Any], role: str) -> RecordedDevice:
    """``capture:<path>`` or ``<path>.npz``: a run recorded by `bisect_ov.capture.write.capture`."""
    if config:
        raise InputError(f"A recorded run ('{spec}') takes no compile properties; got {dict(config)}.")
    return RecordedDevice(spec[len("capture:"):] if spec.lower().startswith("capture:") else spec)


register_device(lambda name: name.lower().startswith("capture:") or name.lower().endswith(".npz"), _recorded_device)
