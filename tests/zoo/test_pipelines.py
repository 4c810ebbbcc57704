"""Pipelines of models: an optimum-intel seq2seq export (a tiny random-init T5, `bisect_ov.zoo.pipelines`) driven
by its own generation loop, each component judged on the reference's inputs, the first diverging one bisected.

A fault injected in one component's copy on the target is named at that component and that node, for nodes of
several op types in the decoder's third layer and in the encoder; the benign pipeline gives no divergence
against emulated f16; the f16 overflow of a T5 FFN (its output projection scaled) is named in the encoder, at
the norm's square that overflows. A tiny Whisper (`OVModelForSpeechSeq2Seq`, log-mel features in, Whisper's own
generate) gets the same: a fault in its encoder or decoder named there, a benign run, its features checked; and a
tiny LLaVA (`OVModelForVisualCausalLM`: vision embeddings, text embeddings, a stateful language model) too, and a
tiny Stable Diffusion (`OVStableDiffusionPipeline`: text encoder, UNet per denoising step, VAE decoder; an image
out), whose f16 timestep embedding is named where it breaks. Bad folders and inputs get errors that say what was
found.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import openvino as ov
import pytest

from bisect_ov import InputError, PipelineReport, bisect, bisect_pipeline, inject_fault
from bisect_ov.cli import main
from bisect_ov.components.folder import family_of
from bisect_ov.zoo import pipelines
from tests.zoo.conftest import needs_zoo

pytestmark = [needs_zoo, pytest.mark.zoo, pytest.mark.xdist_group("pipelines")]

TOKENS = [5, 9, 12, 3, 7, 20, 4]
DECODER_SITES = ("__module.decoder.block.2.layer.2.DenseReluDense.wo/aten::linear/MatMul",
                 "__module.decoder.block.2.layer.0.SelfAttention.o/aten::linear/MatMul",
                 "__module.decoder.block.2.layer.1.EncDecAttention.q/aten::linear/MatMul")
ENCODER_SITES = ("__module.block.1.layer.0.SelfAttention.v/aten::linear/MatMul",
                 "__module.block.0.layer.1.DenseReluDense.wi_0/aten::linear/MatMul")


def _read(name: str, component: str) -> ov.Model:
    return ov.Core().read_model(pipelines.folder(name) / f"openvino_{component}_model.xml")


def _with_fault(name: str, component: str, site: str, inputs=None, **kwargs) -> PipelineReport:
    """Pipeline `name` with `component` scaled by 0.3 at `site` on the target (its file as the family names it),
    both sides CPU:f32."""
    folder = pipelines.folder(name)
    family = family_of(folder)
    file = dict(family.required + family.optional)[component]
    faulty = inject_fault(ov.Core().read_model(folder / file), site, "scale", 0.3)
    return bisect_pipeline(folder, "CPU:f32", "CPU:f32", inputs, target_models={component: faulty}, progress=False,
                           **kwargs)


@pytest.mark.parametrize("site", DECODER_SITES)
def test_a_fault_in_the_decoders_third_layer_is_named_at_the_decoder_and_that_node(site):
    report = _with_fault("t5", "decoder", site, TOKENS)
    assert not report.component("encoder").diverges
    assert report.component("decoder").diverges and report.component("decoder").stateful
    assert report.component("decoder").calls == len(report.ref_tokens) - 1  # one call per generated token
    assert report.examined == "decoder"
    assert report.report is not None and report.report.first_divergence.name == site


def test_a_component_that_diverges_where_its_bisection_does_not_says_so_in_both_reports(monkeypatch):
    # The pipeline said "decoder DIVERGES" and its node-level report (the --html page) "no divergence", without a
    # word on why. Here the node-level run is given a tolerance nothing passes.
    import dataclasses

    import bisect_ov.components.api as api

    real = api.run
    monkeypatch.setattr(api, "run", lambda *a, **k: real(*a[:4], dataclasses.replace(a[4], tolerance=1.0), **k))
    report = _with_fault("t5", "decoder", DECODER_SITES[0], TOKENS)
    assert report.component("decoder").diverges and report.report is not None and not report.report.diverges
    said = [n for n in report.notes if "but bisect() of that call finds no divergence" in n]
    assert said and said[0].startswith("'decoder' diverges on its own inputs (call ") and "stateless form" in said[0]
    assert said[0] in report.report.notes  # the node-level report (and its page) carries it too


@pytest.mark.parametrize("site", ENCODER_SITES)
def test_a_fault_in_the_encoder_is_named_at_the_encoder_and_that_node(site):
    report = _with_fault("t5", "encoder", site, TOKENS)
    assert report.examined == "encoder"
    assert report.report.first_divergence.name == site
    # The decoder, fed the reference's encoder states, is exact; run free on the target it reads the faulty ones.
    decoder = report.component("decoder")
    assert not decoder.diverges and max(decoder.errors) == 0.0
    assert max(decoder.free_errors) > decoder.tolerance


def test_the_benign_pipeline_does_not_diverge_against_emulated_f16():
    report = bisect_pipeline(pipelines.folder("t5"), "CPU:f32", "EMU:f16", TOKENS, progress=False)
    assert report.examined is None and report.report is None
    for component in report.components:
        assert component.calls >= 1 and 0 < max(component.errors) < component.tolerance
    assert report.first_token_difference is None
    assert "No component diverges" in report.to_text()


def test_the_remedies_are_given_for_the_component_they_apply_to():
    """With fix=True the examined component's remedies are tried on it alone (optimum-intel sets a compile
    property such as ACTIVATIONS_SCALE_FACTOR per component): the T5 encoder whose FFN overflows f16 gets a scale
    factor that solves, named for the encoder."""
    report = bisect_pipeline(pipelines.folder("t5-overflow"), "CPU:f32", "EMU:f16", TOKENS, fix=True, max_new_tokens=2,
                             progress=False)
    remedies = report.remedies()
    assert list(remedies) == ["encoder"]
    assert any(r.kind == "scale_factor" and r.solves for r in remedies["encoder"]), remedies
    assert "Remedies for 'encoder' alone" in report.to_text()
    assert bisect_pipeline(pipelines.folder("t5"), "CPU:f32", "CPU:f32", TOKENS, max_new_tokens=2,
                           progress=False).remedies() == {}


def test_the_f16_overflow_of_a_t5_ffn_is_named_in_the_encoder_at_the_square_that_overflows():
    report = bisect_pipeline(pipelines.folder("t5-overflow"), "CPU:f32", "EMU:f16", prompt="the cat sat on the mat",
                             progress=False)
    encoder = report.component("encoder")
    # The encoder's final norm hides the overflow: its output stays finite, but wrong.
    assert encoder.diverges and encoder.errors[0] > 100 * encoder.tolerance and encoder.nonfinite == 0
    assert report.examined == "encoder"
    first = report.report.first_divergence
    # The FFN of block 0 feeds block 1's first norm: its x*x is where f16 overflows.
    assert first.name == "__module.block.1.layer.0.layer_norm/aten::pow/Power"
    assert first.error == float("inf") and first.input_error < 1e-2


def test_a_loaded_pipeline_object_works_and_keeps_its_own_requests():
    from optimum.intel import OVModelForSeq2SeqLM

    from bisect_ov.core.extras import hub_offline

    with hub_offline():
        loaded = OVModelForSeq2SeqLM.from_pretrained(pipelines.folder("t5"), compile=False)
    before = (loaded.encoder.request, loaded.decoder.request)
    report = bisect_pipeline(loaded, "CPU:f32", "CPU:f32", TOKENS, progress=False)
    assert report.source == "OVModelForSeq2SeqLM" and not report.diverges
    assert (loaded.encoder.request, loaded.decoder.request) == before


def test_the_report_is_saved_and_loaded_with_its_node_level_report(tmp_path):
    report = _with_fault("t5", "decoder", DECODER_SITES[0], TOKENS, max_new_tokens=4)
    assert report.component("decoder").calls == 4
    loaded = PipelineReport.load(report.save(tmp_path / "p.json"))
    assert loaded.components == report.components and loaded.examined == "decoder"
    assert loaded.report.first_divergence.name == DECODER_SITES[0]
    json.loads((tmp_path / "p.json").read_text())  # strict JSON
    for write in (report.save, report.save_html):  # never inside the folder the comparison read
        with pytest.raises(InputError, match="is inside the export folder"):
            write(pathlib.Path(report.source) / "p.json")
    with pytest.raises(InputError, match="Not a pipeline report"):
        PipelineReport.from_dict({"schema_version": 9})


def test_the_command_line_names_the_overflow_and_exits_1(tmp_path, capsys):
    out = tmp_path / "p.json"
    code = main(["pipeline", str(pipelines.folder("t5-overflow")), "--ref", "CPU:f32", "--target", "EMU:f16",
                 "--tokens", "5,9,12,3", "--max-new-tokens", "3", "--json", str(out), "-q"])
    text = capsys.readouterr().out
    assert code == 1, text
    assert "First diverging component: 'encoder'" in text and "block.1.layer.0.layer_norm" in text
    assert PipelineReport.load(out).examined == "encoder"
    assert main(["pipeline", str(pipelines.folder("t5")), "--ref", "CPU:f32", "--target", "CPU:f32", "--tokens",
                 "5,9", "--max-new-tokens", "2", "-q"]) == 0


def test_the_command_line_writes_every_output_a_pipeline_is_asked_for(tmp_path, capsys, monkeypatch):
    # --json - wrote a file named '-', --ignored-scope was never written, --html was skipped without a word
    # when no component diverged.
    monkeypatch.chdir(tmp_path)
    scope, page, patched = tmp_path / "scope.json", tmp_path / "p.html", tmp_path / "encoder_fixed.xml"
    code = main(["pipeline", str(pipelines.folder("t5-overflow")), "--ref", "CPU:f32", "--target", "EMU:f16",
                 "--tokens", "5,9,12,3", "--max-new-tokens", "3", "--fix", "--ignored-scope", str(scope),
                 "--patched-model", str(patched), "--html", str(page), "--json", "-", "-q"])
    out, err = capsys.readouterr()
    assert code == 1 and json.loads(out)["components"] and not (tmp_path / "-").exists(), err
    assert json.loads(scope.read_text())["names"] and page.read_text().startswith("<!DOCTYPE html>"), err
    # The patched encoder keeps the export's dynamic shapes: it goes back into the pipeline for another prompt
    # (it had the bisected call's [1, 4] and refused 6 tokens) and fixes it there.
    assert not ov.Core().read_model(patched).inputs[0].get_partial_shape().is_static
    assert main(["pipeline", str(pipelines.folder("t5-overflow")), "--ref", "CPU:f32", "--target", "EMU:f16",
                 "--tokens", "5,9,12,3,7,1", "--max-new-tokens", "3", "--target-component", f"encoder={patched}",
                 "-q"]) == 0, capsys.readouterr().out
    assert "<h2>Pipeline</h2>" in page.read_text() and "Each component on the reference" in page.read_text()
    assert main(["pipeline", str(pipelines.folder("t5")), "--ref", "CPU:f32", "--target", "CPU:f32", "--tokens",
                 "5,9", "--max-new-tokens", "2", "--html", str(tmp_path / "none.html"), "-q"]) == 0
    alone = (tmp_path / "none.html").read_text()  # no component examined: the page is the pipeline's overview
    assert "No component diverges on its own inputs" in alone and "<h2>Culprits" not in alone


def test_folders_that_are_not_a_supported_pipeline_say_what_they_hold(tmp_path):
    with pytest.raises(InputError, match="not found"):
        bisect_pipeline(tmp_path / "absent", "CPU:f32", "CPU:f32")
    with pytest.raises(InputError, match="a file, not a pipeline export folder.*bisect"):
        bisect_pipeline(pipelines.folder("t5") / "openvino_encoder_model.xml", "CPU:f32", "CPU:f32")
    one = tmp_path / "one"
    one.mkdir()
    (one / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (one / "openvino_model.xml").write_text("<net/>")
    with pytest.raises(InputError, match=r"holds one model \(openvino_model.xml\).*bisect\(\)"):
        bisect_pipeline(one, "CPU:f32", "CPU:f32")
    for name in ("openvino_tokenizer.xml", "openvino_detokenizer.xml"):  # an LLM export's text models beside it
        (one / name).write_text("<net/>")
    with pytest.raises(InputError, match=r"holds one model \(openvino_model.xml, with \['openvino_detokenizer.xml', "
                                         r"'openvino_tokenizer.xml'\]\).*bisect\(\)"):
        bisect_pipeline(one, "CPU:f32", "CPU:f32")
    half = tmp_path / "half"
    shutil.copytree(pipelines.folder("t5"), half)
    (half / "openvino_decoder_model.xml").unlink()
    with pytest.raises(InputError, match=r"lacks \['openvino_decoder_model.xml'\]"):
        bisect_pipeline(half, "CPU:f32", "CPU:f32")
    speech = tmp_path / "speech"
    speech.mkdir()
    (speech / "config.json").write_text(json.dumps({"model_type": "speech_to_text", "is_encoder_decoder": True}))
    with pytest.raises(InputError, match=r"Speech2Text.*not supported yet; supported: seq2seq .*speech_seq2seq"):
        bisect_pipeline(speech, "CPU:f32", "CPU:f32")
    qwen = tmp_path / "qwen2vl"
    qwen.mkdir()
    (qwen / "config.json").write_text(json.dumps({"model_type": "qwen2_vl"}))
    for name in ("vision_embeddings", "text_embeddings", "language_model", "vision_embeddings_merger"):
        (qwen / f"openvino_{name}_model.xml").write_text("<net/>")
    with pytest.raises(InputError, match=r"vision-language export of model_type 'qwen2_vl', not supported yet"):
        bisect_pipeline(qwen, "CPU:f32", "CPU:f32")
    whisper = tmp_path / "whisper"
    whisper.mkdir()
    (whisper / "config.json").write_text(json.dumps({"model_type": "whisper", "is_encoder_decoder": True}))
    with pytest.raises(InputError, match=r"holds no OpenVINO IR: export it first, e.g. optimum-cli export openvino"):
        bisect_pipeline(whisper, "CPU:f32", "CPU:f32")
    (whisper / "openvino_encoder_model.xml").write_text("<net/>")
    with pytest.raises(InputError, match=r"looks like a speech_seq2seq export .* lacks"):
        bisect_pipeline(whisper, "CPU:f32", "CPU:f32")
    with pytest.raises(InputError, match="no config.json"):
        bisect_pipeline(tmp_path, "CPU:f32", "CPU:f32")


def test_bad_inputs_and_components_are_refused_before_anything_runs(tmp_path):
    folder = pipelines.folder("t5")
    with pytest.raises(InputError, match=r"not components of this seq2seq pipeline \(\['encoder', 'decoder'\]\)"):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", TOKENS, target_models={"vae": _read("t5", "encoder")})
    # Another model in a component's place failed at its first call in the plugin's words ("ParameterMismatch: Can
    # not clone with new dims"): its inputs are checked first.
    with pytest.raises(InputError, match=r"target_models\['decoder'\] takes the inputs \['attention_mask', 'input_ids'\]; "
                                         r"the pipeline's decoder takes \['beam_idx', "):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", TOKENS, target_models={"decoder": _read("t5", "encoder")})
    with pytest.raises(InputError, match=r"Token ids must lie in \[0, 128\)"):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", [5, 500])
    with pytest.raises(InputError, match="integer token ids"):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", [0.5, 1.5])
    with pytest.raises(InputError, match="not both"):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", TOKENS, prompt="the cat")
    with pytest.raises(InputError, match="max_new_tokens"):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", TOKENS, max_new_tokens=0)
    with pytest.raises(InputError, match="Unknown option"):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", TOKENS, colour="red")
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare, ignore=shutil.ignore_patterns("tokenizer*", "special_tokens*"))
    with pytest.raises(InputError, match="needs the tokenizer"):
        bisect_pipeline(bare, "CPU:f32", "CPU:f32", prompt="the cat")


# ----- Whisper: OVModelForSpeechSeq2Seq, log-mel features in, Whisper's own generate -------------------------------
WHISPER_SITES = {"decoder": "__module.model.decoder.layers.1.fc2/aten::linear/MatMul",
                 "encoder": "__module.layers.1.self_attn.v_proj/aten::linear/MatMul"}


@pytest.mark.parametrize("component", sorted(WHISPER_SITES))
def test_a_fault_in_a_whisper_component_is_named_at_that_component_and_node(component):
    site = WHISPER_SITES[component]
    report = _with_fault("whisper", component, site, max_new_tokens=3)
    assert report.family == "speech_seq2seq"
    assert report.examined == component and report.component(component).diverges
    assert report.report is not None and report.report.first_divergence.name == site
    other = report.component("encoder" if component == "decoder" else "decoder")
    assert not other.diverges  # fed the reference's inputs, the untouched component agrees


def test_a_benign_whisper_does_not_diverge_and_its_features_are_checked(tmp_path):
    folder = pipelines.folder("whisper")
    features = np.random.default_rng(3).standard_normal((16, 3000)).astype(np.float32)
    report = bisect_pipeline(folder, "CPU:f32", "EMU:f16", features, max_new_tokens=3, progress=False)
    assert not report.diverges and report.examined is None and report.first_token_difference is None
    assert [c.name for c in report.components] == ["encoder", "decoder"]
    assert 0 < max(report.component("encoder").errors) < report.component("encoder").tolerance
    with pytest.raises(InputError, match=r"must be \[1, 16, 3000\]"):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", features[:, :100])
    with pytest.raises(InputError, match="not a prompt"):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", prompt="hello")
    with pytest.raises(InputError, match="input_features"):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", {"input_ids": [1, 2]})
    # The command line reads them from a file, and a loaded pipeline object is recognised as the speech family.
    np.save(tmp_path / "f.npy", features[None])
    assert main(["pipeline", str(folder), "--ref", "CPU:f32", "--target", "CPU:f32", "--inputs",
                 str(tmp_path / "f.npy"), "--max-new-tokens", "2", "-q"]) == 0
    from optimum.intel import OVModelForSpeechSeq2Seq

    from bisect_ov.core.extras import hub_offline

    with hub_offline():
        loaded = OVModelForSpeechSeq2Seq.from_pretrained(folder, compile=False)
    assert bisect_pipeline(loaded, "CPU:f32", "CPU:f32", max_new_tokens=2, progress=False).family == "speech_seq2seq"


# ----- LLaVA: OVModelForVisualCausalLM, token ids with an image token and its pixel values in -------------------------
LLAVA_SITES = {
    "vision_embeddings": "__module.model.vision_tower.vision_model.encoder.layers.1.mlp.fc1/aten::linear/MatMul",
    "language_model": "__module.model.language_model.layers.1.mlp.down_proj/aten::linear/MatMul",
}


@pytest.mark.parametrize("component", sorted(LLAVA_SITES))
def test_a_fault_in_a_llava_component_is_named_at_that_component_and_node(component):
    site = LLAVA_SITES[component]
    report = _with_fault("llava", component, site, max_new_tokens=3)
    assert report.family == "visual_causal_lm"
    assert [c.name for c in report.components] == ["vision_embeddings", "text_embeddings", "language_model"]
    assert report.examined == component
    assert report.report is not None and report.report.first_divergence.name == site
    assert not report.component("text_embeddings").diverges  # the token embeddings are the same on both sides


def test_a_benign_llava_does_not_diverge_and_its_inputs_are_checked():
    folder = pipelines.folder("llava")
    report = bisect_pipeline(folder, "CPU:f32", "EMU:f16", max_new_tokens=4, progress=False)
    assert not report.diverges and report.first_token_difference is None
    calls = {c.name: c.calls for c in report.components}
    # The image is embedded once; the tokens and the language model once per step (the prompt, then each token).
    assert calls["vision_embeddings"] == 1 and calls["language_model"] == calls["text_embeddings"] == 4
    assert report.component("language_model").stateful
    # A dynamic export's reductions have no length until a call's shapes fix them: the vision tower's tolerance
    # was 3.9e-03 (lengths unknown) where bisect() of its call holds its output to its reductions' (8.8e-03), so
    # a component read DIVERGES while the node-level run of the same call found nothing.
    vision = ov.Core().read_model(folder / "openvino_vision_embeddings_model.xml")
    vision.reshape({"pixel_values": [1, 3, 32, 32]})
    node_level = bisect(vision, "CPU:f32", "EMU:f16", np.zeros((1, 3, 32, 32), np.float32), progress=False)
    assert report.component("vision_embeddings").tolerance == node_level.outputs[0].tolerance > 0.0039
    pixels = np.zeros((1, 3, 32, 32), np.float32)
    with pytest.raises(InputError, match="holding the image token 127"):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", {"input_ids": [1, 5, 9], "pixel_values": pixels})
    with pytest.raises(InputError, match=r"pixel_values must be a float array \[1, 3, 32, 32\]"):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", {"input_ids": [1, 127, 9], "pixel_values": pixels[:, :, :16]})
    with pytest.raises(InputError, match="not a prompt"):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", prompt="a cat")
    # What the pipeline's own generate() refuses (two image tokens, one image: optimum's ValueError) is the user's
    # error, said in one line (it was a traceback and exit 1, the code that means "diverges").
    with pytest.raises(InputError, match="pipeline's own generation failed on these inputs: ValueError"):
        bisect_pipeline(folder, "CPU:f32", "CPU:f32", {"input_ids": [1, 127, 127, 9], "pixel_values": pixels})


# ----- Stable Diffusion: OVStableDiffusionPipeline, a prompt in, an image out -------------------------------------
SD_SITES = {"unet": "__module.mid_block.resnets.0.conv2/aten::_convolution/Convolution",
            "vae_decoder": "__module.decoder.conv_out/aten::_convolution/Convolution"}


@pytest.mark.parametrize("component", sorted(SD_SITES))
def test_a_fault_in_a_diffusion_component_is_named_at_that_component_and_node(component):
    pytest.importorskip("diffusers")
    site = SD_SITES[component]
    report = _with_fault("sd", component, site, denoising_steps=2)
    assert report.family == "diffusion"
    assert [c.name for c in report.components] == ["text_encoder", "unet", "vae_decoder"]
    assert report.component("unet").calls == 2 and report.component("vae_decoder").calls == 1
    assert report.examined == component and report.report.first_divergence.name == site
    assert not report.component("text_encoder").diverges
    # The image the target makes on its own is far from the reference's.
    assert report.output_differs and report.output_error > 10 * report.output_tolerance


def test_the_f16_time_embedding_of_a_diffusion_unet_is_named_at_its_sin_and_cos():
    """The UNet's sinusoidal timestep embedding (sin and cos of the timestep times its frequencies) loses its phase
    in f16 at the first steps' large timesteps (DDIM's 751 of 4 steps): the UNet diverges on its own inputs, and the
    node is the embedding's Sin/Cos, not what follows."""
    pytest.importorskip("diffusers")
    report = bisect_pipeline(pipelines.folder("sd"), "CPU:f32", "EMU:f16", prompt="a red house", denoising_steps=4,
                             progress=False)
    assert report.examined == "unet" and not report.component("text_encoder").diverges
    assert {n.op_type for n in report.report.culprits if n.first} <= {"Sin", "Cos"}
    assert "time_proj" in report.report.first_divergence.name
    with pytest.raises(InputError, match="takes a prompt"):
        bisect_pipeline(pipelines.folder("sd"), "CPU:f32", "CPU:f32", [1, 2, 3])
    with pytest.raises(InputError, match="not an inputs file"):
        bisect_pipeline(pipelines.folder("sd"), "CPU:f32", "CPU:f32", pathlib.Path("prompts.npz"))
    with pytest.raises(InputError, match="denoising_steps must be a positive integer"):
        bisect_pipeline(pipelines.folder("sd"), "CPU:f32", "CPU:f32", denoising_steps=0)


