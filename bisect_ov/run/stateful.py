"""A stateful model (KV-cache variables) run as the plugin runs it, driven as its stateless form is.

Taps, pieces and emulation work on the stateless form (`bisect_ov.model.state`), but an OpenVINO plugin
compiles that form differently from the model it stands for: the CPU fuses a ReadValue, Concat and attention
into one kernel that keeps the cache in its own precision, and a T5 decoder's stateless form in bf16 failed to
run at one cache length where the stateful model ran. Where a figure should be what the user's model gives
(a generation step, a pipeline's call), the stateful model runs, its variables set before each call (`Stateful`).

Assumptions: the device's compile has ``step`` (`bisect_ov.run.openvino_device.OpenVINOCompiled`); emulated,
recorded and framework devices do not, and run the stateless form.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bisect_ov.core.errors import raise_if_interrupted
from bisect_ov.model.state import Stateless
from bisect_ov.run.device_base import Device
from bisect_ov.run.openvino_device import CACHE_PRECISION

__all__ = ["Stateful", "cache_precision", "compile_stateful", "runs_stateful", "with_cache_like"]


class Stateful:
    """A stateful model's compile driven as its stateless form is (`Compiled`): each call's inputs are its own
    then one state array per variable; the variables are set to those, the model runs as the user runs it, and
    the outputs are its own then each variable's value after the call. After `start()` (a new sequence) the next
    call resets the variables instead and the model initialises them itself, in its own precision, as a
    generation's first call does."""

    def __init__(self, compiled: Any, stateless: Stateless):
        self.compiled, self.stateless = compiled, stateless
        self.info, self.runtime = compiled.info, compiled.runtime
        self.n_outputs = stateless.n_outputs + len(stateless.variables)
        self._fresh = False

    def start(self) -> None:
        self._fresh = True

    def infer(self, inputs: Any, *, share_outputs: bool = True) -> list[np.ndarray]:
        n, given = self.stateless.n_inputs, list(inputs)
        states = None if self._fresh else dict(zip(self.stateless.variables, given[n:]))
        self._fresh = False
        outputs, after = self.compiled.step(given[:n], states)
        return [*outputs, *(after[v] for v in self.stateless.variables)]


def runs_stateful(device: Device) -> bool:
    """Whether `device` runs a stateful model as it is (an OpenVINO plugin): not an emulation, a recorded run or
    a framework, which run the stateless form."""
    return not (device.emulated or device.recorded or device.sampled or device.other_implementation)


def compile_stateful(device: Device, stateless: Stateless) -> Stateful | None:
    """The stateful model `stateless` was made from (`Stateless.source`) compiled on `device` as it is and driven
    as `stateless` (`Stateful`); None where the device runs no stateful model that way (an emulation, a recorded
    run, a framework): those run the stateless form."""
    if stateless.source is None or not runs_stateful(device):
        return None
    compiled = device.compile(stateless.source)
    return Stateful(compiled, stateless) if hasattr(compiled, "step") else None


def cache_precision(compiled: Any) -> str | None:
    """The precision the plugin keeps a `Stateful` compile's KV cache in (``KV_CACHE_PRECISION``: ``f16``,
    ``u8``, ...), None where it does not say."""
    plugin = getattr(getattr(compiled, "compiled", None), "compiled", None)
    if plugin is None:
        return None
    try:
        value = plugin.get_property(CACHE_PRECISION)
    except Exception as err:
        raise_if_interrupted(err)
        return None
    return str(value.get_type_name() if hasattr(value, "get_type_name") else value)


def with_cache_like(device: Device, stateless: Stateless, compiled: Any, reference: str | None
                    ) -> tuple[str, Stateful] | None:
    """`stateless`'s stateful model compiled again on `device` with its KV cache kept in the `reference`'s
    precision (the precision its cache is kept in, or its activations' where it keeps none), when `compiled` (its
    `Stateful` compile there) keeps the cache in another and the device has the setting: the setting's text (with
    the precision it replaces) and the compile; None otherwise.

    Raises
    ------
    DeviceError
        When the plugin refuses that precision.
    """
    have = cache_precision(compiled)
    if have is None or reference is None or have == reference:
        return None
    changed = device.with_cache_precision(reference)
    again = compile_stateful(changed, stateless) if changed is not None else None
    return (f"{CACHE_PRECISION}={reference} (the reference's; the target's was {have})", again) if again is not None else None
