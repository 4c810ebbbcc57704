"""Every keyword of `bisect()` given a value of the wrong type or range is refused as an `InputError` that says
what is valid, before anything is compiled; emulated devices refuse compile properties they would ignore.

Table-driven: (keyword, bad value, fragment the message must hold).
"""

from __future__ import annotations

import math

import pytest

from bisect_ov import InputError, bisect
from bisect_ov.run.devices import make_device
from tests.conftest import tiny_chain

BAD_OPTIONS = [
    ("ref_config", [1, 2], "dict of compile properties"),
    ("ref_config", {1: 2}, "keys must be property names"),
    ("target_config", "x", "dict of compile properties"),
    ("target_config", {"": "f32"}, "keys must be property names"),
    ("metric", 3, "metric name or a callable"),
    ("metric", "nope", "Available"),
    ("tolerance", "abc", "finite number >= 0"),
    ("tolerance", -1.0, "finite number >= 0"),
    ("tolerance", math.nan, "finite number >= 0"),
    ("seed", "abc", "integer in [0, 2**32)"),
    ("seed", 1.5, "integer in [0, 2**32)"),
    ("seed", -1, "integer in [0, 2**32)"),
    ("seed", True, "integer in [0, 2**32)"),
    ("strategy", 3, "Available"),
    ("strategy", ["full"], "Available"),
    ("budget", "cheap", "Unknown budget"),
    ("budget", None, "Unknown budget"),
    ("prompt_length", 0, "prompt_length"),
    ("prompt_lengths", [16, 0], "prompt_lengths must be a list of prompt lengths"),
    ("steps", -1, "steps"),
    ("sensitivity", "yes", "sensitivity must be True or False"),
    ("executor", 3, "executor must be a concurrent.futures.Executor"),
    ("executor", "foo", "Unknown executor 'foo'"),
    ("executor", "threads:x", "number of workers as a positive integer"),
    ("executor", "threads:", "number of workers as a positive integer"),
    ("executor", "processes:0", "number of workers as a positive integer"),
    ("executor", "processes:-1", "number of workers as a positive integer"),
    ("executor", "dask://nowhere", "dask://HOST:PORT"),
    ("executor", "ray:local", "'ray://HOST:PORT'"),
    ("samples_per_batch", 0, "samples_per_batch must be an integer >= 1"),
    ("batch_retries", -1, "batch_retries"),
    ("refine", "yes", "True or False"),
    ("local", 2, "True or False"),
    ("impact", 2.5, "integer >= 0"),
    ("impact", -1, "integer >= 0"),
    ("impact", "3", "integer >= 0"),
    ("fix", "yes", "True, False or a tolerance"),
    ("fix", -1, "finite number >= 0"),
    ("fix", math.nan, "True, False or a tolerance"),
    ("fix", math.inf, "finite number >= 0"),
    ("max_fix_slowdown", 1.0, "number above 1"),
    ("max_fix_slowdown", 0.5, "number above 1"),
    ("max_fix_slowdown", "2", "number above 1"),
    ("max_fix_slowdown", math.inf, "number above 1"),
    ("delegation", 3, "True or False"),
    ("curve", 1.5, "integer from 0 to 1000"),
    ("curve", -2, "integer from 0 to 1000"),
    ("curve", 1_000_001, "integer from 0 to 1000"),
    ("noise", "no", "True or False"),
    ("baseline", "yes", "True or False"),
    ("truth", "f32", "truth must be None, 'f64'"),
    ("patched_model", 3, "path ending in .xml"),
    ("patched_model", "model.onnx", "ending in .xml"),
    ("keep", 3, "node name or a list of names"),
    ("keep", [1], "node names (strings)"),
    ("classifier_outputs", 3, "output name or a list of output names"),
    ("classifier_outputs", [0], "output name or a list of output names"),
    ("max_tap_bytes", "big", "positive integer, 'auto' or None"),
    ("max_tap_bytes", -1, "positive integer, 'auto' or None"),
    ("max_tap_bytes", math.nan, "positive integer, 'auto' or None"),
    ("max_tap_bytes", 1.5, "positive integer, 'auto' or None"),
    ("progress", "x", "True, False or None"),
]


@pytest.mark.parametrize("keyword, value, fragment", BAD_OPTIONS,
                         ids=[f"{k}={v!r}" for k, v, _ in BAD_OPTIONS])
def test_a_bad_option_is_an_input_error_that_names_the_valid_range(keyword, value, fragment):
    with pytest.raises(InputError) as info:
        bisect(tiny_chain(), "CPU", "CPU:f32", **{keyword: value})
    assert fragment in str(info.value)
    assert keyword.split("_")[0] in str(info.value) or "Available" in str(info.value)


