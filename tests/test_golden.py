"""Behaviour pinned by saved reports: each case of `tests/golden/cases.py` run again gives the report saved in
`tests/golden/<case>.json`, field by field (timings aside; numbers within a relative 1e-5), each case in a fresh process of its own.

The saved numbers depend on the OpenVINO build and the CPU's kernels, so reports are saved per kind of machine
(`tests/golden/<set>/`, e.g. ``avx512_bf16`` and ``avx2``) with the facts they were saved on
(`<set>/machine.json`: OpenVINO version, the CPU plugin's capabilities, the ISA flags); the comparison runs
against the set saved on a machine with this one's facts and is skipped elsewhere with what differs. A case a
set lacks (a bf16 target on a CPU without bf16) is skipped. Regenerate with `python tests/golden/make_golden.py`
after a change that is meant to change reports (on each kind of machine at hand), and say why in the commit.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import needs_bf16
from tests.golden.cases import CASES
from tests.golden.compare import FOLDER, differences, machine, run_in_fresh_process, saved_set
from tests.zoo.conftest import needs_zoo

HERE = machine()
SAVED = saved_set(HERE)
SAVED_ON = [json.loads(p.read_text()) for p in sorted(FOLDER.glob("*/machine.json"))]
same_machine = pytest.mark.skipif(
    SAVED is None, reason=f"the golden reports were saved on {SAVED_ON}; this machine is {HERE}")


def _marks(case):
    marks = [same_machine]
    if case.bf16:
        marks.append(needs_bf16)
    if case.zoo:
        marks += [needs_zoo, pytest.mark.zoo]
    return marks


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(c)) for n, c in CASES.items()])
def test_a_case_gives_the_saved_report(name, tmp_path):
    assert SAVED is not None
    path = SAVED / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"{name} was not saved on this kind of machine ({SAVED.name})")
    saved = json.loads(path.read_text())
    run_in_fresh_process(name, tmp_path / "new.json")  # a process of its own, as when the reports were saved
    new = json.loads((tmp_path / "new.json").read_text())
    found = differences(saved, new)
    assert not found, f"{len(found)} field(s) differ from the saved report:\n" + "\n".join(found[:40])


def test_the_comparison_sees_a_changed_number_and_a_changed_name():
    saved = json.loads((FOLDER / "avx512_bf16" / "demo_f16.json").read_text())
    changed = json.loads(json.dumps(saved))
    changed["nodes"][0]["error"] = changed["nodes"][0]["error"] * 1.01 + 1e-3
    changed["first_divergence"] = [changed["nodes"][0]["key"]]  # another node (a name of none is refused on load)
    assert changed["first_divergence"] != saved["first_divergence"]
    found = differences(saved, changed)
    assert any(".nodes[0].error" in f for f in found) and any("first_divergence" in f for f in found)
    assert differences(saved, saved) == []
