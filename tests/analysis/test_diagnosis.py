"""Diagnoses as `Cause` records: each mechanism has its kind and numbers, the sentence of each kind reads back
to that kind (how reports saved as sentences are upgraded), and the fix search reads the kind, never the words."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bisect_ov.analysis.diagnosis import diagnose, kind_of_text, observations
from bisect_ov.analysis.metrics import compare
from bisect_ov.core.records import CAUSE_KINDS, Cause
from bisect_ov.experiments.partitioned import suspects_for_fix


def _offset(n: int = 8):
    x = np.full(n, 1000.0) + np.arange(n)
    return compare(x - x.mean(), x - x.mean() + 0.5), [compare(x, x)]


def _cases():
    ones = compare(np.ones(8), np.ones(8) * 1.1)
    out, inputs = _offset()
    big = compare(np.full(8, 400.0), np.full(8, np.inf, dtype=np.float32))
    tiny = compare(np.full(16, 2e-8), np.zeros(16))
    return {
        "cancellation": diagnose("source", 0.2, 0.01, 1, out, inputs, "bf16", "Subtract"),
        "overflow": diagnose("source", 1.0, 1e-3, 1, big, [compare(np.full(8, 400.0), np.full(8, 400.0))], "f16",
                             "Power"),
        "underflow": diagnose("source", 1.0, 1e-3, 1, tiny, [ones], "f16", "Multiply"),
        "long_reduction": diagnose("source", 0.5, 0.01, 4096, ones, [ones], "f16", "MatMul"),
        "over_tolerance": diagnose("amplifier", 0.5, 0.01, 1, ones, [ones], "f16", "Relu"),
        "nonfinite": observations([big]),
    }


@pytest.mark.parametrize("kind", list(_cases()))
def test_each_mechanism_is_a_record_of_its_kind_whose_sentence_reads_back(kind):
    causes = _cases()[kind]
    assert causes and causes[0].kind == kind and kind in CAUSE_KINDS
    assert all(isinstance(c, Cause) and c.text for c in causes)
    assert [kind_of_text(c.text) for c in causes] == [c.kind for c in causes]  # the upgrade of schema 2
    assert causes[0].numbers and all(isinstance(v, (int, float)) for v in causes[0].numbers.values())


def test_the_numbers_are_the_ones_the_sentence_shows():
    (cause,) = _cases()["cancellation"]
    n = cause.numbers
    assert n["ratio"] == pytest.approx(n["input_max"] / n["output_max"])
    assert f"{n['input_max']:.3g}" in cause.text and f"({n['ratio']:.0f}x smaller)" in cause.text


def test_roles_without_a_mechanism_get_no_diagnosis():
    out, inputs = _offset()
    assert diagnose("inherits", 0.2, 0.01, 1, out, inputs, "bf16") == []
    assert diagnose("ok", 0.2, 0.01, 1, out, inputs, "bf16") == []


@pytest.mark.parametrize("text, kind", [
    ("ran differently: reference f32 jit_avx512, target f32 brgconv", "kernel_difference"),
    ("in the target model its inputs pass through fq1, which the model lacks", "foreign_inputs"),
    ("exact integer result 179,209,319; target computed in floating point: off by 97,177 (179,306,496); "
     "reference off by 1,927", "exact"),
    ("integer-exact on both sides (exact integer result up to 12)", "exact"),
    ("3 value(s) at or beyond the f16 limit 65504 (saturation/overflow)", "f16_limit"),
    ("1,024 value(s) at the integer type's limits (saturation)", "int_limit"),
    ("shapes differ: reference [1, 2], target [2, 1]", "note"),
    ("an overflowing sentence that does not start with the kind", "note"),
])
def test_saved_sentences_of_every_other_kind_read_back(text, kind):
    assert kind_of_text(text) == kind


@dataclasses.dataclass
class _Node:
    key: str
    is_candidate: bool = True
    op_type: str = "Add"
    kind: str = "compute"


class _Chain:
    """a -> b -> c: the least of a graph `suspects_for_fix` reads."""

    def __init__(self) -> None:
        self.nodes = {k: _Node(k) for k in "abc"}

    def __contains__(self, key: str) -> bool:
        return key in self.nodes

    def __getitem__(self, key: str) -> _Node:
        return self.nodes[key]

    def data_inputs(self, key: str):
        return {"b": [("a", 0)], "c": [("b", 0)]}.get(key, [])

    def candidates(self):
        return list(self.nodes.values())


def test_the_fix_search_tries_a_cancellations_producers_by_kind_not_by_words():
    def suspects(cause: Cause) -> list[tuple[str, ...]]:
        return suspects_for_fix(_Chain(), ("b", "c"), ("b",), {}, {}, {}, {"b": (cause,)}, None)

    # A cancellation's producers come next to it; any first divergence's producers come last, after the ranking
    # (a node that amplifies its inputs' rounding, kept alone, still reads them rounded).
    assert suspects(Cause("cancellation", "inputs much larger than the output")) == [("b",), ("a",), ("c",)]
    assert suspects(Cause("note", "cancellation: a note that only reads like one")) == [("b",), ("c",), ("a",)]


def test_a_tolerance_the_user_gave_is_not_called_roundings():
    # With --tolerance 1e-3 the cause read "error 2.9x the tolerance of bf16 rounding for this op".
    ones = compare(np.ones(8), np.ones(8) * 1.1)
    given = diagnose("amplifier", 0.5, 0.01, 1, ones, [ones], "bf16", "Relu", given=True)[0]
    assert given.kind == "over_tolerance" and given.text == "error 50.0x the tolerance given"
    assert kind_of_text(given.text) == "over_tolerance"
    long = diagnose("source", 0.5, 0.01, 4096, ones, [ones], "bf16", "MatMul", given=True)[0]
    assert long.kind == "long_reduction" and "50.0x the tolerance given" in long.text and "predicts" not in long.text
    assert "of bf16 rounding" in diagnose("amplifier", 0.5, 0.01, 1, ones, [ones], "bf16", "Relu")[0].text
