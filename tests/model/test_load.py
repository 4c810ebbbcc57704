import re

import numpy as np
import onnx
import openvino as ov
import pytest
from onnx import TensorProto, helper

from bisect_ov.core.errors import InputError
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.load import load_model, model_label
from tests.conftest import tiny_chain


def _onnx_model() -> onnx.ModelProto:
    w = helper.make_tensor("W", TensorProto.FLOAT, [4, 3], np.arange(12, dtype=np.float32).tolist())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "W"], ["mm_out"], name="mm"),
         helper.make_node("Relu", ["mm_out"], ["relu_out"], name="relu")],
        "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("relu_out", TensorProto.FLOAT, [1, 3])], [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_ov_model_is_returned_as_is():
    m = tiny_chain()
    assert load_model(m) is m


def test_ir_and_onnx_paths_and_proto(tmp_path):
    xml = tmp_path / "chain.xml"
    ov.save_model(tiny_chain(), xml)
    assert len(ModelGraph(load_model(xml)).candidates()) == 8
    proto = _onnx_model()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    for source in (path, str(path), proto):
        g = ModelGraph(load_model(source))
        # ONNX tensor names survive conversion: the user's names find the nodes.
        assert g.find("mm_out").op_type == "MatMul"
        assert g.find("relu_out").op_type == "Relu"


def test_errors_say_what_is_wrong(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_model(tmp_path / "missing.xml")
    bad = tmp_path / "model.txt"
    bad.write_text("hello")
    with pytest.raises(InputError, match="Unknown model format '.txt'"):
        load_model(bad)
    broken = tmp_path / "broken.xml"
    broken.write_text("<net><layers>")
    with pytest.raises(InputError, match="Cannot read model"):
        load_model(broken)
    (tmp_path / "w.bin").write_bytes(b"\0")
    with pytest.raises(InputError, match="weights file"):
        load_model(tmp_path / "w.bin")
    with pytest.raises(InputError, match="Cannot convert"):
        load_model(12345)


def test_a_model_a_frontend_read_is_labelled_by_its_format_not_the_frontend_s_name(tmp_path):
    # An ONNX file read into an ov.Model is named 'onnx_Frontend_IR' by the frontend, whatever the file: the
    # report header read "mobilevit.onnx vs onnx_Frontend_IR".
    from tests.conftest import unnamed_onnx

    model = ov.Core().read_model(unnamed_onnx(tmp_path / "m.onnx"))
    assert model.get_friendly_name() == "onnx_Frontend_IR" and model_label(model) == "ov.Model from ONNX"
    assert model_label(str(tmp_path / "m.onnx")) == "m.onnx"


def test_a_folder_of_irs_names_them_not_a_savedmodel(tmp_path):
    # An optimum-intel export folder was read as a TensorFlow SavedModel: "Could not open the file saved_model.pb"
    # An LLM export's tokenizers were offered first ("e.g. 'openvino_detokenizer.xml', or ... bisect-ov pipeline",
    # which refuses a folder of one model): its one model is named.
    for name in ("openvino_model.xml", "openvino_tokenizer.xml", "openvino_detokenizer.xml"):
        ov.save_model(tiny_chain(), tmp_path / name)
    with pytest.raises(InputError, match=r"is an export folder \(openvino_detokenizer.xml, openvino_model.xml, "
                                         r"openvino_tokenizer.xml\): pass its model, '.*openvino_model.xml'\.$"):
        load_model(str(tmp_path))
    ov.save_model(tiny_chain(), tmp_path / "openvino_encoder_model.xml")
    with pytest.raises(InputError, match=r"is a folder of OpenVINO IRs .*: pass one of them, e.g. '.*openvino_encoder_"
                                         r"model.xml', or compare the whole pipeline with bisect-ov pipeline"):
        load_model(str(tmp_path))


def test_a_diffusion_export_a_tokenizer_folder_and_a_tokenizer_file_are_named_as_such(tmp_path):
    # A diffusers export read "Could not open ... saved_model.pb ... Pass an IR .xml, an .onnx, or a SavedModel
    # folder"; its tokenizer folder suggested the pipeline command (which refused it); a tokenizer file read
    # "unsupported opset: extension. Is the file complete and valid?".
    sd = tmp_path / "sd"
    for part in ("unet", "vae_decoder", "text_encoder"):
        (sd / part).mkdir(parents=True)
        ov.save_model(tiny_chain(), sd / part / "openvino_model.xml")
    (sd / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline"}')
    with pytest.raises(InputError, match=r"is a diffusion pipeline export .*models in text_encoder, unet, vae_decoder"
                                         r"\): compare the whole pipeline with bisect-ov pipeline"):
        load_model(str(sd))
    (sd / "tokenizer").mkdir()
    ov.save_model(tiny_chain(), sd / "tokenizer" / "openvino_tokenizer.xml")
    with pytest.raises(InputError, match=r"holds only a tokenizer \(openvino_tokenizer.xml\): it turns text into token"):
        load_model(str(sd / "tokenizer"))
    xml = sd / "tokenizer" / "openvino_tokenizer.xml"
    xml.write_text(re.sub(r'version="opset\d+"', 'version="extension"', xml.read_text(), count=2))
    with pytest.raises(InputError, match=r"is an openvino-tokenizers model \(text in, token ids out\)"):
        load_model(str(xml))


def test_an_onnx_model_whose_external_data_is_missing_says_so(tmp_path):
    # It read "Cannot read model ...: Invalid usage of method for externally stored data in file (w.data, offset: 0,
    # data_length: 256)".
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((8, 8), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [w])
    onnx.save(helper.make_model(graph), tmp_path / "m.onnx", save_as_external_data=True, location="w.data",
              size_threshold=0)
    assert load_model(str(tmp_path / "m.onnx")) is not None
    (tmp_path / "w.data").unlink()
    with pytest.raises(InputError, match=r"keeps its weights in external data file\(s\) that are missing: w\.data\. Put"):
        load_model(str(tmp_path / "m.onnx"))