def test_the_examined_component_is_bisected_on_the_static_shapes_of_its_call():
    """A decoder exported with dynamic sequence and cache lengths is compiled for exactly its worst call's shapes
    (the CPU plugin's bf16 kernels refused a dynamic one: "SetLoadStoreScalar expects static shapes"); a call
    that does not name every input leaves the model as it is."""
    import numpy as np
    from openvino import opset13 as ops

    from bisect_ov.components.api import _static

    x = ops.parameter([1, -1, 8], np.float32, name="x")
    cache = ops.parameter([1, -1, 8], np.float32, name="cache")
    model = ov.Model([ops.result(ops.concat([cache, x], 1))], [x, cache])
    static = _static(model, {"x": [1, 3, 8], "cache": [1, 5, 8]})
    assert [list(p.get_output_partial_shape(0).to_shape()) for p in static.get_parameters()] == [[1, 3, 8], [1, 5, 8]]
    assert model.is_dynamic()  # the pipeline's own model is left untouched
    assert _static(model, {"x": [1, 3, 8]}).is_dynamic()


def test_a_stateful_decoder_runs_as_compiled_with_each_calls_state_set():
    # The stateless form is a stand-in: the CPU compiles the two forms differently (a T5 decoder's stateless form
    # in bf16 gave 0.2 at one call where the stateful model, as optimum runs it, gave 0.0065 at every call). On
    # an OpenVINO device each call runs the stateful compile with its variables set; an emulation keeps the form.
    from bisect_ov.components.calls import Component, compile_component
    from bisect_ov.model.state import initial_states
    from bisect_ov.run.devices import make_device
    from bisect_ov.run.stateful import Stateful

    model = _read("t5", "decoder")
    component = Component("decoder", model)
    compiled = compile_component(make_device("CPU:f32", role="target"), component)
    assert isinstance(compiled, Stateful)
    assert not isinstance(compile_component(make_device("EMU:f16", role="target"), component), Stateful)
    rng = np.random.default_rng(0)
    own = {"encoder_attention_mask": np.ones((1, 5), np.int64), "encoder_hidden_states":
           rng.standard_normal((1, 5, model.input("encoder_hidden_states").get_partial_shape()[2].get_length()))
           .astype(np.float32), "beam_idx": np.zeros(1, np.int32)}
    native = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    native.reset_state()
    states = None
    compiled.start()  # a new sequence: the first call initialises the variables itself, as the native one does
    for token in (0, 7, 3):
        arrays = component.arrays({**own, "input_ids": np.array([[token]], np.int64)})
        states = initial_states(component.stateless, arrays) if states is None else states
        outputs = compiled.infer(arrays + states)
        states = outputs[len(component.outputs):]
        expected = native.infer({**own, "input_ids": np.array([[token]], np.int64)})["logits"]
        np.testing.assert_array_equal(outputs[0], expected)  # the pipeline's own run, call by call, bit for bit


