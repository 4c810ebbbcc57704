"""The zoo tier: `bisect()` on real architectures from the real converters, as users bring them.

For every small zoo model (`bisect_ov.zoo.cache.MODELS`): default options, CPU f32 against the CPU's own
default precision (bf16 on CPUs with avx512_bf16, f32 elsewhere) and against emulated f16; every NNCF twin
against its FP32 model; and faults injected at several nodes with the target in bf16, which must each be
named first. What is asserted, for each run:

* no exception escapes;
* coverage: the compared nodes, with the nodes fused into them, are at least 80% of the model's compute nodes;
* the fidelity ratio (instrumented / plain final-output error), where reported, is within [0.5, 2];
* the verdict agrees with the final outputs: DIVERGES exactly when an output is over its tolerance, and then
  with a first divergence named, or, when the report says the error accumulates through depth, with every
  culprit's own (local) error measured and within its tolerance.

Cases that fail today because of known defects are marked ``xfail(strict=True)`` with the issue that fixes
them, so they turn into failures (to unmark) when fixed. Every run's figures go to `tests.zoo.records`,
printed as a table at the end of the session.
"""

from __future__ import annotations

import time

import numpy as np
import openvino as ov
import pytest

from bisect_ov import bisect, inject_fault
from bisect_ov.analysis.diagnosis import CONCENTRATED, SPIKE
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.taps import default_taps, tensor_sizes
from bisect_ov.run.devices import cpu_supports_bf16
from bisect_ov.zoo import cache
from tests.conftest import cpu_default_precision
from tests.zoo import records
from tests.zoo.conftest import needs_zoo, zoo_inputs, zoo_model

pytestmark = [needs_zoo, pytest.mark.zoo]

# bert_large is bert with more layers: benchmarked in full size, not tested twice.
MODELS = [name for name in cache.MODELS if name != "bert_large"]
TWINS = list(cache.TWINS)
COVERAGE = 0.8
FIDELITY = (0.5, 2.0)
FAULT_SITES = 4
# Seeded N(0, 0.3) noise: unlike a scale or an offset, no LayerNorm or softmax takes it out again.
FAULT = {"kind": "noise", "magnitude": 0.3, "seed": 7}
# A fault counts as visible when it changes the final outputs by this much (rel L2), 3x bf16's tolerance.
# A fault must move the outputs well beyond their bf16 tolerance (8 x 2^-8 x (1 + log2(K)/4): 0.11 for a
# 1280-wide classifier) for "the fault is named" to be the right answer; below it the tool rightly calls the
# fault absorbed.
VISIBLE = 0.25
# Ops that only move or select values (and the masks built from them): faults go on arithmetic.
VIEWS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Concat", "Broadcast", "Gather", "Select",
                   "Convert", "Slice", "StridedSlice", "Split", "VariadicSplit", "ShapeOf", "Tile"})
# Candidates tried after each starting point before giving that point up (each costs a compile).
SCAN = 6


BF16 = cpu_supports_bf16()


def _xfail(reason: str, condition: bool = True):
    return pytest.mark.xfail(condition, strict=True, reason=reason)


# Keyed by (model, target). "CPU" runs bf16 only where the CPU has it; elsewhere both sides are f32 and agree.
# (MobileNetV3 on bf16 and the three CNNs against emulated f16 are over their output tolerance by error
# accumulated through depth: DIVERGES with no first divergence, which `_check` accepts once the culprits' own
# errors confirm it.)
KNOWN: dict = {}
# The NNCF twins (issue 14) run clean: no known defects left.
KNOWN_TWINS: dict = {}
KNOWN_FAULTS = {
    # The stateful IR runs now (faults on its dynamic tensors are seeded in-graph noise); the site search finds
    # at most 2 nodes whose noise moves the logits by 25% among those it scans (tests/zoo/test_llm.py names a fault
    # after the first attention block of this model).
    "llama_stateful": _xfail("site search: at most 2 of the scanned nodes of the stateful Llama change its "
                             "outputs by 25% when faulty"),
    # EfficientNet's benign 'blocks.3.0.se.act1' (Swish, 1.1x its bf16 tolerance) was named ahead of faults injected
    # later (2 of 4 sites) until a fault whose own error alone takes the outputs over their tolerance became a first
    # divergence (the judge's dominant origins): it is named now, the Swish a bystander.
}


def _compute_nodes(model: ov.Model) -> int:
    return len(ModelGraph(model).candidates())


