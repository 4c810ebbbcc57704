"""Run a reproducer folder written by bisect_ov: the piece on the reference and the target, its error against
the tolerance. This file is copied into every folder as ``run.py`` and needs only OpenVINO and numpy.

    python run.py                      # the devices recorded in repro.json
    python run.py --target GPU         # another target device (its default properties)
    python run.py --target GPU:f32     # ... with that inference precision
    python run.py --json               # the result as one JSON object

The folder holds ``repro.json`` (devices, properties, tolerance, what each file is), the piece as IR
(``piece.xml``/``.bin``; ``target.xml`` when the target runs another model: a twin, or an emulation of a
low-precision device written in opset arithmetic), ``inputs.npz`` (the values fed to the piece's inputs, by
input name) and ``expected.npz`` (the reference's values of the piece's outputs). The target's outputs are
compared with ``expected.npz``; the reference is run too, to show that the piece computes what the reference
computed. Inputs and outputs the target stored in its activation precision (``typed`` in repro.json) are handed
over in that precision, as the whole model handed them. Exit code 1 when the error is over the tolerance (the
divergence reproduces), 0 when not, 2 on an error.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

import numpy as np
import openvino as ov

HERE = pathlib.Path(__file__).resolve().parent


def rel_l2(ref: np.ndarray, got: np.ndarray) -> float:
    """||got - ref|| / ||ref|| (over ||got|| when ref is all zero); inf when got has NaN/Inf where ref is finite."""
    r, g = _pair(ref, got)
    if r is None:
        return math.inf
    diff = float(np.linalg.norm(g - r))
    scale = float(np.linalg.norm(r)) or float(np.linalg.norm(g))
    return diff / scale if scale else 0.0


def max_abs(ref: np.ndarray, got: np.ndarray) -> float:
    r, g = _pair(ref, got)
    return math.inf if r is None else float(np.abs(g - r).max(initial=0.0))


def mean_abs(ref: np.ndarray, got: np.ndarray) -> float:
    r, g = _pair(ref, got)
    return math.inf if r is None else (float(np.abs(g - r).mean()) if r.size else 0.0)


def max_rel(ref: np.ndarray, got: np.ndarray) -> float:
    r, g = _pair(ref, got)
    if r is None:
        return math.inf
    top = float(np.abs(r).max(initial=0.0))
    worst = float(np.abs(g - r).max(initial=0.0))
    return worst / top if top else (1.0 if worst else 0.0)


METRICS = {"rel_l2": rel_l2, "max_abs": max_abs, "mean_abs": mean_abs, "max_rel": max_rel}


def _pair(ref: np.ndarray, got: np.ndarray):
    """Both as float64 over the positions where both are finite; (None, None) when `got` gained NaN/Inf."""
    r = np.asarray(ref, np.float64).reshape(-1)
    g = np.asarray(got, np.float64).reshape(-1)
    if r.size != g.size:
        return None, None
    fr, fg = np.isfinite(r), np.isfinite(g)
    if np.any(fr & ~fg):
        return None, None
    same = ~fr & ~fg & ((r == g) | (np.isnan(r) & np.isnan(g)))
    keep = fr & fg
    if np.any(~fr & ~same):
        return None, None
    return r[keep], g[keep]


def _bf16_tensor(array: np.ndarray) -> ov.Tensor:
    """float32 values as a bf16 tensor, rounded to nearest even (numpy has no bfloat16)."""
    x = np.asarray(array, dtype=np.float32, order="C")
    bits = x.view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    rounded[np.isnan(x)] = 0x7FC0
    tensor = ov.Tensor(ov.Type.bf16, list(x.shape))
    tensor.data.view(np.uint16)[...] = rounded
    return tensor


def _as_float32(array, element: ov.Type) -> np.ndarray:
    if element == ov.Type.bf16:  # handed over as float16-labelled bits
        return (np.asarray(array).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.array(array)


def run_side(core: ov.Core, folder: pathlib.Path, spec: dict, side: str, inputs, device: str | None = None):
    """Compile and run one side's model; returns its outputs (float32 for bf16 ones) in the model's order."""
    own = spec[side]
    same_device, device, config = _device(own, device, "--target" if side == "target" else "--ref")
    model_file = own["model"] if same_device else own.get("model_elsewhere", own["model"])
    model = core.read_model(str(folder / model_file))
    typed = own.get("typed_precision") if same_device else None
    if typed in ("bf16", "f16"):
        element = ov.Type.bf16 if typed == "bf16" else ov.Type.f16
        ppp = ov.preprocess.PrePostProcessor(model)
        for i, port in enumerate(model.inputs):
            if port.get_any_name() in own.get("typed_inputs", ()) and port.get_element_type() == ov.Type.f32:
                ppp.input(i).tensor().set_element_type(element)
        for i, port in enumerate(model.outputs):
            if port.get_any_name() in own.get("typed_outputs", ()) and port.get_element_type() == ov.Type.f32:
                ppp.output(i).tensor().set_element_type(element)
        model = ppp.build()
    if not same_device and side == "ref" and config.get("INFERENCE_PRECISION_HINT") == "f32":
        try:  # an f32 reference computes compressed weights' products in f32 (the CPU quantizes their activations)
            if "DYNAMIC_QUANTIZATION_GROUP_SIZE" in core.get_property(device, "SUPPORTED_PROPERTIES"):
                config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = "0"
        except RuntimeError:
            pass
    compiled = core.compile_model(model, device, config)
    feed = {}
    for port in compiled.inputs:
        name = port.get_any_name()
        value = inputs[name]
        if port.get_element_type() == ov.Type.bf16:
            feed[name] = _bf16_tensor(value)
        elif port.get_element_type() == ov.Type.f16:
            feed[name] = np.asarray(value, np.float16)
        else:
            feed[name] = value
    result = compiled.create_infer_request().infer(feed)
    RAN[side] = _ran(compiled)
    return [_as_float32(result[port], port.get_element_type()) for port in compiled.outputs]


def _text(value) -> str:
    """An rt_info entry as text (OpenVINO hands an `OVAny`)."""
    return str(value.astype(str)) if hasattr(value, "astype") else str(value)


RAN: dict = {}  # side -> the precisions its compute ops ran in, read back from the compiled model's runtime graph


def _ran(compiled) -> list:
    """The precisions the compiled piece's compute ops ran in (its runtime graph's ``runtimePrecision``), sorted;
    empty where the device does not say."""
    try:
        ops = compiled.get_runtime_model().get_ordered_ops()
    except Exception:
        return []
    found = set()
    for op in ops:
        info = op.get_rt_info()
        kind = _text(info["layerType"]) if "layerType" in info else op.get_type_name()
        if "runtimePrecision" in info and kind not in ("Input", "Output", "Parameter", "Result", "Const", "Reorder",
                                                         "Convert"):
            found.add(_text(info["runtimePrecision"]).lower())
    return sorted(p for p in found if p not in ("undefined", "dynamic"))


def _device(own: dict, name: str | None, flag: str) -> tuple[bool, str, dict]:
    """(whether it is the recorded side, the OpenVINO device, its properties) for a device `name` given on the
    command line: none, or the recorded side's own name (``EMU:f16``, ``CPU:bf16``), runs what was recorded; a
    name with a precision (``CPU:f32``, ``GPU:f16``) runs the piece with that inference precision; any other
    OpenVINO device name with its default properties. An emulation other than the recorded one is bisect_ov's
    own and cannot run here."""
    if name is None or name == own.get("name"):
        return True, own["device"], dict(own.get("config", {}))
    device, _, precision = name.partition(":")
    if device.upper() == "EMU":
        raise ValueError(f"{flag} {name}: an emulation of bisect_ov's, which this folder does not hold; it runs the "
                         f"side it recorded ({own.get('name')}: no {flag}, or {flag} {own.get('name')}) or an OpenVINO "
                         "device (CPU, GPU, CPU:f32, GPU:f16, ...).")
    if precision.lower() in ("f32", "f16", "bf16"):
        return False, device, {"INFERENCE_PRECISION_HINT": precision.lower()}
    return False, name, {}


def run(folder: str | pathlib.Path = HERE, *, ref: str | None = None, target: str | None = None,
        skip_ref: bool = False) -> dict:
    """Run the piece of `folder` on both sides; returns the figures `main` prints (see its keys)."""
    folder = pathlib.Path(folder)
    spec = json.loads((folder / "repro.json").read_text(encoding="utf-8"))
    metric = METRICS[spec["metric"]]
    with np.load(folder / "inputs.npz", allow_pickle=False) as data:
        inputs = {k: data[k] for k in data.files}
    with np.load(folder / "expected.npz", allow_pickle=False) as data:
        expected = [data[o["name"]] for o in spec["outputs"]]
    core = ov.Core()
    target_out = run_side(core, folder, spec, "target", inputs, target)
    result = {"openvino": ov.get_version(), "metric": spec["metric"], "target": target or spec["target"]["label"],
              "outputs": [], "target_ran": RAN.get("target", [])}
    ref_out = None
    if not skip_ref and (ref is not None or spec["reference"].get("runnable", True)):
        ref_out = run_side(core, folder, spec, "reference", inputs, ref)
        result["reference"] = ref or spec["reference"]["label"]
    worst = 0.0
    for i, out in enumerate(spec["outputs"]):
        error = metric(expected[i], target_out[i])
        entry = {"name": out["name"], "error": error, "tolerance": out["tolerance"]}
        if ref_out is not None:
            entry["reference_error"] = metric(expected[i], ref_out[i])
        result["outputs"].append(entry)
        worst = max(worst, error / out["tolerance"] if out["tolerance"] > 0 else (math.inf if error > 0 else 0.0))
    result["error"] = max(o["error"] for o in result["outputs"])
    result["reproduced"] = worst > 1.0
    return result


def _fmt(x: float) -> str:
    return f"{x:.2e}" if math.isfinite(x) else str(x)


def _first_line(err: BaseException) -> str:
    """The sentence of an error a user can act on: OpenVINO's start with C++ source locations, one a line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Exception from", "Check '"))]
    return _printable((useful or lines or [type(err).__name__])[-1])[:300]


