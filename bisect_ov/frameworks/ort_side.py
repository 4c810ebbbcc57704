"""ONNX Runtime as a side: `ORT(model.onnx, dtype="f32" | "f64")`, or ``ref="ORT"`` with an .onnx model.

The ONNX file runs in ONNX Runtime's CPU execution provider with every intermediate value of the graph added
as a graph output, and each is matched to the OpenVINO node whose output tensor carries its name (OpenVINO's
ONNX frontend keeps the ONNX tensor names). ``dtype="f64"`` runs a copy of the model cast to float64 (float
initializers, constants, casts and value types): the float64 side of ``truth="f64"``, where ONNX Runtime has
float64 kernels for the model's ops; where it has not, making the side says which op failed. A run that fails
(an index out of range that the inputs fed) is a `DeviceError` with ONNX Runtime's sentence.

Assumes onnxruntime is installed (the ``ort`` extra); it is imported when a side is made.
"""

from __future__ import annotations

import os
from typing import Any, Hashable, Sequence

import numpy as np

from bisect_ov.core.errors import DeviceError, InputError, first_line, raise_if_interrupted
from bisect_ov.core.extras import install_hint
from bisect_ov.frameworks.side import Binding, FrameworkSide, check_outputs, covered_by_consumers, static_shapes
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.taps import Tap

__all__ = ["ORT", "import_onnxruntime", "to_double"]


def import_onnxruntime():
    """onnxruntime, or an `InputError` naming the extra that installs it."""
    try:
        import onnxruntime
    except ImportError as err:
        raise InputError("The ONNX Runtime side needs onnxruntime: " + install_hint("ort") + ".") from err
    return onnxruntime


def to_double(model):
    """A copy of an ONNX model computing in float64: float tensors, initializers, constants and casts."""
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    float_type, double_type = onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE

    def tensor(t):
        if t.data_type == float_type:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))

    def graph(g):
        for t in g.initializer:
            tensor(t)
        for v in [*g.input, *g.output, *g.value_info]:
            if v.type.tensor_type.elem_type == float_type:
                v.type.tensor_type.elem_type = double_type
        for node in g.node:
            for a in node.attribute:
                if a.name == "to" and node.op_type == "Cast" and a.i == float_type:
                    a.i = double_type
                if a.type == onnx.AttributeProto.TENSOR:
                    tensor(a.t)
                if a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)

    graph(model.graph)
    return model


