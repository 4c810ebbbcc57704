"""`budget="fast"`: the first look at a big model, about twice the plain job.

The fault is made by the target device (`FaultyCPU`), so one model runs on both sides as a user's would. The
fast budget must still name where error starts, at fusion-group granularity (the group's output, or a group
holding the faulty node), while running none of what it leaves out: no local errors, no impact runs, no
refinement of groups, no extra run for the noise floor.
"""

from __future__ import annotations

import pytest

from bisect_ov import bisect
from tests.conftest import FAULT_SHAPES, FaultyCPU, float_sites, shape_inputs, shape_model

CASES = [(shape, node) for shape in FAULT_SHAPES for node in float_sites(shape)[1::4]]


def _runs(report) -> tuple[int, int]:
    """Compiles and inferences of both sides over every stage."""
    costs = report.costs.values()
    return (sum(c["ref_compiles"] + c["target_compiles"] for c in costs),
            sum(c["ref_infers"] + c["target_infers"] for c in costs))


@pytest.mark.parametrize("shape, node", CASES, ids=[f"{s}:{n}" for s, n in CASES])
def test_the_fast_budget_names_the_faulty_node_or_its_group(shape, node):
    report = bisect(shape_model(shape), "CPU:f32", FaultyCPU(node), shape_inputs(shape), budget="fast",
                    progress=False)
    first = report.first_divergence
    if first is None:  # a fault the network takes out again must then leave the outputs within tolerance
        assert not report.diverges, report.to_text()
        return
    assert first.name == node or node in (first.group or ()), report.to_text()
    assert all(n.local_error is None and n.impact is None for n in report.nodes)


@pytest.mark.parametrize("shape", ["conv_bn_net", "attention_block"])
def test_the_fast_budget_runs_less_than_the_default_and_no_extra_noise_run(shape):
    sites = float_sites(shape)
    node = sites[len(sites) // 2]
    args = (shape_model(shape), "CPU:f32", FaultyCPU(node), shape_inputs(shape))
    fast = bisect(*args, budget="fast", progress=False)
    default = bisect(*args, progress=False)
    assert default.first_divergence is not None and default.first_divergence.name == node, default.to_text()
    compiles, infers = _runs(fast)
    assert compiles < _runs(default)[0] and infers < _runs(default)[1], (fast.costs, default.costs)
    # The plain run is one compile and one run per side; the noise floor comes from the compiles made anyway.
    assert fast.costs["plain"]["target_infers"] == 1 and fast.costs["plain"]["target_compiles"] == 1
    assert fast.noise is not None
    assert "experiments" not in fast.costs or fast.costs["experiments"]["target_compiles"] == 0


def test_with_many_samples_the_fast_budget_runs_each_sample_once_per_side():
    # The samples are run and ranked (the search runs on the worst), but not run again for each node's spread.
    import numpy as np

    from bisect_ov import inject_fault
    from tests.conftest import tiny_chain

    model = tiny_chain()
    samples = [{"x": np.random.default_rng(i).standard_normal((1, 8)).astype(np.float32)} for i in range(9)]
    faulty = inject_fault(model, "mm2", "noise", 0.05, seed=7)
    fast = bisect(model, "CPU:f32", "CPU:f32", samples, target_model=faulty, budget="fast", progress=False)
    default = bisect(model, "CPU:f32", "CPU:f32", samples, target_model=faulty, progress=False)
    assert fast.samples.count == default.samples.count == 9 and fast.samples.worst == default.samples.worst
    first = fast.first_divergence
    assert first is not None and (first.name == "mm2" or "mm2" in first.group), fast.to_text()
    assert all(not n.over_samples for n in fast.nodes) and any(n.over_samples for n in default.nodes)
    for side in ("ref", "target"):
        sample_runs = fast.costs["open"][f"{side}_infers"]  # the outputs' pass, in the opening stage
        assert sample_runs == 9
        assert _runs(fast)[1] < _runs(default)[1] - 2 * 9 + 1  # no second pass over the samples
