"""Write the golden reports: `python tests/golden/make_golden.py [case ...]` (all cases by default).

Each case's report (`cases.py`), run in a fresh process of its own, is saved as ``<case>.json`` with its timings
taken out, and the machine facts
(OpenVINO build, the CPU plugin's capabilities, ISA flags) as ``machine.json``. `tests/test_golden.py`
compares fresh runs with them on a machine with the same facts and skips elsewhere.
"""

from __future__ import annotations

import json
import sys

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))

from tests.golden.cases import CASES  # noqa: E402
from tests.golden.compare import FOLDER, machine, run_in_fresh_process  # noqa: E402


def main(names: list[str]) -> None:
    (FOLDER / "machine.json").write_text(json.dumps(machine(), indent=1) + "\n")
    for name in names or list(CASES):
        print(f"{name}: {run_in_fresh_process(name, FOLDER / f'{name}.json')}")


if __name__ == "__main__":
    main(sys.argv[1:])