def _coverage(report, model: ov.Model) -> tuple[int, float]:
    """Nodes compared, and the share of the model's compute nodes compared directly or through a fused group."""
    graph = ModelGraph(model)
    compute = {n.key for n in graph.candidates()}
    covered = set()
    for node in report.nodes:
        covered.add(node.key)
        covered.update(graph.find(m).key for m in node.group)
    return len(report.nodes), len(covered & compute) / max(1, len(compute))


def _verdict(report) -> str:
    return "DIVERGES" if report.diverges else "no divergence"


def _check(report, model: ov.Model) -> list[str]:
    """What is wrong with a report by the tier's rules (empty when all hold)."""
    problems = []
    compared, coverage = _coverage(report, model)
    if coverage < COVERAGE:
        problems.append(f"coverage {coverage:.0%} ({compared} nodes compared of {_compute_nodes(model)})")
    ratio = (report.fidelity.ratio if report.fidelity is not None else None)
    if ratio is not None and not FIDELITY[0] <= ratio <= FIDELITY[1]:
        problems.append(f"fidelity ratio {ratio:.2f} outside {FIDELITY}")
    over = [o.name for o in report.outputs if o.diverged]
    if report.diverges != bool(over):
        first = report.first_divergence
        problems.append(f"verdict {_verdict(report)} while outputs over tolerance are {over}"
                        + (f" (first divergence {first.name}: {first.causes[:1]})" if first else
                           f" (no first divergence; {len(report.ranking)} culprits)"))
    if report.diverges and report.first_divergence is None:
        # Allowed only as the report explains it: error accumulated through depth, each node adding less than
        # its tolerance. That claim is checked on the culprits' own (local) errors, which must have been run.
        local = [(n.name, n.local_error, n.tolerance) for n in report.culprits if n.local_error is not None]
        makers = [name for name, own, tol in local if not own <= tol]
        if not local or len(local) < len(report.culprits) or makers:
            problems.append("DIVERGES without a first divergence" + (f", while {makers[:3]} make error of their own"
                                                                     if makers else ", local errors not measured"))
    return problems


def _run(kind: str, name: str, target: str, model: ov.Model, inputs, **kwargs):
    start = time.perf_counter()
    fields = {"target": target, "ops": len(model.get_ops()), "compute": _compute_nodes(model),
              "converter": cache.describe(cache.TWINS[name].base if name in cache.TWINS else name)["converter"]}
    try:
        report = bisect(model, "CPU:f32", target, inputs, progress=False, **kwargs)
    except Exception as err:
        records.record(kind, name, **fields, seconds=time.perf_counter() - start,
                       verdict=f"error {type(err).__name__}", error=str(err)[:300])
        raise
    compared, coverage = _coverage(report, model)
    problems = _check(report, model)
    records.record(kind, name, **fields, seconds=time.perf_counter() - start, compared=compared,
                   coverage=coverage, fidelity=(report.fidelity.ratio if report.fidelity is not None else None), verdict=_verdict(report),
                   first=report.first_divergence.name if report.first_divergence else None,
                   output_error=max((o.error for o in report.outputs), default=None), problems=problems)
    return report, problems


def _cases(targets):
    return [pytest.param(name, target, marks=[KNOWN[(name, target)]] if (name, target) in KNOWN else [],
                         id=f"{name}-{target}") for name in MODELS for target in targets]


@pytest.mark.parametrize("name, target", _cases(["CPU", "EMU:f16"]))
def test_default_bisect_on_zoo_model(name, target):
    model = zoo_model(name)
    report, problems = _run("bisect", name, target, model, zoo_inputs(name))
    assert not problems, f"{name} against {target}: {problems}\n{report.to_text()}"


def _twin_cases():
    cases = []
    for twin in TWINS:
        for target in ("CPU:f32", "CPU:bf16"):
            marks = [KNOWN_TWINS[(twin, target)]] if (twin, target) in KNOWN_TWINS else []
            if target == "CPU:bf16":
                marks.append(pytest.mark.skipif(not BF16, reason="the CPU plugin here has no bf16"))
            cases.append(pytest.param(twin, target, marks=marks, id=f"{twin}-{target}"))
    return cases


# A quantized twin differs from its model by its quantization (int8: ~1e-2 relative); a tolerance near f32
# rounding (1e-6) makes every node "diverge".
TWIN_MIN_TOLERANCE = 1e-3


@pytest.mark.parametrize("twin, target", _twin_cases())
def test_nncf_twin_against_its_model(twin, target):
    base = cache.TWINS[twin].base
    model = zoo_model(base)
    report, problems = _run("twin", twin, target, model, zoo_inputs(base), target_model=zoo_model(twin))
    low = [o.name for o in report.outputs if o.tolerance < TWIN_MIN_TOLERANCE]
    if low:
        problems.append(f"outputs {low} judged at tolerance {min(o.tolerance for o in report.outputs):.1e}")
    assert not problems, f"{twin} on {target}: {problems}\n{report.to_text()}"