def test_every_keyword_of_bisect_is_in_the_table():
    import inspect

    keywords = [p.name for p in inspect.signature(bisect).parameters.values() if p.kind is p.KEYWORD_ONLY]
    untested = set(keywords) - {k for k, _, _ in BAD_OPTIONS} - {"target_model"}  # target_model: a model
    assert not untested, f"keywords without a bad-value case: {sorted(untested)}"


@pytest.mark.parametrize("side", ["ref", "target"])
def test_emulated_devices_refuse_compile_properties_they_would_ignore(side):
    keywords = {f"{side}_config": {"INFERENCE_PRECISION_HINT": "f16"}}
    with pytest.raises(InputError, match="takes no compile properties.*EMU:f16"):
        bisect(tiny_chain(), "EMU:bf16" if side == "ref" else "CPU", "EMU:f16", **keywords)
    with pytest.raises(InputError, match="'EMU:f16-acc' takes no compile properties"):
        make_device("EMU:f16-acc", {"PERFORMANCE_HINT": "LATENCY"})
    assert make_device("EMU:f16", {}).emulated  # no properties: fine


def test_cli_refuses_target_config_for_an_emulated_target_in_one_line(tmp_path, capsys):
    import openvino as ov

    from bisect_ov.cli import main

    path = tmp_path / "m.xml"
    ov.save_model(tiny_chain(), path)
    code = main([str(path), "--ref", "CPU", "--target", "EMU:f16", "--target-config", "PERFORMANCE_HINT=LATENCY"])
    err = capsys.readouterr().err
    assert code == 2
    assert "takes no compile properties" in err and "Traceback" not in err


def test_a_fork_based_process_pool_is_refused_with_the_reason_and_a_spawn_one_is_taken():
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from bisect_ov.pipeline.options import BisectOptions

    # A forked worker inherits OpenVINO's threads mid-state: made after a run in this process, it hung (no
    # result after 60 s). No worker starts here: the pool is refused before anything is submitted.
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as forked:
        with pytest.raises(InputError, match="starts its workers by fork.*OpenVINO's threads.*'processes:N'"):
            bisect(tiny_chain(), "CPU", "CPU:f32", executor=forked)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as spawned:
        assert BisectOptions(executor=spawned).executor is spawned


@pytest.mark.parametrize("spec", ["threads:2", "processes:3", "dask://127.0.0.1:8786", "tcp://[::1]:8786", "ray",
                                  "ray://head:10001", None])
def test_every_executor_form_of_the_docs_passes_the_check_without_opening_anything(spec):
    from bisect_ov.pipeline.options import BisectOptions

    assert BisectOptions(executor=spec).executor == spec


@pytest.mark.parametrize("args, message", [
    (["--executor", "threads:x"], "executor 'threads:x': give the number of workers as a positive integer"),
    (["--executor", "processes:0"], "executor 'processes:0': give the number of workers"),
    (["--metric", "cosine_distance"], "metric 'cosine_distance' needs an explicit threshold"),
    (["--curve", "1000001"], "curve must be an integer from 0 to 1000"),
    (["capture", "--seed", str(2 ** 64 + 1)], "seed must be an integer in [0, 2**32)"),
], ids=["threads:x", "processes:0", "cosine", "curve", "capture-seed"])
def test_the_command_refuses_bad_options_in_one_line_before_running(tmp_path, args, message):
    import subprocess
    import sys

    import openvino as ov

    ov.save_model(tiny_chain(), tmp_path / "m.xml")
    head, rest = (["capture"], args[1:]) if args[0] == "capture" else ([], args)
    command = [sys.executable, "-m", "bisect_ov", *head, str(tmp_path / "m.xml"), *rest]
    if not head:
        command += ["--target", "CPU:f32"]
    else:
        command += ["-o", str(tmp_path / "c.npz")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "c.npz").exists()


def test_a_checkpoint_and_a_partial_vision_language_export_say_what_to_do(tmp_path):
    """An un-exported checkpoint read "model_type 'llava' ... is not a pipeline family bisect_ov knows" (it is);
    an export that stopped after its language model read "holds one model ... give it to bisect()"."""
    import json

    import openvino as ov

    from bisect_ov.components.folder import family_of
    from tests.conftest import tiny_chain

    checkpoint = tmp_path / "hf"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "llava"}))
    with pytest.raises(InputError, match=r"holds no OpenVINO IR: export it first, e.g. optimum-cli export openvino"):
        family_of(checkpoint)
    partial = tmp_path / "qwen2vl"
    partial.mkdir()
    (partial / "config.json").write_text(json.dumps({"model_type": "qwen2_vl", "vision_config": {}}))
    ov.save_model(tiny_chain(), partial / "openvino_language_model.xml")
    with pytest.raises(InputError, match=r"looks like a vision-language export .*'qwen2_vl'.* lacks "
                                         r"openvino_vision_embeddings_model.xml.*export it again, whole"):
        family_of(partial)
