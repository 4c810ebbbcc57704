"""Shared fixtures: tiny models built in code, and what the CPU plugin here runs.

Tests that need a CPU whose OpenVINO plugin runs bf16 use the `needs_bf16` marker and are skipped with a
reason elsewhere; everything else runs on any x86 CPU. What ``CPU:f16`` and plain ``CPU`` run differs between
CPUs (f16 needs AVX512_FP16 or AMX_FP16, bf16 AVX512_BF16 or AMX): tests read it from the plugin
(`cpu_f16_precision`, `cpu_bf16_precision`, `cpu_default_precision`) instead of assuming this machine's answer.
"""

from __future__ import annotations

import functools
import pathlib
import subprocess
import sys

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov.run.devices import OpenVINODevice, cpu_supports_bf16
from bisect_ov.run.openvino_device import capabilities

needs_bf16 = pytest.mark.skipif(not cpu_supports_bf16(), reason="the CPU plugin here has no bf16 (needs AVX512_BF16 or AMX)")


def cpu_f16_precision(caps: list[str] | None = None) -> str:
    """What ``CPU:f16`` runs with the CPU plugin's `caps` (``OPTIMIZATION_CAPABILITIES``; default: this CPU's):
    f16 where it lists FP16, else bf16 where it lists BF16 (the plugin's fallback), else f32."""
    caps = capabilities("CPU") if caps is None else caps
    return "f16" if "FP16" in caps else "bf16" if "BF16" in caps else "f32"


def cpu_bf16_precision(caps: list[str] | None = None) -> str:
    """What ``CPU:bf16`` runs with the CPU plugin's `caps` (default: this CPU's): bf16 where it lists BF16, else
    f32 (the plugin's fallback)."""
    caps = capabilities("CPU") if caps is None else caps
    return "bf16" if "BF16" in caps else "f32"


