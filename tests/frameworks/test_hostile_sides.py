"""Framework sides under hostile use: a module random between runs (a functional dropout in training mode, a
random op) is refused before its noise is blamed on OpenVINO; one module object as both sides runs the same
way every time, in threads too; ONNX Runtime failing at run time stays in the error family."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import openvino as ov  # noqa: E402

from bisect_ov import bisect  # noqa: E402
from bisect_ov.core.errors import BisectError, DeviceError, InputError  # noqa: E402
from bisect_ov.frameworks import Torch  # noqa: E402
from bisect_ov.model.graph import ModelGraph  # noqa: E402

FAST = dict(progress=False, noise=False, impact=0)


class _Net(torch.nn.Module):
    """Two linears around a functional dropout that follows ``self.training`` (no nn.Dropout to spot)."""

    def __init__(self, random: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
        self.random = random

    def forward(self, x):
        h = torch.nn.functional.dropout(torch.relu(self.a(x)), 0.5, self.training)
        if self.random:
            h = h + torch.rand_like(h) * 0.1
        return self.c(torch.tanh(self.b(h))) + x


def _converted(module, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ov.convert_model(module.eval(), example_input=torch.from_numpy(x))


X = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)


def test_a_functional_dropout_in_training_mode_is_refused_not_blamed_on_openvino():
    module = _Net()
    model = _converted(module, X)
    assert not bisect(model, ref=module, target="CPU:f32", inputs=[X], **FAST).diverges  # eval: the same model
    module.train()
    with pytest.raises(InputError, match=r"other outputs for the same inputs in a second run.*training mode.*"
                                         r"module\.eval\(\)"):
        bisect(model, ref=module, target="CPU:f32", inputs=[X], **FAST)
    assert module.training  # the user's module is left as it was


def test_a_random_op_in_eval_mode_is_refused():
    module = _Net(random=True)
    model = _converted(_Net(), X)
    with pytest.raises(InputError, match="second run.*random op"):
        bisect(model, ref=module.eval(), target="CPU:f32", inputs=[X], **FAST)


def test_one_module_as_both_sides_gives_the_same_answer_every_time():
    module = _Net().eval()
    model = _converted(module, X)
    answers = set()
    for _ in range(4):
        report = bisect(model, ref=module, target=module, inputs=[X], progress=False, impact=0)
        answers.add((report.diverges, len(report.nodes)))
    assert answers == {(False, len(report.nodes))}
    # Two sides bound to the one module, run in threads at once: each sees its own calls only.
    graph = ModelGraph(model)
    sides = [Torch(module).bind(graph, [X]), Torch(module).bind(graph, [X])]
    errors: list[BaseException] = []

    def run(side):
        try:
            for _ in range(30):
                side.side._run([X], list(side.binding.sources.values()), side.binding)
        except BaseException as err:  # noqa: BLE001 - collected for the assertion
            errors.append(err)

    threads = [threading.Thread(target=run, args=(s,)) for s in sides]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_onnx_runtime_failing_at_run_time_is_a_device_error(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((10, 8)).astype(np.float32), "table")
    graph = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["rows"]),
                               helper.make_node("Relu", ["rows"], ["out"])], "g",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8])], [table])
    path = tmp_path / "gather.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    ids = np.array([[1, 2, 3, 50]], np.int64)
    with pytest.raises(DeviceError, match=r"ONNX Runtime failed running gather.onnx on the inputs \(ids \[1, 4\] int64\)"):
        bisect(str(path), ref="ORT", target="CPU:f32", inputs=[ids], **FAST)
    np.save(tmp_path / "ids.npy", ids)
    from bisect_ov.cli import main

    code = main([str(path), "--ref", "ORT", "--target", "CPU:f32", "--input", f"ids={tmp_path / 'ids.npy'}", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert issubclass(DeviceError, BisectError)


def test_a_file_that_is_no_onnx_model_and_a_name_that_is_no_str_are_refused(tmp_path):
    pytest.importorskip("onnxruntime")
    from bisect_ov.frameworks import ORT

    (tmp_path / "garbage.onnx").write_bytes(b"not an onnx model")
    with pytest.raises(InputError, match="Cannot read .*garbage.onnx' as an ONNX model"):
        ORT(tmp_path / "garbage.onnx")
    with pytest.raises(InputError, match="Cannot read .* as an ONNX model"):
        bisect(str(tmp_path / "garbage.onnx"), ref="ORT", target="CPU:f32", **FAST)
    for name in (123, "", "  "):
        with pytest.raises(InputError, match="name must be a non-empty str"):
            Torch(_Net(), name=name)


class _Doubling(torch.nn.Module):
    """Doubles its input in place before a linear: a module that mutates what it is given."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):
        x.mul_(2.0)
        return self.fc(x)


def test_a_module_that_mutates_its_inputs_runs_on_copies():
    """The caller's arrays (which the OpenVINO side reads too) are never changed, and each of the side's runs
    (the second one checks that its outputs repeat) starts from the same values: the in-place doubling, which the
    conversion kept, is compared as the computation it is."""
    module = _Doubling().eval()
    model = _converted(module, X.copy())
    given = X.copy()
    report = bisect(model, ref=module, target="CPU:f32", inputs=[given], **FAST)
    np.testing.assert_array_equal(given, X)
    assert not report.diverges and report.outputs[0].error < 1e-6


def test_a_framework_side_with_an_executor_runs_its_samples_here_and_says_so(tmp_path):
    """An ONNX Runtime session cannot travel to the executor's workers: the samples run in this process, as a
    recorded side's do, with a note (it was refused as "BoundSide('onnxruntime') cannot travel ... use a device
    name", a name the user had given)."""
    import onnx

    from bisect_ov import bisect
    from bisect_ov.samples.sources import Samples
    from tests.model.test_load import _onnx_model

    path = tmp_path / "m.onnx"
    onnx.save(_onnx_model(), path)
    samples = [np.random.default_rng(i).standard_normal((1, 4)).astype(np.float32) for i in range(4)]
    there = bisect(str(path), ref="ORT", target="EMU:f16", inputs=Samples(samples), executor="processes:2", **FAST)
    here = bisect(str(path), ref="ORT", target="EMU:f16", inputs=Samples(samples), **FAST)
    assert there.samples.errors == here.samples.errors and there.samples.executor == "in-process"
    assert any("not on the executor: the onnxruntime side runs in this process" in " ".join(n.split()) for n in there.notes)