def test_f32_reference_of_an_ir_with_f16_weights_is_described_as_f32():
    report = bisect(zoo_model("bert", compressed=True), "CPU:f32", "CPU", zoo_inputs("bert"), progress=False)
    assert report.ref.precision == "f32"
    assert "f16" not in report.ref.note, report.ref.note
    assert report.ref.weights == "f16" and report.ref.label == "CPU:f32 (weights f16)"


def _outputs(model: ov.Model, inputs) -> list[np.ndarray]:
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return [np.asarray(v, dtype=np.float64) for v in compiled.create_infer_request().infer(inputs).values()]


def _fault_sites(model: ov.Model, inputs, count: int = FAULT_SITES) -> list[str]:
    """`count` float compute nodes spread over the graph whose fault changes the final outputs.

    A fault that the network absorbs before any output (a scaled key in a near-uniform softmax, a layer-scale
    product of 1e-8) is correctly not a divergence of the outputs; such sites are passed over, in order from
    evenly spaced starting points (at most `SCAN` from each), checking each with one plain f32 run of the
    faulty model.
    """
    nodes = [n for n in ModelGraph(model).candidates() if n.outputs[0].is_float and n.op_type not in VIEWS]
    clean = _outputs(model, inputs)
    sites: list[str] = []
    for start in np.linspace(0.1, 0.9, count) * (len(nodes) - 1):
        for node in nodes[round(start):][:SCAN]:
            if node.name in sites:
                continue
            faulty = _outputs(inject_fault(model, node.name, **FAULT), inputs)
            change = max(np.linalg.norm(f - c) / max(np.linalg.norm(c), 1e-30) for f, c in zip(faulty, clean))
            if change > VISIBLE:
                sites.append(node.name)
                break
    return sites


@pytest.mark.skipif(not BF16, reason="the CPU plugin here has no bf16 (needs AVX512_BF16 or AMX)")
@pytest.mark.parametrize("name", [pytest.param(n, marks=[KNOWN_FAULTS[n]] if n in KNOWN_FAULTS else [])
                                  for n in MODELS])
def test_injected_faults_are_named_with_bf16_rounding_everywhere(name):
    """Add noise to one node's output in the target model, which runs in bf16: that node must be named first.

    Noise needs static shapes, so both sides run the model reshaped to the sample inputs' shapes.
    """
    inputs = zoo_inputs(name)
    model = zoo_model(name).clone()
    model.reshape({key: list(value.shape) for key, value in inputs.items()})
    start = time.perf_counter()
    misses = []
    sites = _fault_sites(model, inputs)
    assert len(sites) >= FAULT_SITES - 1, f"{name}: only {sites} change the outputs when faulty"
    for site in sites:
        report = bisect(model, "CPU:f32", "CPU:bf16", inputs, target_model=inject_fault(model, site, **FAULT),
                        progress=False)
        first = report.first_divergence
        if first is None or first.name != site:
            misses.append(f"{site} -> {first.name if first else None}"
                          + (f" ({first.op_type}: {first.causes[:1]})" if first else ""))
    hits = len(sites) - len(misses)
    records.record("faults", name, sites=len(sites), hits=hits, hit_rate=hits / len(sites),
                   seconds=time.perf_counter() - start, misses=misses)
    print(f"{name}: fault hit rate {hits}/{len(sites)}")
    assert not misses, f"{name}: {hits}/{len(sites)} faults named first; missed: {misses}"


STREAMED = ("bert", "gpt2", "llama", "whisper_encoder", "vit", "resnet50", "convnext", "mobilenetv3")