def _printable(text: str) -> str:
    """`text` with its control characters written as escapes: a name from the model cannot drive the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Run this reproducer: the piece on the reference and the target.")
    parser.add_argument("--ref", help="reference device (default: the one in repro.json)")
    parser.add_argument("--target", help="target device (default: the one in repro.json)")
    parser.add_argument("--no-ref", action="store_true", help="do not run the reference")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args(argv)
    try:
        result = run(HERE, ref=args.ref, target=args.target, skip_ref=args.no_ref)
    except Exception as err:  # one line for the user; the traceback helps nobody filing the report
        print(f"run.py: error: {_first_line(err)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
        return 1 if result["reproduced"] else 0
    spec = json.loads((HERE / "repro.json").read_text(encoding="utf-8"))
    print(f"{_printable(spec['title'])}  (OpenVINO {result['openvino']})")
    for out in result["outputs"]:
        verdict = "OVER" if out["error"] > out["tolerance"] else "within"
        line = (f"  {out['name']}: target {result['target']} {result['metric']} {_fmt(out['error'])} "
                f"{verdict} tolerance {_fmt(out['tolerance'])}")
        if "reference_error" in out:
            line += f"; reference {result['reference']} {_fmt(out['reference_error'])}"
        print(line)
    asked = args.target.partition(":")[2].lower() if args.target else ""
    ran = result["target_ran"]
    if asked in ("f16", "bf16") and ran and asked not in ran:
        print(f"  note: asked {asked}, the piece's ops ran in {', '.join(ran)} (the device's runtime graph): alone, "
              "a piece may not run as its op did inside the whole model (a lone op fed f32 stays in f32)")
    print("REPRODUCED: the target diverges from the reference's values." if result["reproduced"]
          else "Not reproduced: the target stays within the tolerance.")
    return 1 if result["reproduced"] else 0


if __name__ == "__main__":
    sys.exit(main())
