"""An input's name in messages is the one a person gave it, not a converter's counter-made tensor name."""

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError
from bisect_ov.run.inputs import parameter_specs, prepare_inputs


def test_a_counter_made_tensor_name_is_not_the_input_s_name():
    mask = ops.parameter([1, 4], np.int64, name="attention_mask")
    mask.output(0).set_names({"52", "attention_mask"})  # as TorchScript tracing leaves an input
    model = ov.Model([ops.convert(mask, "f32").output(0)], [mask])
    assert parameter_specs(model)[0].name == "attention_mask"
    with pytest.raises(InputError, match="'attention_mask'"):
        prepare_inputs(model, {"attention_mask": np.ones((1, 4), np.float32)})