def test_the_pipeline_tests_share_one_worker(request):
    """Run by xdist with the suite's `--dist loadgroup`, this module's tests go to one worker, so only one worker
    pays optimum's and transformers' imports (20 s and more on two cores): the group must be in the node's id,
    where xdist's scheduler reads it (pytest 9.2 ignores the id xdist 3.8 writes)."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run by pytest-xdist with --dist loadgroup")
    assert request.node.nodeid.endswith("@pipelines"), request.node.nodeid


@pytest.mark.parametrize("failures", [1, 2])
def test_a_component_bisection_the_target_cannot_compile_keeps_the_pipeline_s_report(failures, monkeypatch):
    # A BART decoder whose worst call is its first (a KV cache of length 0) failed to compile at that call's static
    # shapes against EMU:f16, and the run ended with no report. The component is bisected as exported then;
    # failing that too, the pipeline's report stands with a note.
    from bisect_ov.components import api
    from bisect_ov.core.errors import DeviceError

    calls, real = [], api.run

    def flaky(model, *args, **kwargs):
        calls.append(model.get_parameters()[0].get_partial_shape().is_static)
        if len(calls) <= failures:
            raise DeviceError("Compiling for EMU:f16 failed: Node state:x contains empty child edge for index 0")
        return real(model, *args, **kwargs)

    monkeypatch.setattr(api, "run", flaky)
    report = bisect_pipeline(pipelines.folder("t5-overflow"), "CPU:f32", "EMU:f16", TOKENS, max_new_tokens=3,
                             progress=False)
    assert report.examined == "encoder" and report.diverges, report.to_text()
    if failures == 1:
        assert calls == [True, False] and report.report is not None and report.report.diverges, calls
        assert any("bisected with the shapes it was exported with" in n for n in report.notes), report.notes
    else:
        assert report.report is None and any("could not run" in n and "empty child edge" in n for n in report.notes)
        assert "no node-level report (see the notes)" in report.to_text()


def test_options_of_one_model_s_run_are_refused_for_a_pipeline(tmp_path):
    # --steps was silently ignored; --prompt-lengths failed on the encoder's static input_ids.
    for options in ({"steps": 3}, {"prompt_lengths": (2, 4)}, {"executor": "processes:2"}):
        with pytest.raises(InputError, match=r"apply to bisect\(\) of one model, not to a pipeline"):
            bisect_pipeline(tmp_path, "CPU:f32", "EMU:f16", TOKENS, progress=False, **options)