def cpu_default_precision() -> str:
    """The precision plain ``CPU`` runs here: the plugin's default ``INFERENCE_PRECISION_HINT``."""
    hint = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")
    name = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
    return {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(name, name)


default_bf16 = pytest.mark.skipif(cpu_default_precision() != "bf16",
                                  reason="plain CPU does not run bf16 here (its default INFERENCE_PRECISION_HINT)")


def tiny_chain(depth: int = 4, width: int = 8, seed: int = 0) -> ov.Model:
    """x -> (MatMul -> Tanh) * depth; names mm{i}, tanh{i}."""
    rng = np.random.default_rng(seed)
    x = ops.parameter([1, width], np.float32, name="x")
    h = x
    for i in range(depth):
        w = ops.constant((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), name=f"w{i}")
        h = ops.matmul(h, w, False, False, name=f"mm{i}")
        h = ops.tanh(h, name=f"tanh{i}")
    return ov.Model([h.output(0)], [x], "tiny_chain")


@pytest.fixture
def chain_model() -> ov.Model:
    return tiny_chain()


def pytest_configure(config) -> None:
    """Share one zoo build cache and one results file between the controller and every xdist worker.

    Runs on the controller before workers start (they inherit its environment): the cache defaults to a
    folder under pytest's cache, so built zoo models are reused across runs; BISECT_OV_ZOO_CACHE overrides it.
    """
    from tests.zoo import records

    records.configure(config)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    from tests.zoo import records

    records.summary(terminalreporter)


# ----- the synthetic graph shapes faults are injected into, and a device that makes one (tests/test_faults.py,
# tests/test_streamed.py, tests/test_budget.py) -----
FAULT_SHAPES = ("chain", "diamond", "multi_io", "attention_block", "conv_bn_net")


@functools.lru_cache(maxsize=None)
def shape_model(shape: str) -> ov.Model:
    """A synthetic model of one graph shape (`bisect_ov.zoo.synthetic.BUILDERS`), built once per process."""
    from bisect_ov.zoo import synthetic

    return synthetic.BUILDERS[shape]()


@functools.lru_cache(maxsize=None)
def shape_inputs(shape: str) -> dict:
    """Seeded inputs of `shape_model(shape)`."""
    from bisect_ov.zoo import synthetic

    return synthetic.sample_inputs(shape_model(shape), seed=1)


def float_sites(shape: str) -> list[str]:
    """The compute nodes of `shape_model(shape)` with a floating-point output, in topological order."""
    from bisect_ov.model.graph import ModelGraph

    return [n.name for n in ModelGraph(shape_model(shape)).candidates() if n.outputs[0].is_float]


def every(cases: list, step: int, start: int = 0) -> list:
    """Every `step`-th of `cases` from `start`. The primary fault grid (`tests/test_faults.py`, first test) names a
    fault at every float site of every shape; the grids that repeat it under another strategy or target take a
    stride of the same sites, each from another start, so that together they still cover most sites at a fraction
    of the suite's time."""
    return cases[start::step]


def found_names(shape: str, node: str) -> set[str]:
    """The names that count as naming a fault at `node` of `shape_model(shape)`: the node itself, and, for an op
    that only moves values (a Reshape, a Transpose), the arithmetic node that produced them (walking up through
    other such ops), which the verdict names when the movement op's tensor is where that node's values were
    measured (`bisect_ov.analysis.judge`, rule 6)."""
    from bisect_ov.analysis.judge import carried_from
    from bisect_ov.model.graph import ModelGraph

    graph = ModelGraph(shape_model(shape))
    return {node, *(graph[k].name for k in carried_from(graph, graph.find(node).key))}


class FaultyCPU(OpenVINODevice):
    """The CPU (f32, or `precision`) with one node perturbed in every model it compiles that holds that node:
    seeded noise of standard deviation `magnitude` is added to its output, the same array whether the whole
    model or a segment is compiled."""

    def __init__(self, node: str, precision: str = "f32", magnitude: float = 0.05):
        super().__init__("CPU", {"INFERENCE_PRECISION_HINT": precision},
                         name=f"CPU:{precision} with '{node}' faulty")
        self.node, self.magnitude = node, magnitude

    def _compile(self, model, taps=(), fed=()):
        found = [op for op in model.get_ops() if op.get_friendly_name() == self.node]
        if found:  # a segment without the node compiles as it is
            model = model.clone()
            (op,) = [o for o in model.get_ops() if o.get_friendly_name() == self.node]
            out = op.output(0)
            consumers = list(out.get_target_inputs())
            shape = [int(d) for d in out.get_shape()]
            noise = (np.random.default_rng(7).standard_normal(shape) * self.magnitude).astype(np.float32)
            faulty = ops.add(out, ops.constant(noise))  # what inject_fault(kind="noise", seed=7) adds
            for inp in consumers:
                inp.replace_source_output(faulty.output(0))
            model.validate_nodes_and_infer_types()
        return super()._compile(model, taps, fed)


def run_without_openvino(code: str, **kwargs) -> subprocess.CompletedProcess:
    """Run Python `code` in a fresh interpreter where importing OpenVINO fails, as where it is not installed."""
    block = ("import sys\n"
             "class Block:\n"
             "    def find_spec(self, name, *a):\n"
             "        if name == 'openvino' or name.startswith('openvino.'):\n"
             "            raise ImportError('no openvino here')\n"
             "sys.meta_path.insert(0, Block())\n")
    return subprocess.run([sys.executable, "-c", block + code], capture_output=True, text=True, **kwargs)


def unnamed_onnx(path: pathlib.Path) -> pathlib.Path:
    """An ONNX file whose nodes have no names: OpenVINO makes them up from a counter, other ones at each load."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("w", (8, 8)), ("g", (8,)), ("b", (8,)))]
    # A LayerNormalization becomes several ops, and only the last keeps the node's name.
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("LayerNormalization", ["h", "g", "b"], ["n"]),
             helper.make_node("Tanh", ["n"], ["y"])]
    graph = helper.make_graph(nodes, "unnamed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path
