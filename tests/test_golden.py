"""Behaviour pinned by saved reports: each case of `tests/golden/cases.py` run again gives the report saved in
`tests/golden/<case>.json`, field by field (timings aside; numbers within a relative 1e-5), each case in a fresh process of its own.

The saved numbers depend on the OpenVINO build and the CPU's kernels, so the comparison runs only on a machine
with the facts recorded in `tests/golden/machine.json` (OpenVINO version, the CPU plugin's capabilities, the
ISA flags) and is skipped elsewhere with what differs. Regenerate with `python tests/golden/make_golden.py`
after a change that is meant to change reports, and say why in the commit.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import needs_bf16
from tests.golden.cases import CASES
from tests.golden.compare import FOLDER, differences, machine, run_in_fresh_process
from tests.zoo.conftest import needs_zoo

SAVED_MACHINE = json.loads((FOLDER / "machine.json").read_text())
HERE = machine()
same_machine = pytest.mark.skipif(
    HERE != SAVED_MACHINE,
    reason=f"the golden reports were saved on {SAVED_MACHINE}; this machine is {HERE}")


def _marks(case):
    marks = [same_machine]
    if case.bf16:
        marks.append(needs_bf16)
    if case.zoo:
        marks += [needs_zoo, pytest.mark.zoo]
    return marks


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(c)) for n, c in CASES.items()])
def test_a_case_gives_the_saved_report(name, tmp_path):
    saved = json.loads((FOLDER / f"{name}.json").read_text())
    run_in_fresh_process(name, tmp_path / "new.json")  # a process of its own, as when the reports were saved
    new = json.loads((tmp_path / "new.json").read_text())
    found = differences(saved, new)
    assert not found, f"{len(found)} field(s) differ from the saved report:\n" + "\n".join(found[:40])


def test_the_comparison_sees_a_changed_number_and_a_changed_name():
    saved = json.loads((FOLDER / "demo_f16.json").read_text())
    changed = json.loads(json.dumps(saved))
    changed["nodes"][0]["error"] = changed["nodes"][0]["error"] * 1.01 + 1e-3
    changed["first_divergence"] = [changed["nodes"][0]["key"]]  # another node (a name of none is refused on load)
    assert changed["first_divergence"] != saved["first_divergence"]
    found = differences(saved, changed)
    assert any(".nodes[0].error" in f for f in found) and any("first_divergence" in f for f in found)
    assert differences(saved, saved) == []
