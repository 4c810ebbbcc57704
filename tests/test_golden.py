"""Behaviour pinned by saved reports: each case of `tests/golden/cases.py` run again, each in a fresh process of its
own, makes the decisions its saved report made, and on a machine of the kind it was saved on gives the same
report field by field (timings aside).

Saved numbers depend on the OpenVINO build and the kernels the CPU runs, so reports are saved per kind of machine
(`tests/golden/<set>/`, e.g. ``avx512_bf16`` and ``avx2``) with the facts they were saved on (`<set>/machine.json`).
A machine of a set's kind (`compare.kind`: the same OpenVINO build, plugin capabilities and oneDNN ISA level,
whatever CPU model it is) compares every field: counts and strings exactly, numbers within `compare.RTOL`, which
holds across CPUs of one level and across formulas for the same statistic. A machine of no saved kind (a Xeon with
AMX) still compares what the rules decided (`compare.structure`: the verdict, first divergences, roles, ranking)
for every case whose precisions do not depend on the CPU's own low-precision kernels, against every set that saved
it. Regenerate with `python tests/golden/make_golden.py` after a change that is meant to change reports (on each
kind of machine at hand), and say why in the commit.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import needs_bf16
from tests.golden.cases import CASES
from tests.golden.compare import (
    FOLDER,
    differences,
    kind,
    machine,
    run_in_fresh_process,
    saved_set,
    saved_sets,
    structure,
)
from tests.zoo.conftest import needs_zoo

HERE = machine()
SAVED = saved_set(HERE)
SAVED_ON = {p.name: kind(json.loads((p / "machine.json").read_text())) for p in saved_sets()}


def _marks(case):
    marks = []
    if case.bf16:
        marks.append(needs_bf16)
    if case.zoo:
        marks += [needs_zoo, pytest.mark.zoo]
    return marks


def _saved_elsewhere(name: str) -> dict[str, dict]:
    """The case's saved report in every set that holds it, by set."""
    return {p.name: json.loads((p / f"{name}.json").read_text()) for p in saved_sets() if (p / f"{name}.json").is_file()}


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(c)) for n, c in CASES.items()])
def test_a_case_gives_the_saved_report(name, tmp_path):
    case = CASES[name]
    if SAVED is not None and (SAVED / f"{name}.json").is_file():
        saved = {SAVED.name: json.loads((SAVED / f"{name}.json").read_text())}
        whole = True
    elif case.bf16 and SAVED is not None:
        pytest.skip(f"{name} was not saved in {SAVED.name}, the set of this kind of machine")
    elif case.bf16:
        pytest.skip(f"{name} runs the CPU's own bf16 kernels, and no set was saved on a machine of this kind "
                    f"({kind(HERE)}; saved: {SAVED_ON})")
    else:
        saved, whole = _saved_elsewhere(name), False
        if not saved:
            pytest.skip(f"{name} was saved in no set")
    run_in_fresh_process(name, tmp_path / "new.json")  # a process of its own, as when the reports were saved
    new = json.loads((tmp_path / "new.json").read_text())
    for set_name, report in saved.items():
        found = differences(report, new) if whole else differences(structure(report), structure(new))
        what = "field(s)" if whole else "decision(s)"
        assert not found, f"{len(found)} {what} differ from the report saved in {set_name}:\n" + "\n".join(found[:40])


def test_the_comparison_sees_a_changed_number_and_a_changed_name():
    saved = json.loads((FOLDER / "avx2" / "demo_f16.json").read_text())
    changed = json.loads(json.dumps(saved))
    changed["nodes"][0]["error"] = changed["nodes"][0]["error"] * 1.01 + 1e-3
    changed["first_divergence"] = [changed["nodes"][0]["key"]]  # another node (a name of none is refused on load)
    assert changed["first_divergence"] != saved["first_divergence"]
    found = differences(saved, changed)
    assert any(".nodes[0].error" in f for f in found) and any("first_divergence" in f for f in found)
    assert differences(saved, saved) == []
    assert differences(structure(saved), structure(changed))


def test_numbers_compare_within_a_kernel_s_last_digits_and_sentences_by_their_printed_digits():
    # Two CPUs of one kind, and two formulas for a cosine, moved a low cosine by 1.1e-4 relative: the same.
    assert differences({"cosine": 0.16158459291542535}, {"cosine": 0.16160010725763851}) == []
    assert differences({"cosine": 0.16158}, {"cosine": 0.1632})  # 1 % is a change
    assert differences({"runs": 21}, {"runs": 22})  # counts are exact
    assert differences({"t": "rel_l2 8.6e-01 > tolerance 3.9e-03"}, {"t": "rel_l2 8.7e-01 > tolerance 3.9e-03"}) == []
    assert differences({"t": "rel_l2 8.6e-01 > tolerance 3.9e-03"}, {"t": "rel_l2 8.9e-01 > tolerance 3.9e-03"})
    assert differences({"t": "keeping 4 node(s)"}, {"t": "keeping 5 node(s)"})
    assert differences({"t": "'inorm/sub' is a source"}, {"t": "'inorm/sqdiff' is a source"})


def test_a_machine_s_kind_ignores_flags_that_select_no_other_kernel():
    zen4 = {"openvino": "x", "capabilities": ["BF16", "FP32"], "isa": ["avx2", "avx512_bf16", "avx512_vnni", "avx512f"]}
    zen5 = {**zen4, "isa": [*zen4["isa"], "avx_vnni"]}
    amx = {**zen4, "isa": [*zen4["isa"], "amx_bf16", "amx_tile"]}
    assert kind(zen4) == kind(zen5) != kind(amx)
    assert kind({**zen4, "capabilities": ["BF16", "FP16", "FP32"]}) != kind(zen4)
