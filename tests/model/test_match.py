"""A twin with an output the model lacks: it runs, the outputs both have are compared, and the extra one is listed."""

from __future__ import annotations

import openvino as ov
import openvino.opset13 as ops
import pytest

from bisect_ov import bisect, inject_fault
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.match import match_nodes
from tests.conftest import tiny_chain, unnamed_onnx


def _twin_with_extra_output(at: str, *, first: bool) -> ov.Model:
    twin = inject_fault(tiny_chain(), "mm2")
    node = next(n for n in twin.get_ordered_ops() if n.get_friendly_name() == at)
    extra = ops.result(node.output(0))
    extra.set_friendly_name("extra")
    results = [extra, *twin.get_results()] if first else [*twin.get_results(), extra]
    return ov.Model(results, twin.get_parameters(), "twin")


def test_the_extra_output_is_listed_as_unmatched_and_not_compared():
    model, twin = tiny_chain(), _twin_with_extra_output("tanh1", first=False)
    match = match_nodes(ModelGraph(model), ModelGraph(twin))
    assert [n for n in match.unmatched_target if "extra" in n] == ["output 'extra' (not compared: the model has no such output)"]
    assert not [n for n in match_nodes(ModelGraph(model), ModelGraph(inject_fault(tiny_chain(), "mm2"))).unmatched_target
                if n.startswith("output")]


@pytest.mark.parametrize("at, first", [("tanh1", False), ("tanh1", True), ("x", False), ("mm2/before_fault", False)],
                         ids=["extra-last", "extra-first", "extra-reads-the-input", "extra-reads-the-twin-s-own-op"])
def test_a_twin_with_one_extra_result_runs_every_experiment(at, first):
    report = bisect(tiny_chain(), ref="CPU:f32", target="CPU:f32", target_model=_twin_with_extra_output(at, first=first),
                    fix=True)
    assert report.first_divergence is not None and report.first_divergence.name == "mm2"
    assert [o.name for o in report.outputs] == ["tanh3"]
    assert any("'extra'" in name for name in report.unmatched["target_model"])
    assert report.fix is not None


def test_one_file_loaded_twice_matches_whole_though_its_made_up_names_differ(tmp_path):
    # OpenVINO makes names up for the ops it adds (a LayerNormalization's MVN, Multiply, Add) from a counter:
    # the same file as model and twin left those unmatched (43 nodes of an ONNX MobileViT, coverage 91%) and
    # listed its ops on constants as foreign. They pair by what they read, in graph order.
    path = unnamed_onnx(tmp_path / "unnamed.onnx")
    ref, twin = ModelGraph(ov.Core().read_model(path)), ModelGraph(ov.Core().read_model(path))
    made_up = [n.key for n in ref.candidates() if n.auto_named]
    assert made_up and not set(made_up) & {n.key for n in twin.candidates()}, made_up  # other names this time
    match = match_nodes(ref, twin)
    assert match.unmatched_ref == () and match.unmatched_target == (), match
    assert match.coverage(ref) == 1.0
    pairs = dict(match.ops)
    assert all(ref[k].op_type == twin[pairs[k]].op_type and ref[k].index == twin[pairs[k]].index for k in made_up)


def test_a_quantization_the_model_shares_with_its_twin_is_no_difference(tmp_path):
    # An IR saved with f16 weights given as model and as twin: both decompress the same weights, so the twin's
    # tolerance is not widened for a quantization (the verdict said "bf16 rounding and the twin's quantization").
    path = tmp_path / "chain.xml"
    ov.save_model(tiny_chain(), path)  # compress_to_fp16 by default
    model, twin = ov.Core().read_model(path), ov.Core().read_model(path)
    match = match_nodes(ModelGraph(model), ModelGraph(twin))
    assert match.quantized == {} and match.unmatched_target == (), match
    f32 = match_nodes(ModelGraph(tiny_chain()), ModelGraph(twin))  # an f32 model against the f16-weight twin
    assert f32.quantized and all(q.weight_type == "f16" for q in f32.quantized.values()), f32.quantized
