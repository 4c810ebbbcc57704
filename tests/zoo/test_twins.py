"""NNCF twins against their models: every strategy runs, and a fix found by partitioned runs, fed back to NNCF
as an ignored scope, meets the tolerance it was found for.

The twins are the zoo's (`bisect_ov.zoo.cache.TWINS`): ``nncf.quantize`` int8 of ResNet-50 and MobileNetV3,
``nncf.compress_weights`` int4 and int8 of a Llama. The fix tolerance is set below the twin's plain error, so
a fix is needed; NNCF then quantizes the model again with the report's ``ignored_scope()`` and the final
error of that new twin is measured on the same inputs with plain compiles.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest

from bisect_ov import bisect
from bisect_ov.pipeline.options import STRATEGIES
from bisect_ov.zoo import cache, twins
from tests.zoo.conftest import needs_zoo, zoo_inputs, zoo_model

pytestmark = [needs_zoo, pytest.mark.zoo]


def _final_error(model: ov.Model, twin: ov.Model, inputs) -> float:
    """Worst relative L2 error of the twin's outputs against the model's, both compiled whole in f32."""
    core = ov.Core()
    outs = [list(core.compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
                 .infer(inputs).values()) for m in (model, twin)]
    return max(float(np.linalg.norm(np.float64(t) - r) / max(np.linalg.norm(np.float64(r)), 1e-30))
               for r, t in zip(*outs))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("twin", ["resnet50-int8", "llama-int4w"])
def test_every_strategy_runs_on_a_twin(twin, strategy):
    base = cache.TWINS[twin].base
    report = bisect(zoo_model(base), "CPU:f32", "CPU:f32", zoo_inputs(base), target_model=zoo_model(twin),
                    strategy=strategy, noise=False, progress=False)
    assert report.nodes and report.coverage is not None
    assert not report.unmatched["target_model"], report.unmatched  # NNCF's ops are the twin's quantization
    assert min(o.tolerance for o in report.outputs) >= 1e-3  # never the f32 tolerance
    if report.fidelity is not None:
        assert 0.5 <= report.fidelity.ratio <= 2.0, report.fidelity


@pytest.mark.parametrize("twin", list(cache.TWINS))
def test_twin_coverage_figure(twin):
    base = cache.TWINS[twin].base
    report = bisect(zoo_model(base), "CPU:f32", "CPU:f32", zoo_inputs(base), target_model=zoo_model(twin),
                    local=False, noise=False, progress=False)
    assert report.coverage >= 0.8, report.coverage
    assert f"{report.coverage:.0%}" in report.to_text()


def _rebuild(twin: str, base: ov.Model, ignored: list[str]) -> ov.Model:
    entry = cache.TWINS[twin]
    if entry.twin == "int8":
        return twins.quantize_int8(base, lambda seed: cache.sample_inputs(entry.base, seed=seed, model=base),
                                   ignored=ignored)
    return twins.compress_weights(base, bits=4 if entry.twin == "int4w" else 8, ignored=ignored)


# Weight compression is data-free: NNCF compresses every other layer as before. (nncf.quantize re-calibrates
# with a scope, and its new twin differs from the old one minus the scope's quantizers: not tested here.)
@pytest.mark.parametrize("twin", ["llama-int4w", "llama-int8w"])
def test_fix_fed_back_to_nncf_meets_its_tolerance(twin):
    base_name = cache.TWINS[twin].base
    model, inputs = zoo_model(base_name), zoo_inputs(base_name)
    plain = _final_error(model, zoo_model(twin), inputs)
    goal = plain / 2  # a fix is needed: half the twin's error
    report = bisect(model, "CPU:f32", "CPU:f32", inputs, target_model=zoo_model(twin), fix=goal,
                    sensitivity=True, noise=False, progress=False)
    fix = report.fix
    assert fix is not None and fix.solved, fix
    assert report.sensitivity and report.sensitivity[0].impact >= report.sensitivity[-1].impact
    scope = report.ignored_scope()
    assert scope and set(scope) <= {s.name for s in report.sensitivity}  # only quantized layers are kept
    rebuilt = _rebuild(twin, model, scope)
    error = _final_error(model, rebuilt, inputs)
    print(f"{twin}: plain {plain:.3e}, fix keeps {len(scope)} layers, partitioned {fix.error_after:.3e}, "
          f"NNCF with the scope {error:.3e}, goal {goal:.3e}")
    assert error <= fix.tolerance, (error, fix)


def test_a_twin_s_own_fault_beyond_quantization_is_what_the_fix_keeps():
    # A weight-compressed twin whose MLP output also carries a fault: the fix keeps the faulty node (the first
    # divergence), not every quantized layer around it (it kept 15 layers and left the fault on the target).
    from bisect_ov import inject_fault

    model, inputs = zoo_model("llama"), zoo_inputs("llama")
    twin = zoo_model("llama-int8w")
    linears = [n.get_friendly_name() for n in twin.get_ordered_ops()
               if n.get_type_name() == "MatMul" and n.get_friendly_name().startswith("linear")]
    site = linears[len(linears) // 2]  # a projection in the middle of the model
    goal = 2 * _final_error(model, twin, inputs)  # what the twin's quantization alone meets
    report = bisect(model, "CPU:f32", "CPU:f32", inputs, target_model=inject_fault(twin, site, "scale", 4.0),
                    fix=goal, noise=False, progress=False)
    assert report.first_divergence is not None and report.first_divergence.name == site, report.to_text()
    assert report.fix is not None and report.fix.solved and site in report.fix.on_reference, report.to_text()
