"""Checks of a loaded report that its fields' types cannot express: every node it names by key is one of its nodes.

A saved report is untrusted input (`Report.load`): a file edited by hand or damaged must be refused when it is
read, not fail later when a rendering looks a name up.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, TypeVar

from bisect_ov.core.errors import InputError

__all__ = ["check_references"]

R = TypeVar("R")


def check_references(report: R) -> R:
    """`report`, once every node it names by key (first divergences, ranking) is one of its nodes, keys unique."""
    found: Any = report
    keys = [n.key for n in found.nodes]
    known = set(keys)
    if len(known) != len(keys):
        twice = sorted(k for k, n in Counter(keys).items() if n > 1)[:5]
        raise InputError(f"report.nodes: the key(s) {twice} appear more than once; every node has its own key.")
    for field_name, named in (("first_divergence", found.first_keys), ("ranking", found.ranking)):
        unknown = [k for k in named if k not in known]
        if unknown:
            raise InputError(f"report.{field_name} names {len(unknown)} node(s) that are not in report.nodes: "
                             f"{[str(k)[:80] for k in unknown[:5]]}. The file was edited or is damaged.")
    return report
