"""`BisectOptions` is where an option is declared: `bisect()`'s signature and docstring and the CLI's flags must
agree with its fields (a field added without a keyword or a flag fails here unless it declares why), and
`resolve()` answers what runs without stages deciding it again."""

from __future__ import annotations

import inspect
import re
from dataclasses import MISSING, fields

import pytest

from bisect_ov import bisect
from bisect_ov.cli import build_demo_parser, build_parser
from bisect_ov.pipeline.options import (
    AUTO_MIN_TAP_BYTES,
    GROUPS,
    KEYWORDS,
    BisectOptions,
    Flag,
    ResolvedOptions,
    auto_tap_bytes,
)

FIELDS = fields(BisectOptions)
# Fields that are not keywords of `bisect()` or have no flag, each with the way it is set instead.
NOT_KEYWORDS = {"fix_tolerance": "fix=TOL"}
NO_FLAG = {"fix_tolerance": "--fix TOL"}


def _default(f):
    return f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]


# ----- the record --------------------------------------------------------------------------------------------
def test_every_field_has_a_group_a_doc_a_check_and_a_one_line_help():
    for f in FIELDS:
        meta = f.metadata
        assert meta["group"] in GROUPS, f.name
        assert meta["doc"].strip() and meta["doc"].rstrip().endswith("."), f.name
        assert callable(meta["check"]), f.name
        assert meta["help"] and "\n" not in meta["help"], f.name
        assert meta["cli"] is None or meta["cli"] == "auto" or isinstance(meta["cli"], Flag), f.name


def test_fields_are_declared_group_by_group_in_the_order_of_groups():
    order = list(GROUPS)
    positions = [order.index(f.metadata["group"]) for f in FIELDS]
    assert positions == sorted(positions), [(f.name, f.metadata["group"]) for f in FIELDS]
    assert set(positions) == set(range(len(order)))  # no group left empty


def test_each_default_passes_its_own_check():
    defaults = BisectOptions()
    for f in FIELDS:
        assert f.metadata["check"](f.name, _default(f)) == getattr(defaults, f.name), f.name