class ORT(FrameworkSide):
    """ONNX Runtime (CPU execution provider) on an ONNX file or `onnx.ModelProto` (module docstring)."""

    framework = "onnxruntime"

    def __init__(self, model: Any, dtype: str = "f32", *, name: str | None = None):
        import onnx

        self.ort = import_onnxruntime()
        if isinstance(model, (str, os.PathLike)):
            if not os.path.isfile(model):
                raise InputError(f"ONNX file not found: '{os.fspath(model)}'.")
            try:
                self.source = onnx.load(os.fspath(model))
            except Exception as err:  # noqa: BLE001 - protobuf's DecodeError, an OSError, a bad external-data path
                raise InputError(f"Cannot read '{os.fspath(model)}' as an ONNX model: {type(err).__name__}: "
                                 f"{first_line(err)}. Pass the .onnx file the OpenVINO model was converted from.") from err
            self.label = os.path.basename(os.fspath(model))
        elif type(model).__name__ == "ModelProto":
            self.source = model
            self.label = model.graph.name or "ONNX model"
        else:
            raise InputError(f"ORT() takes an .onnx path or an onnx.ModelProto; got {type(model).__name__}.")
        super().__init__(dtype, name=name)
        self._session: Any = None

    def with_dtype(self, dtype: str) -> "ORT":
        side = ORT(self.source, dtype)
        side.label = self.label
        return side

    def describe(self) -> str:
        return f"ONNX Runtime {self.ort.__version__} CPU, {self.label}, {self.dtype}"

    def _session_for(self, names: Sequence[str]):
        import onnx

        if self._session is not None:
            return self._session
        model = to_double(self.source) if self.dtype == "f64" else onnx.ModelProto.FromString(self.source.SerializeToString())
        have = {o.name for o in model.graph.output}
        for name in names:
            if name not in have:
                model.graph.output.append(onnx.ValueInfoProto(name=name))
        options = self.ort.SessionOptions()
        options.graph_optimization_level = self.ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # values as written
        options.log_severity_level = 3  # errors only: its warnings (unused initializers, ...) are about the model
        try:
            self._session = self.ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception as err:  # noqa: BLE001 - onnxruntime raises its own types
            what = "the model cast to float64" if self.dtype == "f64" else "the model"
            raise InputError(f"ONNX Runtime cannot run {what}: {first_line(err)}"
                             + (" (an op without a float64 kernel: truth='f64' needs one for every op)"
                                if self.dtype == "f64" else "")) from err
        return self._session

    def _values(self) -> list[str]:
        g = self.source.graph
        made = [o for n in g.node for o in n.output if o]
        return list(dict.fromkeys(made))

    def _feed(self, arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        initializers = {t.name for t in self.source.graph.initializer}
        inputs = [i.name for i in self.source.graph.input if i.name not in initializers]
        feed = {}
        for name, a in zip(inputs, arrays):
            a = np.asarray(a)
            feed[name] = a.astype(np.float64 if self.dtype == "f64" else np.float32) if a.dtype.kind == "f" else a
        return feed

    def _running(self, session, names: list[str], arrays: Sequence[np.ndarray]) -> list:
        """`session.run(names, ...)` on `arrays`, its failures in the error family."""
        try:
            return session.run(names, self._feed(arrays))
        except Exception as err:  # noqa: BLE001 - onnxruntime raises its own types
            raise_if_interrupted(err)
            given = ", ".join(f"{n} {list(np.shape(a))} {np.asarray(a).dtype}" for n, a in self._feed(arrays).items())
            raise DeviceError(f"ONNX Runtime failed running {self.label} on the inputs ({given}): {first_line(err)}. "
                              "Check the inputs' values against what the model expects (token ids within the "
                              "vocabulary, indices within their range).") from err

    def _bind(self, graph: ModelGraph, arrays: list[np.ndarray]) -> tuple[Binding, list[np.ndarray]]:
        values = self._values()
        outputs = [o.name for o in self.source.graph.output]
        session = self._session_for(values)
        got = self._running(session, outputs, arrays)
        check_outputs(graph, "ONNX Runtime", [tuple(np.shape(a)) for a in got], static_shapes(graph, arrays),
                      f"ONNX model ({self.label})")
        known = set(values)
        sources: dict[Tap, Hashable] = {}
        for node in graph.candidates():
            for t in node.outputs:
                name = next((n for n in t.names if n in known), None)
                if name is not None:
                    sources[Tap(node.key, t.port)] = ("onnx", name)
        for j, result in enumerate(graph.results()):
            tap = Tap(*result.inputs[0])
            if graph[tap.key].is_candidate and tap not in sources:
                sources[tap] = ("output", j)
        kinds = {t: ("tensor" if a[0] == "onnx" else "output") for t, a in sources.items()}  # type: ignore[index]
        covered = covered_by_consumers(graph, {t.key for t in sources})
        binding = Binding(sources, kinds, covered, tuple(("output", j) for j in range(len(outputs))),
                          note=f"ONNX Runtime, CPU execution provider, graph optimizations off; {len(values)} ONNX values")
        return binding, [np.asarray(a) for a in got]

    def _run(self, arrays: list[np.ndarray], addresses: Sequence[Hashable], binding: Binding) -> dict[Hashable, np.ndarray]:
        outputs = [o.name for o in self.source.graph.output]
        names = list(dict.fromkeys([a[1] for a in addresses if a[0] == "onnx"]))  # type: ignore[index]
        session = self._session_for(self._values())
        got = self._running(session, outputs + names, arrays)
        found: dict[Hashable, np.ndarray] = {("output", j): got[j] for j in range(len(outputs))}
        found.update({("onnx", n): got[len(outputs) + i] for i, n in enumerate(names)})
        return {a: found[a] for a in addresses}
