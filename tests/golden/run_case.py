"""Run one golden case in this (fresh) interpreter and write its normalized report as JSON:
``python -m tests.golden.run_case CASE OUT.json``.

Each case runs in a process of its own, so what ran before it (OpenVINO's process-wide name counters, compiled
kernels kept by the plugin) cannot change its report: the saved reports and the fresh ones are made alike.
"""

from __future__ import annotations

import json
import pathlib
import sys


def main(name: str, out: str) -> None:
    from tests.golden.cases import CASES
    from tests.golden.compare import normalized

    report = CASES[name].run()
    pathlib.Path(out).write_text(json.dumps(normalized(report), indent=1, sort_keys=True) + "\n")
    print(repr(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
