"""Stateful models (ReadValue/Assign variables, as in an LLM's KV cache) as stateless ones that any tool can cut.

OpenVINO keeps a stateful model's variables inside the infer request: a ReadValue reads the variable (its
initial value after `reset_state()`), an Assign writes it for the next call. Tapping such a model, extracting
a piece of it or rewriting it for emulation breaks the pairing (the CPU plugin refuses a ReadValue whose
Assign is gone: "doesn't have sibling output"). `make_stateless` turns every variable into an explicit input
and output instead: each ReadValue becomes a Parameter named ``state:<variable>`` and each Assign a Result
``state:<variable>`` (the variable's new value), so

* a run with the variables reset is a run of the stateless model fed the variables' initial values
  (`initial_states`, computed from the ReadValue's initialiser subgraph on the model's own inputs);
* the new state tensors are final outputs, compared like any tensor;
* a generation step is a run fed the previous step's state outputs (each side its own cache).

Assumptions: each variable has one ReadValue and one Assign (what converters and optimum-intel produce); a
ReadValue without an initialiser starts at zeros of the variable's shape with its dynamic dimensions empty
(what the CPU plugin does after `reset_state()`). The user's model is never modified: everything is done on
a clone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError, first_line, raise_if_interrupted

log = logging.getLogger(__name__)

__all__ = ["STATE_PREFIX", "Stateless", "is_stateful", "make_stateless", "initial_states", "compile_initialiser",
           "run_initialiser"]

STATE_PREFIX = "state:"
STATE_OPS = ("ReadValue", "Assign")


@dataclass(frozen=True)
class Stateless:
    """A stateful model with its variables as inputs and outputs.

    Attributes
    ----------
    model
        The stateless model: the original parameters, then one ``state:<variable>`` parameter per variable;
        the original outputs, then one ``state:<variable>`` output per variable, in the same variable order.
    variables
        The variable ids, in the order of the state parameters and outputs.
    n_inputs, n_outputs
        How many parameters and outputs the original model had (its own come first).
    init
        The initialiser model: the original parameters in, each variable's initial value out.
    source
        The stateful model it was made from (as given: not a clone).
    """

    model: ov.Model
    variables: tuple[str, ...]
    n_inputs: int
    n_outputs: int
    init: ov.Model
    source: ov.Model | None = None

    @property
    def state_outputs(self) -> tuple[int, ...]:
        """Positions of the state outputs among the stateless model's outputs."""
        return tuple(range(self.n_outputs, self.n_outputs + len(self.variables)))


def is_stateful(model: ov.Model) -> bool:
    """True when the model holds variables (ReadValue/Assign, or sinks)."""
    return bool(model.get_sinks()) or any(op.get_type_name() in STATE_OPS for op in model.get_ops())


def _variable_id(op) -> str:
    return str(op.get_attributes().get("variable_id") or op.get_friendly_name())


def _natural(name: str) -> list:
    """Sort key that puts layer 2 before layer 10."""
    import re

    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def make_stateless(model: ov.Model) -> Stateless:
    """Turn `model`'s variables into ``state:`` inputs and outputs (see the module docstring).

    Raises
    ------
    InputError
        When a variable has no ReadValue or no Assign, or several of either.
    """
    clone = model.clone()
    reads: dict[str, list] = {}
    writes: dict[str, list] = {}
    for op in clone.get_ordered_ops():
        if op.get_type_name() == "ReadValue":
            reads.setdefault(_variable_id(op), []).append(op)
        elif op.get_type_name() == "Assign":
            writes.setdefault(_variable_id(op), []).append(op)
    variables = sorted(dict.fromkeys([*reads, *writes]), key=_natural)
    odd = [v for v in variables if len(reads.get(v, ())) != 1 or len(writes.get(v, ())) != 1]
    if odd:
        raise InputError(f"Variables {odd} do not have exactly one ReadValue and one Assign; bisect_ov compares "
                         "stateful models whose every variable is read once and written once (as converters and "
                         "optimum-intel export them). Pass the model made stateless, with the states as inputs.")
    n_inputs, n_outputs = len(clone.get_parameters()), len(clone.outputs)
    params, results, init_outputs = [], [], []
    for var in variables:
        read, write = reads[var][0], writes[var][0]
        out = read.output(0)
        param = ops.parameter(out.get_partial_shape(), out.get_element_type(), name=f"{STATE_PREFIX}{var}")
        param.output(0).set_names({f"{STATE_PREFIX}{var}"})
        init_outputs.append(read.input_value(0) if read.get_input_size() else None)
        for target in list(out.get_target_inputs()):
            target.replace_source_output(param.output(0))
        value = write.input_value(0)
        result = ops.result(value)
        result.set_friendly_name(f"{STATE_PREFIX}{var}")
        result.output(0).set_names({f"{STATE_PREFIX}{var}"})
        results.append(result)
        params.append(param)
        clone.remove_sink(write)
    original_params = list(clone.get_parameters())
    stateless = ov.Model(list(clone.get_results()) + results, original_params + params, clone.get_friendly_name())
    init = _init_model(model, variables)
    return Stateless(stateless, tuple(variables), n_inputs, n_outputs, init, model)


def _init_model(model: ov.Model, variables: list[str]) -> ov.Model:
    """A model from the original inputs to each variable's initial value (its ReadValue's initialiser).

    An initialiser may read another variable (optimum-intel's seq2seq decoder computes its cross-attention
    cache from a variable holding the encoder's states): after `reset_state()` that variable holds its own
    initial value, so every ReadValue is replaced by its initialiser, or zeros where it has none."""
    clone = model.clone()
    initial = {}
    for op in clone.get_ordered_ops():
        if op.get_type_name() != "ReadValue":
            continue
        if op.get_input_size():
            source = op.input_value(0)
        else:
            shape = [d.get_length() if d.is_static else 0 for d in op.get_output_partial_shape(0)]
            source = ops.constant(np.zeros(shape, dtype=op.get_output_element_type(0).to_dtype())).output(0)
        initial[_variable_id(op)] = source
        for target in list(op.output(0).get_target_inputs()):
            target.replace_source_output(source)
    outputs = [ops.result(initial[var]) for var in variables]
    return ov.Model(outputs, list(clone.get_parameters()), "initial_states")


def initial_states(stateless: Stateless, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each variable's value after `reset_state()`, for the model's own inputs `arrays` (run on the CPU in f32).

    Raises
    ------
    InputError
        When the initialiser subgraph does not run on these inputs.
    """
    if not stateless.variables:
        return []
    return run_initialiser(compile_initialiser(stateless.init), list(arrays)[: stateless.n_inputs],
                           stateless.variables)


def compile_initialiser(init: ov.Model) -> ov.CompiledModel:
    """`Stateless.init` compiled on the CPU in f32, as the plugin computes initial values."""
    try:
        return ov.Core().compile_model(init, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    except Exception as err:
        raise_if_interrupted(err)
        raise InputError(f"The initialiser of the model's variables does not compile: {first_line(err)}.") from err


def run_initialiser(compiled: ov.CompiledModel, arrays: Sequence[np.ndarray], variables: Sequence[str]) -> list[np.ndarray]:
    """Each variable's initial value for the model's own inputs `arrays`, from the compiled initialiser."""
    try:
        result = compiled.create_infer_request().infer(list(arrays))
    except Exception as err:
        raise_if_interrupted(err)
        raise InputError(f"The initial values of the model's variables {list(variables)} could not be computed "
                         f"from its inputs: {first_line(err)}. Check the inputs' shapes.") from err
    return [np.array(result[i]) for i in range(len(variables))]