@pytest.mark.skipif(not BF16, reason="the CPU plugin here has no bf16 (needs AVX512_BF16 or AMX)")
@pytest.mark.parametrize("name", STREAMED)
def test_a_streamed_run_names_a_fault_the_bf16_target_makes(name):
    """A budget of an eighth of the model's tensors: the model runs segment by segment on both sides, the target
    in bf16 with one node's output perturbed by the device itself (the same model on both sides, so the streamed
    path is the one taken). The faulty node must be named first, and the streamed target must be faithful."""
    from tests.conftest import FaultyCPU

    inputs = zoo_inputs(name)
    model = zoo_model(name).clone()
    model.reshape({key: list(value.shape) for key, value in inputs.items()})
    site = _fault_sites(model, inputs, count=2)[-1]
    graph = ModelGraph(model)
    sizes = tensor_sizes(graph, list(inputs.values()))
    budget = max(1, sum(sizes.get(t, 0) for t in default_taps(graph)) // 8)
    start = time.perf_counter()
    report = bisect(model, "CPU:f32", FaultyCPU(site, "bf16", FAULT["magnitude"]), inputs, max_tap_bytes=budget,
                    progress=False)
    first = report.first_divergence
    # Streamed in the plain run (the reference's plain run is the streamed measurement) or in the capture.
    segments = max(report.costs["plain"]["ref_compiles"], report.costs["measure"]["ref_compiles"])
    records.record("streamed", name, site=site, named=first.name if first else None, ref_compiles=segments,
                   fidelity=report.fidelity.ratio if report.fidelity else None, seconds=time.perf_counter() - start)
    assert segments >= 2, "not streamed"
    assert report.fidelity is not None and FIDELITY[0] <= report.fidelity.ratio <= FIDELITY[1], report.fidelity
    assert first is not None and first.name == site, f"{site} -> {first.name if first else None}"


@pytest.mark.skipif(cpu_default_precision() != "bf16", reason="plain CPU does not run bf16 here (its default INFERENCE_PRECISION_HINT)")
@pytest.mark.parametrize("name", ["efficientnet", "mobilenetv3", "convnext", "resnet50", "whisper_encoder"])
def test_a_streamed_default_job_is_as_faithful_as_one_compile(name):
    """The default job against the CPU's bf16, whole and with an eighth of the tensors' bytes as budget: the
    streamed target exposes what one tapped compile exposes (not the values only the reference's local-error
    runs need), so its final outputs, and the fidelity ratio, are those of the unstreamed run."""
    inputs = zoo_inputs(name)
    model = zoo_model(name).clone()
    model.reshape({key: list(value.shape) for key, value in inputs.items()})
    graph = ModelGraph(model)
    sizes = tensor_sizes(graph, list(inputs.values()))
    budget = max(1, sum(sizes.get(t, 0) for t in default_taps(graph)) // 8)
    common = {"noise": False, "impact": 0, "progress": False}
    whole = bisect(model, "CPU:f32", "CPU", inputs, **common)
    streamed = bisect(model, "CPU:f32", "CPU", inputs, max_tap_bytes=budget, **common)
    assert streamed.costs["plain"]["ref_compiles"] >= 2, "not streamed"
    assert whole.fidelity is not None and streamed.fidelity is not None
    assert streamed.fidelity.ratio == pytest.approx(whole.fidelity.ratio, rel=0.01)
    for a, b in zip(whole.outputs, streamed.outputs):
        assert b.error == pytest.approx(a.error, rel=1e-3), a.name


# ----- what the zoo builds ---------------------------------------------------------------------------------


def test_sample_inputs_match_each_model_and_run():
    core = ov.Core()
    for name in MODELS:
        model = zoo_model(name)
        inputs = zoo_inputs(name)
        meta = cache.describe(name)
        assert set(inputs) == {p.output(0).get_any_name() for p in model.get_parameters()}, name
        if "input_ids" in inputs:
            vocab = meta["inputs"]["input_ids"]["vocab"]
            assert 0 <= inputs["input_ids"].min() and inputs["input_ids"].max() < vocab
            assert np.all(inputs["attention_mask"] == 1)
        # Converters leave batch (and sequence or image size) dynamic; the sample inputs make them concrete.
        assert any(not p.get_partial_shape().is_static for p in model.get_parameters()), name
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        request = compiled.create_infer_request()
        out = request.infer(inputs)
        assert all(np.isfinite(v).all() for v in out.values()), name


def test_ir_saved_as_users_save_it_has_f16_weights_and_the_other_f32():
    compressed, plain = zoo_model("bert", compressed=True), zoo_model("bert")
    def weights(m):
        return {c.get_output_element_type(0).get_type_name() for c in m.get_ops()
                if c.get_type_name() == "Constant" and c.get_output_shape(0)
                and np.prod(list(c.get_output_shape(0))) > 1000}

    assert "f16" in weights(compressed) and "f16" not in weights(plain)


def test_optimum_export_is_the_stateful_ir_genai_runs():
    model = zoo_model("llama_stateful")
    types = {op.get_type_name() for op in model.get_ops()}
    assert {"ReadValue", "Assign"} <= types
    assert [p.output(0).get_any_name() for p in model.get_parameters()] == [
        "input_ids", "attention_mask", "position_ids", "beam_idx"]
    assert len(model.get_sinks()) == 2 * 2  # a key and a value state for each of the 2 layers


def test_twins_are_what_nncf_makes():
    def op_types(name):
        return {op.get_type_name() for op in zoo_model(name).get_ops()}

    def constant_types(name):
        return {op.get_output_element_type(0).get_type_name() for op in zoo_model(name).get_ops()
                if op.get_type_name() == "Constant"}

    assert "FakeQuantize" in op_types("mobilenetv3-int8") and "FakeQuantize" in op_types("resnet50-int8")
    assert {"u8"} & constant_types("llama-int8w")
    assert {"i4", "u4"} & constant_types("llama-int4w")


def test_builds_are_cached_and_built_once_when_asked_concurrently(tmp_path, monkeypatch):
    import threading

    built = []
    real_build = cache._build
    monkeypatch.setattr(cache, "_build", lambda *a: (built.append(a[0].name), real_build(*a))[1])
    paths = []
    threads = [threading.Thread(target=lambda: paths.append(cache.model_path("vit", root=tmp_path)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert built == ["vit"] and len(set(paths)) == 1 and paths[0].is_file()
    mtime = paths[0].stat().st_mtime_ns
    assert cache.model_path("vit", root=tmp_path).stat().st_mtime_ns == mtime  # reused, not rebuilt
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary leftovers


def test_cache_key_changes_with_library_versions(monkeypatch):
    import importlib.metadata

    key = cache.version_key()
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda d: "0.0" if d == "timm" else real(d))
    assert cache.version_key() != key


SPARSE = {"kind": "sparse", "magnitude": 1.0, "seed": 7}  # one element in a thousand doubled


def _site_value(model: ov.Model, site: str, inputs) -> np.ndarray:
    """The site's own output, one plain f32 run of `model` with that tensor added as an output."""
    m = model.clone()
    (op,) = [o for o in m.get_ops() if o.get_friendly_name() == site]
    m.add_outputs([op.output(0)])
    return _outputs(m, inputs)[-1]


@pytest.mark.parametrize("name", ["bert", "resnet50"])  # a transformer and a CNN
def test_a_few_wrong_elements_are_named_though_the_node_s_error_is_within_bf16_rounding(name):
    """One element in a thousand doubled moves a tensor's relative L2 error by about 3%, what bf16 allows one op:
    against the emulated bf16 device (the same on every CPU), the node is named as a concentrated-error origin
    when the fault is plain element by element: on f32, its worst element moved by twice the rule's bounds (as a
    share of the tensor's largest value: 2 x `SPIKE` tolerances, and 2 x `CONCENTRATED` times the fault's relative
    L2 size). A smaller fault (a small element picked, at a node whose long reduction has a large tolerance, or
    several picks in a small tensor) is within rounding there; a site whose inputs already carry more than its
    tolerance (a deep CNN on bf16, where rounding accumulates over the tolerance) gets its worst elements from
    them too; a site whose tensor no tap stores (a member of a fused kernel) cannot be seen element by element.
    These are passed over."""
    inputs = zoo_inputs(name)
    model = zoo_model(name).clone()
    model.reshape({key: list(value.shape) for key, value in inputs.items()})
    named, within, plain, misses = 0, 0, 0, []
    for site in _fault_sites(model, inputs, count=6):
        faulty = inject_fault(model, site, **SPARSE)
        clean = _site_value(model, site, inputs)
        change = _site_value(faulty, site, inputs) - clean
        peak = float(np.max(np.abs(change)) / max(np.max(np.abs(clean)), 1e-30))
        spread = float(np.linalg.norm(change) / max(np.linalg.norm(clean), 1e-30))
        report = bisect(model, "CPU:f32", "EMU:bf16", inputs, target_model=faulty, progress=False)
        node = next((n for n in report.nodes if n.name == site and n.inside_kernel is None), None)
        if (node is None or peak < 2 * SPIKE * node.tolerance or peak < 2 * CONCENTRATED * spread
                or node.input_error > node.tolerance):
            continue
        plain += 1
        first = report.first_divergence
        if first is not None and first.name == site:
            named += 1
            if node.error <= node.tolerance:  # only the rule for a few wrong elements can name it
                within += 1
                assert any(c.kind == "concentrated" for c in first.diagnosis), first.diagnosis
        else:
            misses.append(f"{site} ({node.op_type}, peak {peak:.2f}, {node.error:.1e} / tol {node.tolerance:.1e}) -> "
                          f"{first.name if first else None}")
    assert plain >= 2, f"{name}: only {plain} site(s) with a plain sparse fault measured"
    assert not misses, f"{name}: {named}/{plain} sparse faults named; missed: {misses}"
    assert within >= 1, f"{name}: no named site was within its tolerance: the rule for a few wrong elements is untested"