# ----- bisect(): signature and docstring ---------------------------------------------------------------------
def _option_parameters():
    parameters = [p for p in inspect.signature(bisect).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert parameters[0].name == "target_model"  # a model, not an option
    return parameters[1:]


def test_bisect_takes_every_option_in_the_records_order_with_its_default():
    parameters = _option_parameters()
    assert [p.name for p in parameters] == list(KEYWORDS)
    assert [f.name for f in FIELDS if f.name not in KEYWORDS] == list(NOT_KEYWORDS)
    by_name = {f.name: f for f in FIELDS}
    for p in parameters:
        assert p.default == _default(by_name[p.name]) or (p.default is None and _default(by_name[p.name]) == {}), p.name


def test_bisect_passes_each_keyword_to_the_record(monkeypatch):
    # Every option given a value other than its default arrives in the options the run gets.
    import bisect_ov.pipeline.api as api

    seen = {}

    def fake_run(model, ref, target, inputs, options, *, target_model=None):
        seen["options"] = options
        return None

    values = {"ref_config": {"A": "1"}, "target_config": {"B": "2"}, "strategy": "full", "metric": "max_abs",
              "tolerance": 0.5, "refine": False, "max_tap_bytes": 1234, "budget": "fast", "local": False,
              "noise": False, "baseline": False, "impact": 1, "fix": 0.25, "max_fix_slowdown": 1.5,
              "delegation": True, "curve": 2, "sensitivity": True,
              "keep": ("a",), "patched_model": "out.xml", "seed": 7, "executor": "threads:2", "samples_per_batch": 3,
              "batch_retries": 1, "classifier_outputs": ("logits",), "prompt_length": 5, "prompt_lengths": (),
              "steps": 2, "progress": False,
              "truth": "f64"}
    assert set(values) == set(KEYWORDS)
    monkeypatch.setattr(api, "run", fake_run)
    bisect("model.xml", **values)
    options = seen["options"]
    expected = {**values, "fix": True}
    assert {k: getattr(options, k) for k in KEYWORDS} == expected and options.fix_tolerance == 0.25
    bisect("model.xml", prompt_lengths=(8, 64))  # a sweep's lengths (a prompt_length beside them is refused)
    assert seen["options"].prompt_lengths == (8, 64)


def _documented_parameters() -> dict[str, str]:
    doc = inspect.getdoc(bisect) or ""
    section = doc.split("Parameters\n----------\n", 1)[1].split("\n\nReturns\n", 1)[0]
    entries: dict[str, str] = {}
    name = None
    for line in section.splitlines():
        if line and not line.startswith(" "):
            name = line.split(" : ")[0]
            assert name not in entries, f"{name} documented twice"
            entries[name] = ""
        elif name is not None:
            entries[name] += " " + line.strip()
    return {k: v.strip() for k, v in entries.items()}


def test_the_docstring_documents_each_option_once_with_its_fields_doc():
    entries = _documented_parameters()
    assert list(entries) == ["model", "ref, target", "inputs", "target_model", *KEYWORDS]
    by_name = {f.name: f for f in FIELDS}
    for name in KEYWORDS:
        assert entries[name] == " ".join(by_name[name].metadata["doc"].split()), name
    assert "{options}" not in (bisect.__doc__ or "")


def test_the_docstring_gives_the_signatures_types_and_defaults():
    doc = inspect.getdoc(bisect) or ""
    for p in _option_parameters():
        assert re.search(rf"^{p.name} : {re.escape(str(p.annotation))}, default {re.escape(repr(p.default))}$", doc,
                         re.M), p.name


# ----- the command line ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("build", [build_parser, build_demo_parser], ids=["compare", "demo"])
def test_every_option_has_a_flag_in_its_group_unless_it_says_how_it_is_set(build):
    parser = build()
    assert [f.name for f in FIELDS if f.metadata["cli"] is None] == list(NO_FLAG)
    titles = {group.title: group for group in parser._action_groups}
    for f in FIELDS:
        if f.metadata["cli"] is None:
            continue
        group = titles[GROUPS[f.metadata["group"]]]
        assert [a for a in group._group_actions if a.dest == f.name], f"no flag for {f.name} in '{group.title}'"


def test_the_flags_defaults_are_the_records_defaults():
    from bisect_ov.cli import _options

    assert _options(build_parser().parse_args(["m.xml"])) == BisectOptions()
    assert _options(build_demo_parser().parse_args([])) == BisectOptions()


@pytest.mark.parametrize("flags, expected", [
    (["--max-tap-mb", "1"], {"max_tap_bytes": 1 << 20}),
    (["--max-tap-mb", "0"], {"max_tap_bytes": None}),
    (["-q"], {"progress": False}),
    (["--fix"], {"fix": True, "fix_tolerance": None}),
    (["--fix", "0.1"], {"fix": True, "fix_tolerance": 0.1}),
    (["--ref-config", "A=1", "--ref-config", "B = 2"], {"ref_config": {"A": "1", "B": "2"}}),
    (["--classifier-output", "a", "--classifier-output", "b"], {"classifier_outputs": ("a", "b")}),
    (["--keep", "x", "--keep", "culprits"], {"keep": ("x", "culprits")}),
    (["--budget", "fast", "--no-local", "--no-refine", "--no-noise"],
     {"budget": "fast", "local": False, "refine": False, "noise": False}),
    (["--batch-retries", "0", "--samples-per-batch", "4", "--executor", "threads:2"],
     {"batch_retries": 0, "samples_per_batch": 4, "executor": "threads:2"}),
    (["--steps", "3", "--prompt-length", "8", "--seed", "5", "--impact", "0", "--curve", "4"],
     {"steps": 3, "prompt_length": 8, "seed": 5, "impact": 0, "curve": 4}),
])
def test_flags_become_the_options_they_name(flags, expected):
    from bisect_ov.cli import _options

    options = _options(build_parser().parse_args(["m.xml", *flags]))
    assert {k: getattr(options, k) for k in expected} == expected


# ----- resolve ------------------------------------------------------------------------------------------------
ALL_SIDES = {"local_possible": True, "pieces_possible": True, "twin": False}


def test_resolve_with_the_default_budget_keeps_every_experiment():
    resolved = BisectOptions(fix=True, curve=2).resolve(**ALL_SIDES, weight_bytes=1 << 30)
    assert isinstance(resolved, ResolvedOptions) and resolved.left_out == ()
    assert (resolved.local, resolved.refine, resolved.impact, resolved.fix, resolved.curve) == (True, True, 3, True, 2)
    assert resolved.noise_runs and resolved.node_spread and resolved.partitioned
    assert resolved.max_tap_bytes == resolved.tap_bytes == 1 << 29


def test_resolve_with_the_fast_budget_leaves_out_what_it_promises():
    resolved = BisectOptions(budget="fast").resolve(**ALL_SIDES, weight_bytes=0)
    assert not (resolved.local or resolved.refine or resolved.impact or resolved.noise_runs or resolved.node_spread)
    assert resolved.noise  # the floor is still read, from the compiles made anyway
    assert resolved.tap_bytes == AUTO_MIN_TAP_BYTES


def test_resolve_switches_off_what_the_sides_cannot_run():
    options = BisectOptions(fix=True, delegation=True, curve=3, sensitivity=True, patched_model="p.xml")
    recorded = options.resolve(local_possible=False, pieces_possible=False, twin=True)
    assert not (recorded.local or recorded.partitioned or recorded.fix or recorded.patched_model)
    assert recorded.refine and recorded.noise_runs and recorded.node_spread  # the budget's decisions stand
    target_recorded = BisectOptions().resolve(local_possible=False, pieces_possible=True, twin=False)
    assert not target_recorded.local and target_recorded.impact == 3
    no_noise = BisectOptions(noise=False).resolve(**ALL_SIDES)
    assert not no_noise.noise_runs and no_noise.node_spread


def test_tap_bytes_are_bytes_or_none_once_resolved():
    assert BisectOptions(max_tap_bytes=None).resolve(**ALL_SIDES, weight_bytes=10).tap_bytes is None
    assert BisectOptions(max_tap_bytes=4096).resolve(**ALL_SIDES, weight_bytes=1 << 40).tap_bytes == 4096
    assert auto_tap_bytes(1 << 30) == 1 << 29
    unresolved = BisectOptions().resolve(**ALL_SIDES)  # no weight bytes: "auto" stays, and says so when read
    assert unresolved.max_tap_bytes == "auto"
    with pytest.raises(TypeError, match="weight_bytes"):
        _ = unresolved.tap_bytes


def test_resolved_options_read_and_compare_as_the_options():
    options = BisectOptions(keep=("a",), seed=3)
    resolved = options.resolve(**ALL_SIDES)
    assert resolved == options and options == resolved
    assert resolved.to_dict() == options.to_dict()  # the report records options, not the decisions
    assert resolved != BisectOptions(seed=4)


def test_a_strategy_registered_after_import_is_accepted():
    from bisect_ov.core.errors import InputError
    from bisect_ov.search import strategies

    class Mine(strategies.BisectionSearch):
        name = "mine_for_this_test"

    with pytest.raises(InputError, match="mine_for_this_test"):
        BisectOptions(strategy="mine_for_this_test")  # not yet registered: refused, the message lists no such name
    strategies.register_strategy(Mine)
    try:
        assert BisectOptions(strategy="mine_for_this_test").strategy == "mine_for_this_test"
    finally:
        strategies._REGISTRY.pop("mine_for_this_test")


def test_the_recorded_options_mirror_every_option_with_its_default():
    """`RunOptions` (the report's record, in the layer below the options) repeats `BisectOptions`' fields: every
    option is recorded, under its name, and a default run records what the options record holds by default, so
    an option added to one and not the other fails here."""
    from bisect_ov.core.records import RunOptions
    from bisect_ov.pipeline.assemble import record_of

    options = [f.name for f in fields(BisectOptions)]
    recorded = [f.name for f in fields(RunOptions)]
    assert options == recorded
    assert record_of(RunOptions, BisectOptions().to_dict()) == RunOptions()


def test_the_tolerance_model_and_its_record_share_one_declaration_of_their_fields():
    """`Tolerance` computes with the fields `ToleranceInfo` records: both are `ToleranceFields`, so a field
    added to the model is recorded, under its name and with its default, with no second list to keep."""
    from bisect_ov.analysis.tolerance import Tolerance
    from bisect_ov.core.records import ToleranceFields, ToleranceInfo
    from bisect_ov.pipeline.assemble import record_of

    assert issubclass(Tolerance, ToleranceFields) and issubclass(ToleranceInfo, ToleranceFields)
    assert fields(Tolerance) == fields(ToleranceInfo) == fields(ToleranceFields)
    assert record_of(ToleranceInfo, Tolerance().to_dict()) == ToleranceInfo()
    given = Tolerance(precision="f16", factor=4.0, per_node={"mm1": 1e-3}, quantization={"conv": 0.01})
    assert record_of(ToleranceInfo, given.to_dict()) == ToleranceInfo(precision="f16", factor=4.0,
                                                                       per_node={"mm1": 1e-3},
                                                                       quantization={"conv": 0.01})


def test_a_patched_model_without_fix_is_refused():
    # It was accepted and nothing was written, without a word.
    from bisect_ov.core.errors import InputError

    with pytest.raises(InputError, match="patched_model .* add fix=True"):
        BisectOptions(patched_model="patched.xml")
    assert BisectOptions(fix=True, patched_model="patched.xml").patched_model == "patched.xml"
    with pytest.raises(InputError, match=r"max_fix_slowdown \(--max-fix-slowdown\) bounds .* add fix=True"):
        BisectOptions(max_fix_slowdown=2.0)  # ignored without a word as well
    assert BisectOptions(fix=True, max_fix_slowdown=2.0).max_fix_slowdown == 2.0


def test_classifier_outputs_are_checked_with_one_sample_too():
    from bisect_ov.core.errors import InputError
    from bisect_ov.zoo.synthetic import demo

    with pytest.raises(InputError, match=r"classifier_outputs \['nope'\] are not outputs of the model. Outputs: \['probs'\]"):
        bisect(demo(), "CPU:f32", "EMU:f16", classifier_outputs=["nope"], progress=False, budget="fast")
    report = bisect(demo(), "CPU:f32", "EMU:f16", classifier_outputs=["probs"], progress=False, budget="fast")
    assert any("with one sample they are not used" in n for n in report.notes)
