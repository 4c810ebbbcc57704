"""Many inputs: samples run on both sides, ranked, top-1 flips counted, the search on the worst one."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
from openvino import opset13 as ops

from bisect_ov import InputError, bisect
from bisect_ov.samples.sources import Samples, as_samples
from bisect_ov.zoo import synthetic
from tests.conftest import tiny_chain


def _miscalibrated(model, fq_name: str, factor: float):
    """A copy of an int8 model whose FakeQuantize `fq_name` clips at `factor` times its calibrated range."""
    bad = model.clone()
    for op in bad.get_ordered_ops():
        if op.get_friendly_name() == fq_name:
            for slot in (1, 2, 3, 4):
                value = op.input_value(slot).get_node().get_data() * factor
                op.input(slot).replace_source_output(ops.constant(value.astype(np.float32)).output(0))
    return bad


def test_forms_that_mean_many_samples(tmp_path):
    assert as_samples(None) is None and as_samples([np.zeros(3)]) is None and as_samples({"x": 1}) is None
    assert len(as_samples([{"x": 1}, {"x": 2}])) == 2
    assert len(as_samples(({"x": i} for i in range(3)))) == 3
    for i in range(3):
        np.save(tmp_path / f"s{i}.npy", np.zeros(2))
    assert len(as_samples(tmp_path)) == 3
    with pytest.raises(InputError, match="empty"):
        Samples([])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no .npz or .npy"):
        as_samples(tmp_path / "empty")


def test_int8_model_over_200_samples_counts_flips_and_names_the_cause():
    _, int8 = synthetic.fp32_and_int8()
    clipped = _miscalibrated(int8, "block2/pw/fq_in", 0.5)
    param = int8.get_parameters()[0]
    rng = np.random.default_rng(0)
    samples = Samples({param.get_friendly_name(): rng.uniform(-1, 1, list(param.shape)).astype(np.float32)}
                      for _ in range(200))
    report = bisect(int8, "CPU", "CPU:f32", samples, target_model=clipped, progress=False)
    s = report.samples
    assert s.count == 200 and s.classifier
    assert 0 < s.top1_flips < 200 and len(s.top1_flipped) == s.top1_flips
    assert s.errors[s.worst] == max(s.errors)
    assert report.first_divergence.name == "block2/pw/fq_in"
    spread = report.node("block2/pw/fq_in").over_samples
    assert spread["max"] >= spread["p90"] >= spread["p50"] > 0
    assert f"top-1 answer differs on {s.top1_flips} of 200" in " ".join(report.to_text().split())


def test_the_search_runs_on_the_worst_sample():
    model = tiny_chain()
    quiet = np.full((1, 8), 1e-3, np.float32)
    loud = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32) * 3
    from bisect_ov import inject_fault

    faulty = inject_fault(model, "mm1", "offset", 0.01)
    report = bisect(model, "CPU", "CPU:f32", [[quiet], [loud], [quiet]], target_model=faulty, progress=False)
    assert report.samples.count == 3
    # An offset hurts small values most: the quiet samples are the worst.
    assert report.samples.worst in (0, 2)
    assert report.first_divergence.name == "mm1"


def test_samples_recorded_on_several_machines_merge_and_replay(tmp_path):
    """Scale out: each machine records its shard, the captures are merged, one bisect compares them all."""
    from bisect_ov import merge_captures, record

    model = synthetic.demo()
    samples = [synthetic.sample_inputs(model, seed=s) for s in range(3)]
    shards = [record(model, "CPU:f32", s, tmp_path / f"machine{i}.npz") for i, s in enumerate(samples)]
    merged = merge_captures(shards, tmp_path / "all.npz")
    report = bisect(model, "CPU", f"capture:{merged}", Samples(samples), target_model=None,
                    fix=False, progress=False)
    assert report.samples.count == 3 and not report.diverges  # the same f32 CPU recorded every shard
    assert report.target.name == "capture:all.npz"
    # A sample the merged capture lacks: it quoted one recorded hash and shape, and suggested the capture's seed.
    with pytest.raises(InputError, match=r"None of the 3 input sets recorded in the capture 'all.npz' is this one"):
        bisect(model, "CPU", f"capture:{merged}", Samples([*samples, synthetic.sample_inputs(model, seed=9)]),
               progress=False)


def test_feature_maps_are_not_classifiers_ties_are_agreement_and_no_answer_differs():
    from bisect_ov.samples.sources import classifier_outputs, flips

    f32 = np.dtype(np.float32)
    assert classifier_outputs([(1, 64, 32, 32), (1, 10), (1, 7, 100), (1, 7, 100)], [f32] * 4,
                              ["features", "probs", "hidden", "logits"]) == [1, 3]
    assert classifier_outputs([(1, 10)], [np.dtype(np.int64)], ["ids"]) == []
    ref = np.array([[0.1, 0.7, 0.2, 0.0, 0.0, 0.0]], np.float32)
    tied = np.array([[0.3, 0.7, 0.7, 0.3, 0.3, 0.3]], np.float32)  # the top ties: either side may break it
    assert flips(ref, tied, 1) == (False, False)
    # No answer: every class equal (logits all zero), or a NaN or infinite score anywhere in the row.
    for none in ([[0.3] * 6], [[0.1, np.nan, 0.2, 0, 0, 0]], [[np.nan, 0.7, 0.2, 0, 0, 0]], [[0, np.inf, 0, 0, 0, 0]]):
        assert flips(ref, np.array(none, np.float32), 5) == (True, True), none
    assert flips(ref, np.array([[0.9, 0.1, 0.0, 0.0, 0.0, 0.0]], np.float32), 1) == (True, True)
    assert flips(ref, np.array([[0.9, 0.1, 0.0, 0.0, 0.0, 0.0]], np.float32), 2) == (True, False)


def test_explicit_class_outputs_are_used_and_named():
    from bisect_ov import InputError

    model = tiny_chain()
    samples = [{"x": np.full((1, 8), i / 10, np.float32)} for i in range(3)]
    report = bisect(model, "CPU", "CPU:f32", Samples(samples), classifier_outputs=["tanh3"], progress=False,
                    local=False, impact=0, noise=False)
    assert report.samples.classifier and report.samples.class_outputs == ("tanh3",)
    with pytest.raises(InputError, match="not outputs of the model"):
        bisect(model, "CPU", "CPU:f32", Samples(samples), classifier_outputs=["nope"], progress=False)


def test_the_cost_per_stage_counts_every_samples_run():
    # Each sample runs once per side untouched (the outputs pass) and once tapped (each node over the samples).
    model = tiny_chain()
    samples = [{"x": np.random.default_rng(i).standard_normal((1, 8)).astype(np.float32)} for i in range(7)]
    one = bisect(model, "CPU:f32", "CPU:f32", samples[0], local=False, impact=0, noise=False, progress=False)
    many = bisect(model, "CPU:f32", "CPU:f32", samples, local=False, impact=0, noise=False, progress=False)
    for side in ("ref", "target"):
        runs = sum(c[f"{side}_infers"] for c in many.costs.values())
        assert runs == sum(c[f"{side}_infers"] for c in one.costs.values()) + 2 * 7, many.costs


def test_the_report_says_on_how_many_samples_a_node_is_over_its_tolerance(tmp_path):
    # Zeroing a ReLU's output is an error only on the samples where it had positive values: the report must
    # count those, in the first divergence's sentence, the culprit table and the DataFrame.
    import openvino as ov

    from bisect_ov import inject_fault

    x = ops.parameter([1, 8], np.float32, name="x")
    relu = ops.relu(x, name="relu")
    w = ops.constant(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), name="w")
    model = ov.Model([ops.matmul(relu, w, False, False, name="head").output(0)], [x], "relu_head")
    rng = np.random.default_rng(1)
    positive = [i % 3 != 0 for i in range(12)]  # 8 of 12 samples reach the ReLU with positive values
    samples = [{"x": (np.abs(rng.standard_normal((1, 8))) * (1 if p else -1)).astype(np.float32)} for p in positive]
    report = bisect(model, "CPU:f32", "CPU:f32", samples, target_model=inject_fault(model, "relu", "zero"),
                    local=False, impact=0, noise=False, progress=False)
    assert report.first_divergence is not None and report.first_divergence.name == "relu"
    spread = report.node("relu").over_samples
    assert spread["count"] == 12 and spread["over_tolerance"] == sum(positive) == 8
    text = " ".join(report.to_text().split())
    assert "Over the 12 samples it is over its tolerance on 8" in text
    assert "8/12" in text
    df = report.to_dataframe().set_index("name")
    assert df.loc["relu", "n_samples_over_tol"] == 8
    assert "8 of 12 samples" in report.save_html(tmp_path / "r.html").read_text()  # the first divergence's card
    assert "8 of 12 samples" in " ".join(report._repr_html_().split())  # Jupyter shows the same card


def test_a_batch_the_executor_cancels_is_run_again(tmp_path):
    """An executor may cancel a future (Dask does when the worker holding it dies): the batch runs again."""
    from concurrent.futures import Future, ThreadPoolExecutor

    class CancelsTheFirst(ThreadPoolExecutor):
        cancelled = 0

        def submit(self, fn, /, *args, **kwargs):
            if not CancelsTheFirst.cancelled:
                CancelsTheFirst.cancelled += 1
                future: Future = Future()
                future.cancel()
                future.set_running_or_notify_cancel()  # what an executor does with a future it cancels
                return future
            return super().submit(fn, *args, **kwargs)

    model = tiny_chain()
    samples = [{"x": np.full((1, 8), i, np.float32)} for i in range(6)]
    with CancelsTheFirst(max_workers=1) as pool:
        report = bisect(model, "CPU:f32", "CPU:f32", samples, executor=pool, samples_per_batch=2, local=False,
                        impact=0, noise=False, progress=False)
    assert CancelsTheFirst.cancelled == 1
    assert report.samples.count == 6 and not report.samples.partial and report.samples.retried == 1


def test_the_examined_samples_nan_inputs_are_noted():
    # The note was made from the first sample's inputs: a NaN in the worst one, where the search ran, went unsaid.
    rng = np.random.default_rng(0)
    samples = [{"input": rng.random((1, 3, 32, 32)).astype(np.float32)} for _ in range(3)]
    samples[1]["input"][0, 0, 0, 0] = np.nan
    report = bisect(synthetic.demo(), "CPU:f32", "EMU:f16", Samples(samples), progress=False, budget="fast")
    assert report.samples.worst == 1  # the NaN sample is the worst: the search runs on it
    assert any("Input 'input' holds 1 NaN and 0 Inf value(s)" in n for n in report.notes)


def test_a_folder_s_files_run_in_natural_order_and_the_worst_is_named_by_its_file(tmp_path):
    # img_2 before img_10, as a person numbers files (they sorted as text: sample #5 was img_3.npy), and the
    # samples line names the worst sample's file.
    model = tiny_chain()
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    names = ["img_0.npy", "img_1.npy", "img_2.npy", "img_10.npy", "img_11.npy"]
    for scale, name in enumerate(names):
        np.save(tmp_path / name, x * (1 + scale) if name != "img_2.npy" else x * 1e6)  # past f16: the worst
    samples = as_samples(str(tmp_path))
    assert [samples.file_of(i) for i in range(len(names))] == names
    report = bisect(model, "CPU:f32", "EMU:f16", str(tmp_path), progress=False)
    assert report.samples.worst == 2 and report.samples.worst_file == "img_2.npy", report.samples
    assert "(sample #2, 'img_2.npy', on which the search ran)" in " ".join(report.to_text().split())


def test_the_samples_line_says_how_many_errors_are_not_finite():
    """A mean over the finite errors says so; with none finite it is not a dash."""
    from types import SimpleNamespace

    from bisect_ov.core.records import SamplesSummary
    from bisect_ov.report.blocks import _samples

    def line(errors):
        finite = [e for e in errors if np.isfinite(e)]
        summary = SamplesSummary(count=len(errors), errors=tuple(errors), ranking=(0,), worst=0,
                                 error_mean=float(np.mean(finite)) if finite else None, error_max=max(errors))
        return " ".join(_samples(SimpleNamespace(samples=summary)).lines)

    assert "final error mean 2.0e-01," in line([0.1, 0.3])
    assert "final error mean 2.0e-01 over the 2 finite (1 not finite)," in line([0.1, float("inf"), 0.3])
    assert "final error not finite on any sample," in line([float("inf"), float("inf")])


def test_files_named_relative_to_the_caller_are_found_from_another_folder(tmp_path, monkeypatch):
    # `--inputs ../samples` with a cluster: the paths travelled as typed and a worker in another folder read
    # "Input file not found: '../samples/s_0.npy'". They are made absolute where the samples are listed.
    x = np.ones((1, 3, 32, 32), np.float32)
    (tmp_path / "samples").mkdir()
    (tmp_path / "work").mkdir()
    for i in range(2):
        np.save(tmp_path / "samples" / f"s_{i}.npy", x * (i + 1))
    monkeypatch.chdir(tmp_path / "work")
    listed = Samples(["../samples/s_0.npy", pathlib.Path("../samples/s_1.npy")])
    folder = as_samples("../samples")
    monkeypatch.chdir(tmp_path)  # a worker elsewhere
    for path in (listed.load(0), listed.load(1), folder.load(1)):
        assert os.path.isabs(path) and os.path.isfile(path), path
    assert folder.file_of(1) == "s_1.npy"
    report = bisect(synthetic.demo(), "CPU:f32", "EMU:f16", listed, progress=False)  # read from here, not 'work'
    assert report.samples.count == 2


def test_a_loader_that_returns_nothing_is_told_so():
    # loader(i) that forgot its return: "Input 'x' [?,3,?,?] f32 has a dynamic shape, so random inputs cannot be made".
    samples = Samples(loader=lambda i: None, count=3)
    with pytest.raises(InputError, match=r"Sample #0: loader\(0\) returned None: return the sample"):
        bisect(synthetic.demo(), "CPU:f32", "EMU:f16", samples, progress=False)


def test_the_samples_line_says_where_they_ran_and_the_median():
    # Where the samples ran was in the JSON only; the error's spread was its mean and max.
    from concurrent.futures import ThreadPoolExecutor

    inputs = [{"input": np.random.default_rng(i).standard_normal((1, 3, 32, 32)).astype(np.float32)} for i in range(5)]
    with ThreadPoolExecutor(2) as pool:
        report = bisect(synthetic.demo(), "CPU:f32", "EMU:f16", inputs, executor=pool, progress=False)
    errors = sorted(report.samples.errors)
    text = " ".join(report.to_text().split())  # the line wraps
    line = text[text.index("Samples:"):]
    assert line.startswith("Samples: 5 run on both sides on ThreadPoolExecutor (1 worker process); final error mean ")
    assert f"median {errors[2]:.1e}," in line, line
