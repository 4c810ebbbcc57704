"""A pipeline component's calls, run by bisect_ov's devices in place of optimum-intel's own requests.

An optimum-intel pipeline calls each component through a request object: the encoder through a
`CompiledModel` (``request(inputs)[name]``, ``request(inputs)[0]``, or ``request(input_ids)`` with one input
given by position), a decoder through an `InferRequest` (``start_async``, ``wait``, ``get_tensor(name).data``,
``reset_state``). `ComponentRequest` answers both on a `Device` of bisect_ov's
(``CPU:f32``, an emulated ``EMU:f16``, a GPU), so the pipeline's own loop (its pre- and post-processing,
generation, beam bookkeeping) drives the model while bisect_ov sees every call.

A stateful component (a decoder keeping its KV cache in variables) is driven as its stateless form
(`model.state.make_stateless`): the request holds the state arrays itself, starts them at the variables'
initial values on ``reset_state()`` and feeds them to each call, so every call's inputs, state included, are
plain arrays that can be fed again to the other side. On an OpenVINO device the stateful model itself runs,
its variables set to those arrays before each call (`bisect_ov.run.stateful.Stateful`): what the pipeline runs, where the plugin
compiles the stateless rewrite differently; an emulated device runs the rewrite.

With a `shadow` (the other side's compile of the same component), each call is replayed there on exactly the
inputs this side received, its state included (teacher-forced), and only statistics are kept (`CallStats`),
with the inputs of the call whose error is the largest against the component's tolerance: memory does not grow
with the number of calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Mapping

import numpy as np
import openvino as ov

from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.core.errors import InputError
from bisect_ov.model.graph import element_dtype
from bisect_ov.model.state import STATE_PREFIX, Stateless, initial_states, is_stateful, make_stateless
from bisect_ov.run.device_base import Compiled, Device
from bisect_ov.run.stateful import Stateful, compile_stateful

__all__ = ["CallStats", "Component", "ComponentRequest", "Worst", "compile_component"]


@dataclass(frozen=True)
class CallStats:
    """One call of a component, replayed on the other side on the same inputs.

    ``sequence`` counts the component's state resets (a new generation), ``errors`` holds each output's
    statistics (target against reference), ``ratio`` the largest error over the component's tolerance
    (inf where the target gains NaN/Inf from finite inputs)."""

    index: int
    sequence: int
    shapes: dict[str, tuple[int, ...]]
    errors: dict[str, TensorStats]
    ratio: float


@dataclass
class Worst:
    """The inputs of the call with the largest ratio so far (copied: the pipeline reuses its buffers)."""

    index: int = -1
    ratio: float = -1.0
    inputs: dict[str, np.ndarray] = field(default_factory=dict)


class Component:
    """One component's model as a side runs it: stateless where the model holds variables, its parameter
    names and dtypes, and its own outputs (the state outputs follow them)."""

    def __init__(self, name: str, model: ov.Model):
        self.name = name
        self.model = model
        self.stateless: Stateless | None = make_stateless(model) if is_stateful(model) else None
        self.run_model = self.stateless.model if self.stateless is not None else model
        params = self.run_model.get_parameters()
        self.inputs = [p.output(0).get_any_name() for p in params]
        self.dtypes = [element_dtype(p.get_element_type().get_type_name()) for p in params]
        n_own = self.stateless.n_outputs if self.stateless is not None else len(model.outputs)
        self.outputs = [o.get_any_name() for o in model.outputs][:n_own]

    @property
    def own_inputs(self) -> list[str]:
        """The inputs the pipeline feeds (not the state)."""
        return [n for n in self.inputs if not n.startswith(STATE_PREFIX)]

    def arrays(self, given: Any) -> list[np.ndarray]:
        """The pipeline's inputs as arrays in parameter order (torch tensors read as numpy), each cast to the
        parameter's element type within its kind (optimum passes beam indices as int64 for an int32 input).
        Inputs given by position (a list, or one array for the first input) are taken in parameter order."""
        if not isinstance(given, Mapping):
            given = dict(zip(self.own_inputs, given if isinstance(given, (list, tuple)) else [given]))
        missing = [n for n in self.own_inputs if n not in given]
        if missing:
            raise InputError(f"The pipeline called component '{self.name}' without its input(s) {missing} "
                             f"(it gave {sorted(given)}).")
        out = []
        for name, dtype in zip(self.own_inputs, self.dtypes):
            value = given[name]
            array = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
            out.append(np.asarray(array.astype(dtype, copy=False), order="C"))
        return out


class Outputs(dict):
    """A call's outputs by name, in the model's order, also read by position (``result[0]``) and as
    ``to_dict()`` (keyed by ports that have ``names``) as a compiled model's results are."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int):
            return list(self.values())[key]
        return super().__getitem__(key)

    def to_dict(self) -> dict[Any, Any]:
        return {_Port(name): v for name, v in self.items()}


