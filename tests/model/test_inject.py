import numpy as np
import openvino as ov
import pytest

from bisect_ov.core.errors import InputError
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.inject import FAULT_KINDS, inject_fault
from tests.conftest import tiny_chain

CFG = {"INFERENCE_PRECISION_HINT": "f32"}


def _run(model, x):
    return ov.Core().compile_model(model, "CPU", CFG)(x)[0]


@pytest.mark.parametrize("kind", sorted(FAULT_KINDS))
def test_fault_changes_the_output_and_keeps_names(kind):
    model = tiny_chain()
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    faulty = inject_fault(model, "mm1", kind)
    assert not np.array_equal(_run(model, x), _run(faulty, x), equal_nan=False)
    g = ModelGraph(faulty)
    assert g.find("mm1").op_type != "MatMul"  # the perturbing op now carries the name
    assert g.find("mm1/before_fault").op_type == "MatMul"
    assert {n.name for n in ModelGraph(model)} <= {n.name for n in g}
    assert len(ModelGraph(model).candidates()) == 8  # the original is untouched


def test_bad_requests_are_clear():
    model = tiny_chain()
    with pytest.raises(InputError, match="Unknown fault kind"):
        inject_fault(model, "mm1", "explode")
    with pytest.raises(InputError, match="No node named"):
        inject_fault(model, "nope")
    with pytest.raises(InputError, match="compute nodes"):
        inject_fault(model, "w0")
