"""A capture is untrusted input, and `record`'s options get `bisect()`'s checks.

Opening a capture checks its header against the schema and every member's declared size against the bytes it
holds (`bisect_ov.capture.schema`): a tampered or damaged file is a `CaptureError` that names the field or the
member, never an `IndexError` on replay, a summary taken as complete when it is missing, or an allocation of
what a member claims.
"""

from __future__ import annotations

import io
import json
import pathlib
import re
import tracemalloc
import zipfile

import numpy as np
import pytest

from bisect_ov.capture.read import load_capture
from bisect_ov.capture.write import record
from bisect_ov.core.errors import CaptureError, InputError
from tests.conftest import tiny_chain


@pytest.fixture(scope="module")
def capture_file(tmp_path_factory) -> pathlib.Path:
    return record(tiny_chain(), "CPU:f32", path=tmp_path_factory.mktemp("capture") / "chain.npz")


def _members(path: pathlib.Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {name: z.read(name) for name in z.namelist()}


def _write(out: pathlib.Path, members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> pathlib.Path:
    with zipfile.ZipFile(out, "w", compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, allow_pickle=False)
    return buf.getvalue()


def _with_header(path: pathlib.Path, out: pathlib.Path, change) -> pathlib.Path:
    members = _members(path)
    header = json.loads(np.load(io.BytesIO(members["__header__.npy"]))[()].decode())
    change(header)
    members["__header__.npy"] = _npy(np.array(json.dumps(header).encode()))
    return _write(out, members)


def _claiming(values: int, data: bytes) -> bytes:
    """An .npy member whose header declares `values` float32 values, followed by `data`."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (values,)})
    return buf.getvalue() + data


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_member_declaring_more_values_than_it_holds_is_refused_before_allocating(capture_file, tmp_path, compression):
    members = _members(capture_file)
    members["t/3.npy"] = _claiming(10 ** 12, bytes(64))  # 3.6 TiB declared, 64 bytes held
    bad = _write(tmp_path / "huge.npz", members, compression)
    tracemalloc.start()
    try:
        with pytest.raises(CaptureError, match=r"member 't/3' declares 1,000,000,000,000 float32 value\(s\) of shape "
                                               r"\[1000000000000\] \(4,000,000,000,000 bytes\) but holds 64 bytes"):
            load_capture(bad)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20  # nothing near what the member claims was allocated


def test_a_member_one_value_short_is_refused(capture_file, tmp_path):
    members = _members(capture_file)
    members["o/0.npy"] = _claiming(8, bytes(28))  # 8 float32 values need 32 bytes
    with pytest.raises(CaptureError, match=r"member 'o/0' declares 8 float32 value\(s\).*\(32 bytes\) but holds 28"):
        load_capture(_write(tmp_path / "short.npz", members))


HEADER_DEFECTS = [
    ("empty outputs", lambda h: h["model"].update(outputs=[]), "model.outputs is empty"),
    ("tap_stats null", lambda h: h["samples"][0].update(tap_stats=None), r"samples\[0\].tap_stats is None; it must "
                                                                         r"hold one summary per recorded tensor \(8\)"),
    ("tap_stats short", lambda h: h["samples"][0]["tap_stats"].pop(), r"samples\[0\].tap_stats is \[.*one summary"),
    ("output_stats missing", lambda h: h["samples"][0].pop("output_stats"), r"samples\[0\].output_stats is None"),
    ("summary without numel", lambda h: h["samples"][0]["tap_stats"][2].pop("numel"),
     r"samples\[0\].tap_stats\[2\] is .*a summary holds"),
    ("negative count", lambda h: h["samples"][0]["tap_stats"][1].update(nan=-1),
     r"samples\[0\].tap_stats\[1\].nan is -1, not a non-negative integer"),
    ("non-finite mean", lambda h: h["samples"][0]["output_stats"][0].update(mean=float("nan")),
     r"output_stats\[0\].mean is nan, not a finite number or null"),
    ("huge dimension", lambda h: h["taps"][0].update(shape=[10 ** 400]), r"taps\[0\].shape is .*non-negative integers"),
    ("negative port", lambda h: h["taps"][0].update(port=-1), r"taps\[0\] is not a recorded tensor"),
    ("output without a name", lambda h: h["model"]["outputs"][0].pop("name"), r"model.outputs\[0\].name is missing"),
    ("input shape text", lambda h: h["model"]["inputs"][0].update(shape="1x8"), r"model.inputs\[0\].shape is '1x8'"),
    ("negative seed", lambda h: h.update(seed=-3), "seed is -3, not a non-negative integer"),
]


@pytest.mark.parametrize("change, fragment", [(c, f) for _, c, f in HEADER_DEFECTS], ids=[d for d, _, _ in HEADER_DEFECTS])
def test_a_header_that_breaks_the_schema_is_refused_by_name(capture_file, tmp_path, change, fragment):
    bad = _with_header(capture_file, tmp_path / "bad.npz", change)
    with pytest.raises(CaptureError, match="header is malformed") as info:
        load_capture(bad)
    assert re.search(fragment, str(info.value)), str(info.value)


def test_the_untouched_file_passes_every_check(capture_file, tmp_path):
    same = _with_header(capture_file, tmp_path / "same.npz", lambda h: None)
    with load_capture(same) as cap:
        assert len(cap.taps) == 8 and cap.stats("tanh1")["numel"] == 8 and cap.outputs[0].shape == (1, 8)


BAD_RECORD_OPTIONS = [
    ("config", "abc", "config must be a dict of compile properties (name -> value); got 'abc'"),
    ("config", {1: "x"}, "config's keys must be property names"),
    ("max_tap_bytes", "big", "max_tap_bytes must be a positive integer or None (no limit); got 'big'"),
    ("max_tap_bytes", 0, "max_tap_bytes must be a positive integer or None (no limit); got 0"),
    ("max_tap_bytes", -5, "max_tap_bytes must be a positive integer or None (no limit); got -5"),
    ("max_tap_bytes", 1.5, "max_tap_bytes must be a positive integer or None"),
    ("seed", 2 ** 64 + 1, "seed must be an integer in [0, 2**32); got 18446744073709551617"),
    ("seed", -1, "seed must be an integer in [0, 2**32)"),
    ("seed", "0", "seed must be an integer in [0, 2**32)"),
    ("sample", 0, "sample must be a positive integer"),
    ("mode", ["full"], "Unknown capture mode ['full']"),
    ("progress", "yes", "progress must be True or False"),
    ("path", 3, "path must be a file name"),
]


@pytest.mark.parametrize("keyword, value, fragment", BAD_RECORD_OPTIONS,
                         ids=[f"{k}={v!r}"[:40] for k, v, _ in BAD_RECORD_OPTIONS])
def test_a_bad_record_option_is_an_input_error_before_anything_runs(tmp_path, keyword, value, fragment):
    kwargs = {"path": tmp_path / "x.npz", keyword: value}
    with pytest.raises(InputError) as info:
        record(tiny_chain(), "CPU:f32", **kwargs)
    assert fragment in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_record_takes_what_bisect_takes(tmp_path):
    path = record(tiny_chain(), "CPU:f32", path=tmp_path / "ok.npz", config={"PERFORMANCE_HINT": "LATENCY"},
                  max_tap_bytes=np.int64(1 << 20), seed=np.uint32(2 ** 32 - 1))
    with load_capture(path) as cap:
        assert cap.seed == 2 ** 32 - 1 and cap.header["max_tap_bytes"] == 1 << 20


def _flipped(path: pathlib.Path, out: pathlib.Path, offset: int, value: int | None = None) -> pathlib.Path:
    raw = bytearray(path.read_bytes())
    raw[offset] = raw[offset] ^ 0xFF if value is None else value
    out.write_bytes(bytes(raw))
    return out


def _open_and_read_everything(path: pathlib.Path) -> None:
    with load_capture(path) as cap:
        for sample in range(len(cap.header["samples"])):
            for name in cap.members(sample):
                cap.read(name, sample)


@pytest.mark.parametrize("field, value", [(10, 99), (8, 0x20), (8, 0x21)],
                         ids=["unknown-compression-method", "patched-data-flag", "encrypted-and-patched"])
def test_a_flipped_field_of_the_zip_directory_is_a_capture_error_naming_the_file(capture_file, tmp_path, field, value):
    """zipfile answers an unknown compression method or flag with NotImplementedError: it must not escape."""
    directory = capture_file.read_bytes().find(b"PK\x01\x02")
    bad = _flipped(capture_file, tmp_path / "bad.npz", directory + field, value)
    with pytest.raises(CaptureError, match=re.escape(str(bad))):
        _open_and_read_everything(bad)


def test_no_single_flipped_byte_of_the_zip_directory_escapes_as_another_error(capture_file, tmp_path):
    raw = capture_file.read_bytes()
    directory = raw.find(b"PK\x01\x02")
    for offset in range(directory, len(raw), 3):
        bad = _flipped(capture_file, tmp_path / f"flip{offset}.npz", offset)
        try:
            _open_and_read_everything(bad)
        except CaptureError as err:
            assert bad.name in str(err), str(err)
        bad.unlink()
