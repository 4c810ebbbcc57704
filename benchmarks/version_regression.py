"""An OpenVINO version regression, for real: a run recorded with one OpenVINO release, compared with another.

The script makes a second environment with another OpenVINO release from the package registry (``pip install
openvino==OTHER numpy networkx onnx tqdm``; bisect_ov itself comes from this checkout through PYTHONPATH), and:

1. there, records the model on the CPU in f32 (``bisect-ov capture``);
2. here, with this environment's OpenVINO, replays the recording as the reference against the live CPU in
   f32 (``bisect(model, ref="capture:...", target="CPU:f32")``), once as it is and once with an injected
   difference on the live side: a twin whose node has its weights scaled by ``1 + --scale`` (``target_model=``,
   the structure unchanged), as a release whose kernel for that node computes differently would give (the
   recording itself is of the model: a capture refuses a model with other weights); it prints what the report
   says: both sides' versions and builds, the note that they differ, the verdict, the final-output error;
3. writes the reproducer of the injected difference (`Report.repro`) and runs its ``run.py`` here.

Usage::

    python benchmarks/version_regression.py                          # OpenVINO 2025.4.1 against this one
    python benchmarks/version_regression.py --other 2025.3.0 --venv /tmp/ov2025.3 --json out.json

The environment is kept (``--venv``) and reused when it already has that release. This is a measuring script,
not a test: nothing here passes or fails. The fast tests check the same report fields with the other release's
metadata written into a capture (tests/repro/test_versions.py).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Run in the other environment: the demo, recorded.
RECORD = r"""
import sys, openvino as ov
from bisect_ov.zoo.synthetic import demo, sample_inputs
from bisect_ov.capture import record
model = demo()
record(model, "CPU:f32", sample_inputs(model, seed=0), sys.argv[1])
print(ov.get_version())
"""


def scaled(node: str, scale: float):
    """The demo with `node`'s weights times ``1 + scale`` (the structure unchanged)."""
    import numpy as np
    import openvino as ov

    from bisect_ov.zoo.synthetic import demo

    model = demo()
    for op in model.get_ordered_ops():
        if op.get_friendly_name() == node:
            weight = op.input_value(1).get_node()
            changed = ov.opset13.constant((weight.get_data() * np.float32(1 + scale)).astype(np.float32))
            changed.set_friendly_name(weight.get_friendly_name())
            op.input(1).replace_source_output(changed.output(0))
    return model


def ensure_venv(venv: pathlib.Path, version: str) -> pathlib.Path:
    """A venv at `venv` with OpenVINO `version` and bisect_ov's other dependencies; its python."""
    python = venv / "bin" / "python"
    if python.exists():
        found = subprocess.run([str(python), "-c", "import openvino; print(openvino.__version__)"],
                               capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip().startswith(version):
            return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"openvino=={version}", "numpy", "networkx", "onnx",
                    "tqdm"], check=True)
    return python


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", default="2025.4.1", help="the other OpenVINO release (default 2025.4.1)")
    parser.add_argument("--venv", type=pathlib.Path, default=pathlib.Path(tempfile.gettempdir()) / "bisect_ov_ov_other")
    parser.add_argument("--node", default="block2/conv1", help="the node whose weights the injected difference scales")
    parser.add_argument("--scale", type=float, default=0.01, help="relative change of its weights (default 0.01)")
    parser.add_argument("--json", type=pathlib.Path, help="write the figures as JSON")
    args = parser.parse_args()

    import openvino as ov

    from bisect_ov import bisect
    from bisect_ov.zoo.synthetic import demo

    t0 = time.perf_counter()
    python = ensure_venv(args.venv, args.other)
    setup = time.perf_counter() - t0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    work = pathlib.Path(tempfile.mkdtemp(prefix="version_regression_"))
    results: dict = {"here": ov.get_version(), "setup_seconds": round(setup, 1), "runs": {}}
    capture = work / "other.npz"
    done = subprocess.run([str(python), "-c", RECORD, str(capture)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"recording in the other environment failed:\n{done.stderr[-3000:]}")
    for label, scale in (("as is", 0.0), (f"'{args.node}' weights x{1 + args.scale:g} on the live side", args.scale)):
        report = bisect(demo(), f"capture:{capture}", "CPU:f32", target_model=scaled(args.node, scale) if scale else None,
                        progress=False)
        first = report.first_divergence
        note = next((n for n in report.notes if "different OpenVINO releases" in n), "")
        out = max(report.outputs, key=lambda o: o.error)
        results["runs"][label] = {
            "recorded_with": report.ref.openvino_version, "replayed_with": report.target.openvino_version,
            "note": note, "verdict": repr(report), "first_divergence": first.name if first else None,
            "final_error": out.error, "final_tolerance": out.tolerance,
        }
        print(f"--- recorded with OpenVINO {report.ref.openvino_version} ({label}), replayed with "
              f"{report.target.openvino_version}")
        print(f"  {report!r}")
        print(f"  final output {report.metric} {out.error:.2e} (tolerance {out.tolerance:.2e})")
        print(f"  note: {note}")
        if first is not None:
            written = report.repro(work / "repro")
            ran = subprocess.run([sys.executable, str(work / "repro" / "run.py")], capture_output=True, text=True)
            results["runs"][label]["repro"] = {"node": written.node, "error": written.error,
                                               "local_error": written.local_error, "run_py_exit": ran.returncode,
                                               "run_py": ran.stdout.strip()}
            print(f"  reproducer of '{written.node}' in {work / 'repro'}: {written.error:.2e} "
                  f"(local error {written.local_error:.2e}); run.py exit {ran.returncode}:")
            print("    " + ran.stdout.strip().replace("\n", "\n    "))
    results["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"total {results['seconds']} s (environment {results['setup_seconds']} s)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
