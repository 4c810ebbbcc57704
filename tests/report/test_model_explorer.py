"""The node data of `to_model_explorer` read by Google Model Explorer itself: its node-data dataclasses, its ONNX
adapter's node ids, and its server and web app in a headless Chromium, which must colour every op of the graph.

The ONNX model has what trips a naive export: unnamed nodes (OpenVINO names them after their output tensor, the
adapter ``node``, ``node_1``), a repeated name, an ONNX node that OpenVINO splits into several ops (Gemm) and
the node feeding the graph output (OpenVINO renames it after the output). Tests that need the
``model-explorer`` extra (``ai-edge-model-explorer``, ``model-explorer-onnx``) or a browser skip with the
reason when those are missing.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from bisect_ov import InputError, bisect, inject_fault
from bisect_ov.report.export import ME_COLORS, onnx_graph_id, to_model_explorer

onnx = pytest.importorskip("onnx")
FAULTY = "dup_1"  # OpenVINO's name for the second ONNX node named 'dup' (an Add)
OPS = ["/stem/conv/Conv", "node", "dup", "dup_1", "node_1", "/pool/GlobalAveragePool", "/flatten/Flatten",
       "/fc/Gemm", "/head/Softmax"]  # the adapter's node ids for the ops, in graph order


def _need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"needs '{module}' (pip install -e '.[model-explorer]')")


def build_onnx(path):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "conv.w"], ["c1"], name="/stem/conv/Conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Mul", ["r1", "scale"], ["m1"], name="dup"),
        helper.make_node("Add", ["m1", "shift"], ["a1"], name="dup"),
        helper.make_node("Tanh", ["a1"], ["t1"]),
        helper.make_node("GlobalAveragePool", ["t1"], ["p1"], name="/pool/GlobalAveragePool"),
        helper.make_node("Flatten", ["p1"], ["f1"], name="/flatten/Flatten"),
        helper.make_node("Gemm", ["f1", "fc.w", "fc.b"], ["g1"], name="/fc/Gemm"),
        helper.make_node("Softmax", ["g1"], ["probs"], name="/head/Softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "main_graph", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 4])],
        [init("conv.w", 8, 3, 3, 3), init("scale", 1, 8, 1, 1), init("shift", 1, 8, 1, 1), init("fc.w", 8, 4),
         init("fc.b", 4)])
    onnx.save(onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    return build_onnx(tmp_path_factory.mktemp("me") / "model.onnx")


@pytest.fixture(scope="module")
def report(onnx_path):
    import openvino as ov

    model = ov.Core().read_model(onnx_path)
    return bisect(model, "CPU", "CPU:f32", target_model=inject_fault(model, FAULTY, "scale", 1.5), strategy="full",
                  local=False, noise=False, impact=0, progress=False)


def _adapter_graphs(path):
    _need("model_explorer_onnx")
    from model_explorer_onnx.main import ONNXAdapter

    return ONNXAdapter().convert(str(path), {})["graphs"]


# ----- without Model Explorer --------------------------------------------------------------------------------------

def test_every_op_of_the_onnx_graph_gets_a_value(report, onnx_path):
    data = to_model_explorer(report, model=onnx_path)
    results = data["results"]
    assert sorted(results) == sorted(OPS)  # unnamed nodes, the repeated name, Gemm and the output's producer too
    assert results["dup_1"]["bgColor"] == ME_COLORS["far"] and results["dup"]["bgColor"] == ME_COLORS["within"]
    # The output's producer is 'probs' in OpenVINO, '/head/Softmax' in the ONNX file
    assert results["/head/Softmax"]["value"] == pytest.approx(math.log10(report.node("probs").error), abs=1e-6)
    # Gemm became MatMul + Add: the ONNX node shows the worse of them
    gemm = [n for n in report.nodes if n.name.startswith("/fc/Gemm")]
    assert len(gemm) >= 2
    assert results["/fc/Gemm"]["value"] == pytest.approx(math.log10(max(n.error for n in gemm)), abs=1e-6)
    assert onnx_graph_id(onnx_path) == "main_graph"
    assert list(to_model_explorer(report, model=onnx_path, graph_id="main_graph")) == ["main_graph"]
    assert to_model_explorer(report, model=onnx.load(onnx_path))["results"] == results


def test_without_the_onnx_file_keys_are_friendly_names(report):
    results = to_model_explorer(report)["results"]
    assert set(results) == {n.name for n in report.nodes}


def test_a_file_that_is_not_onnx_is_refused(report, tmp_path):
    bad = tmp_path / "x.onnx"
    bad.write_bytes(b"\x00not a model")
    with pytest.raises(InputError, match="as an ONNX model"):
        to_model_explorer(report, model=bad)
    with pytest.raises(InputError, match="path of the ONNX file"):
        to_model_explorer(report, model=3)


# ----- Model Explorer's package ------------------------------------------------------------------------------------

def test_the_data_is_model_explorers_graph_node_data(report, onnx_path):
    _need("model_explorer")
    from model_explorer import node_data_builder as ndb

    data = to_model_explorer(report, model=onnx_path)
    graph = ndb.GraphNodeData(
        name=data["name"], results={k: ndb.NodeDataResult(**v) for k, v in data["results"].items()},
        thresholds=[ndb.ThresholdItem(**t) for t in data["thresholds"]])
    written = json.loads(graph.to_json_string())
    for key in data:  # Model Explorer writes the same name, results and thresholds (and its own defaults)
        assert written[key] == data[key]
    keyed = to_model_explorer(report, model=onnx_path, graph_id="main_graph")
    model = ndb.ModelNodeData(graphsData={"main_graph": graph})
    assert json.loads(model.to_json_string())["main_graph"]["results"] == keyed["main_graph"]["results"]


def test_keys_are_the_node_ids_of_model_explorers_onnx_adapter(report, onnx_path):
    graphs = _adapter_graphs(onnx_path)
    assert [g.id for g in graphs] == ["main_graph"] == [onnx_graph_id(onnx_path)]
    ops = [n.id for n in graphs[0].nodes if not n.id.startswith("[value]")]
    assert ops == OPS
    assert set(to_model_explorer(report, model=onnx_path)["results"]) == set(ops)


def test_node_ids_follow_the_adapter_for_unnamed_and_repeated_names(tmp_path):
    from onnx import TensorProto, helper

    from bisect_ov.report.export import _OnnxIds  # noqa: PLC2701 - the naming rule under test

    names = ["", "a", "a", "node", "", "a_1", "a", "", "node_1", "b", ""]
    nodes, prev = [], "x"
    for i, name in enumerate(names):
        nodes.append(helper.make_node("Relu", [prev], [f"t{i}"], name=name))
        prev = f"t{i}"
    graph = helper.make_graph(nodes, "", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2])])
    path = tmp_path / "names.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    graphs = _adapter_graphs(path)
    assert [n.id for n in graphs[0].nodes if not n.id.startswith("[value]")] == _OnnxIds(onnx.load(path).graph).ids
    assert graphs[0].id == onnx_graph_id(path) == ""  # an unnamed graph keeps its empty id


# ----- Model Explorer's server and web app -------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(report, onnx_path, tmp_path):
    _need("model_explorer")
    _need("model_explorer_onnx")
    from tests.report.cdp import browser

    if browser() is None:
        pytest.skip("no chromium, chromium-browser or google-chrome on PATH (Debian: apt-get install chromium)")
    nodes = tmp_path / "nodes.json"
    to_model_explorer(report, nodes, model=onnx_path)
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "model_explorer", str(onnx_path), f"--node_data_paths={nodes}",
             "--extensions=model_explorer_onnx", "--no_open_in_browser", "--host=127.0.0.1",
             f"--port={_free_port()}"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (url := re.search(r"http://127\.0\.0\.1:\d+/\?data=\S+", log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Model Explorer's server did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.3)
        yield url.group()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_model_explorer_colours_every_op_in_a_browser(server, tmp_path):
    from tests.report.cdp import Chromium

    with Chromium(tmp_path / "profile") as page:
        page.open(server)
        # The side panel's node-data table: one row per node, op type then value ('-' when it has none).
        rows = page.wait_for("""(() => {
            const t = Array.from(document.querySelectorAll('table')).pop();
            if (!t || !/Softmax/.test(t.innerText)) return null;
            return Array.from(t.querySelectorAll('tr')).map(r => Array.from(r.cells).map(c => c.innerText.trim()));
        })()""", timeout=90)
        time.sleep(1.5)  # let the graph's canvas draw the colours
        shot = page.screenshot()
        shown = page.evaluate("document.body.innerText")
    (tmp_path / "model_explorer.txt").write_text(shown)
    assert "log10(rel_l2)" in shown  # the values are logarithms, and the page says so
    (tmp_path / "model_explorer.png").write_bytes(shot)
    values = {r[1]: r[2] for r in rows if len(r) >= 3 and r[0].isdigit()}
    ops = ["Conv", "Relu", "Mul", "Add", "Tanh", "GlobalAveragePool", "Flatten", "Gemm", "Softmax"]
    missing = [op for op in ops if values.get(op, "-") == "-"]
    assert not missing, f"ops Model Explorer shows without a value: {missing} (table: {rows})"
    assert float(values["Add"]) > float(values["Mul"])  # the fault is at the Add
    try:
        from PIL import Image
    except ImportError:
        return
    import io

    with Image.open(io.BytesIO(shot)) as im:
        colours = {c for _, c in im.convert("RGB").getcolors(maxcolors=1 << 22)}
    for name in ("within", "far"):
        rgb = tuple(int(ME_COLORS[name][i:i + 2], 16) for i in (1, 3, 5))
        assert rgb in colours, f"no {name} colour {ME_COLORS[name]} on the page"