@dataclass(frozen=True)
class _Port:
    """An output port as `Outputs.to_dict` keys it: its names."""

    name: str

    @property
    def names(self) -> set[str]:
        return {self.name}

    def get_any_name(self) -> str:
        return self.name


class ComponentRequest:
    """Stands in for a component's optimum-intel request (see the module docstring).

    Parameters
    ----------
    component
        The component's model and names.
    compiled
        This side's compile of ``component.run_model``.
    shadow
        The other side's compile (``None``: no replay), and its component's tolerance in `tolerance` (a number,
        or a function of the first call's input shapes that gives it).
    keep
        Keep a copy of each call's own outputs (`kept`): the reference's, for the free-running target to be
        compared with call by call.
    against
        The reference's kept outputs: each call's own outputs are compared with the same call's there
        (`free_errors`, the largest ``rel_l2`` of its outputs), while there is one.
    """

    def __init__(self, component: Component, compiled: Compiled, shadow: Compiled | None = None,
                 tolerance: Any = 0.0, *, keep: bool = False, against: list[list[np.ndarray]] | None = None):
        self.component = component
        self.compiled = compiled
        self.shadow = shadow
        self.tolerance = tolerance
        self.keep = keep
        self.against = against
        self.kept: list[list[np.ndarray]] = []
        self.free_errors: list[float] = []
        self.n_calls = 0
        self.calls: list[CallStats] = []
        self.worst = Worst()
        self.sequence = -1
        self._states: list[np.ndarray] | None = None
        self._last: dict[str, np.ndarray] = {}

    # the CompiledModel interface (an encoder)
    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Outputs:
        self._run(inputs)
        return Outputs(self._last)

    infer = __call__

    # the InferRequest interface (a decoder)
    def start_async(self, inputs: Any, *args: Any, **kwargs: Any) -> None:
        self._run(inputs)

    def wait(self) -> None:
        return None

    def get_tensor(self, name: str) -> SimpleNamespace:
        if name not in self._last:
            raise KeyError(f"Component '{self.component.name}' has no output '{name}' (it has {sorted(self._last)}).")
        return SimpleNamespace(data=self._last[name])

    def reset_state(self) -> None:
        self._states = None

    def _run(self, given: Any) -> None:
        component = self.component
        arrays = component.arrays(given)
        if component.stateless is not None:
            if self._states is None:
                self._states = initial_states(component.stateless, arrays)
                self.sequence += 1
                for compiled in (self.compiled, self.shadow):  # a stateful compile initialises its own variables
                    if isinstance(compiled, Stateful):
                        compiled.start()
            arrays = arrays + self._states
        elif self.n_calls == 0:
            self.sequence = 0
        outputs = [np.array(a) for a in self.compiled.infer(arrays, share_outputs=False)]
        n_own = len(component.outputs)
        if component.stateless is not None:
            self._states = outputs[n_own:]
        self._last = dict(zip(component.outputs, outputs[:n_own]))
        if self.shadow is not None:
            self._replay(arrays, outputs[:n_own])
        if self.keep:
            self.kept.append(outputs[:n_own])
        if self.against is not None and self.n_calls < len(self.against):
            pairs = zip(self.against[self.n_calls], outputs[:n_own])
            self.free_errors.append(max((compare(r, t).rel_l2 for r, t in pairs), default=0.0))
        self.n_calls += 1

    def _replay(self, arrays: list[np.ndarray], mine: list[np.ndarray]) -> None:
        theirs = self.shadow.infer(arrays, share_outputs=False)  # type: ignore[union-attr]
        if callable(self.tolerance):  # made at the first call's shapes: a dynamic export's reductions have a length there
            self.tolerance = self.tolerance({n: list(np.shape(a)) for n, a in zip(self.component.inputs, arrays)})
        errors = {name: compare(r, t) for name, r, t in zip(self.component.outputs, mine, theirs)}
        ratio = 0.0
        for stats in errors.values():
            if stats.new_nonfinite:
                ratio = math.inf
            elif self.tolerance > 0:
                ratio = max(ratio, stats.rel_l2 / self.tolerance)
        index = len(self.calls)
        self.calls.append(CallStats(index, max(self.sequence, 0),
                                    {n: tuple(a.shape) for n, a in zip(self.component.inputs, arrays)}, errors, ratio))
        if ratio > self.worst.ratio:
            self.worst = Worst(index, ratio, {n: np.array(a) for n, a in zip(self.component.inputs, arrays)})


def compile_component(device: Device, component: Component) -> Any:
    """`component` compiled on `device` as its calls run: a stateful one as it is, its variables set to each
    call's state (`bisect_ov.run.stateful.Stateful`), where the device runs stateful models that way (OpenVINO's
    plugins); otherwise its run model (the stateless form: the plugin compiles the two forms differently, so
    figures from it are a stand-in)."""
    if component.stateless is not None:
        stateful = compile_stateful(device, component.stateless)
        if stateful is not None:
            return stateful
    return device.compile(component.run_model)
