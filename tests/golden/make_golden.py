"""Write the golden reports: `python tests/golden/make_golden.py [case ...]` (all cases by default).

Each case's report (`cases.py`), run in a fresh process of its own, is saved as ``<set>/<case>.json`` with its
timings taken out, and the machine facts (OpenVINO build, the CPU plugin's capabilities, ISA flags) as
``<set>/machine.json``, where ``<set>`` names the machine's kind (`compare.set_name`: ``avx512_bf16``, ``avx2``,
...). Cases this machine cannot run (a bf16 target without bf16, the zoo without its extra) are not saved.
`tests/test_golden.py` compares fresh runs with the set saved on a machine with the same facts and skips
elsewhere. Save each set from the same commit, so that the sets pin the same behaviour.
"""

from __future__ import annotations

import json
import sys

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))

from tests.golden.cases import CASES  # noqa: E402
from tests.golden.compare import FOLDER, machine, run_in_fresh_process, set_name  # noqa: E402


def main(names: list[str]) -> None:
    from bisect_ov.run.devices import cpu_supports_bf16
    from bisect_ov.zoo import cache

    facts = machine()
    folder = FOLDER / set_name(facts)
    folder.mkdir(exist_ok=True)
    (folder / "machine.json").write_text(json.dumps(facts, indent=1) + "\n")
    for name in names or list(CASES):
        case = CASES[name]
        if (case.bf16 and not cpu_supports_bf16()) or (case.zoo and cache.missing_packages()):
            print(f"{name}: not saved (this machine cannot run it)")
            continue
        print(f"{name}: {run_in_fresh_process(name, folder / f'{name}.json')}")


if __name__ == "__main__":
    main(sys.argv[1:])
