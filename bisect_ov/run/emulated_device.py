"""The emulated low-precision device: f16 or bf16 numbers on the CPU, anywhere (``EMU:f16``, ``EMU:bf16-acc``).

`EmulatedDevice` is an `OpenVINODevice` on the CPU in f32 whose compile first rewrites the model
(`bisect_ov.run.emulate.emulate_precision`, imported only when used): activations and weights are rounded to
the low precision at every op boundary, and with ``reductions`` long reductions accumulate in it too.

Assumed: the OpenVINO CPU plugin is available; the emulated model holds Python custom ops, so it is never
saved or handed on, and its infer requests share one interpreter (the GIL).
"""

from __future__ import annotations

import weakref
from dataclasses import replace

import openvino as ov

from bisect_ov.core.errors import DeviceError, InputError
from bisect_ov.core.records import DeviceInfo
from bisect_ov.run import pyops
from bisect_ov.run.device_base import Device
from bisect_ov.run.openvino_device import OpenVINOCompiled, OpenVINODevice

__all__ = ["EmulatedDevice"]


class EmulatedDevice(OpenVINODevice):
    """A low-precision device emulated on the CPU in f32: see `bisect_ov.run.emulate`.

    Every floating activation (and weight) is rounded to `precision` at each op boundary; with
    `reductions`, Softmax, ReduceSum, ReduceMean, MVN, MatMul and ScaledDotProductAttention also accumulate
    in the low precision over `lanes` partial sums. Real GPU or NPU kernels differ in fusion and
    accumulation order: the report marks results of this device as emulated.

    The model is emulated inside `compile`, so callers hand over and get back plain models and arrays; the
    emulated model holds Python custom ops and is never saved or handed on. Those ops run numpy under the
    GIL: infer requests of one emulated compile running in parallel threads share one interpreter.
    """

    emulated = True

    def __init__(self, precision: str = "f16", *, reductions: bool = False, lanes: int = 16, name: str | None = None):
        if precision not in ("f16", "bf16"):
            raise InputError(f"Emulated precision '{precision}' is not supported. Use 'f16' or 'bf16'.")
        if not isinstance(lanes, int) or lanes < 1:
            raise InputError(f"lanes must be a positive integer (parallel partial sums of a reduction); got {lanes!r}.")
        default = f"EMU:{precision}" + (f"-acc{lanes if lanes != 16 else ''}" if reductions else "")
        super().__init__("CPU", {"INFERENCE_PRECISION_HINT": "f32"}, name=name or default)
        self.precision = precision
        self.reductions = reductions
        self.lanes = lanes
        self.activation_scale: float | None = None

    def repro_side(self, info: DeviceInfo, role: str) -> dict:
        """The CPU in f32 running the piece with the rounding written in opset ops
        (`bisect_ov.run.emulate_ir.saveable_emulation`: accumulation in the low precision for Softmax, ReduceSum
        and ReduceMean; a piece holding another accumulating op is refused when it is written)."""
        if type(self)._compile is not EmulatedDevice._compile or self.activation_scale is not None:
            return Device.repro_side(self, info, role)
        return {"device": "CPU", "config": {"INFERENCE_PRECISION_HINT": "f32"}, "emulated": self.precision,
                "lanes": self.lanes if self.reductions else None}

    @property
    def honours_precision_marks(self) -> bool:
        return True  # `emulate_precision` leaves marked ops unrounded

    def without_generated_kernels(self) -> None:
        """None: the emulation's kernels are its rewrite of the model, not a plugin's choice."""
        return None

    def without_activation_quantization(self) -> None:
        """None: the emulation computes every product in f32 from its rounded values."""
        return None

    def with_activation_scale(self, factor: float) -> "EmulatedDevice | None":
        """This emulated device applying the activation scaling a GPU applies for ``ACTIVATIONS_SCALE_FACTOR``
        (`bisect_ov.model.scaling`, written from the plugin's documented behaviour) before rounding; None for
        bf16, whose range is f32's (the plugin scales f16 only)."""
        if self.precision != "f16":
            return None
        from bisect_ov.model.scaling import SCALE_FACTOR_PROPERTY

        scaled = EmulatedDevice(self.precision, reductions=self.reductions, lanes=self.lanes,
                                name=f"{self.name} ({SCALE_FACTOR_PROPERTY}={factor:g}, emulated)")
        scaled.activation_scale = float(factor)
        return scaled

    def _compile(self, model: ov.Model, taps: tuple[int, ...] = (), fed: tuple[int, ...] = (), *,
                 extra: dict[str, str] | None = None) -> OpenVINOCompiled:
        from bisect_ov.run.emulate import emulate_precision  # the rewrite is heavy to import only when used

        if self.activation_scale is not None:
            from bisect_ov.model.scaling import scale_activations

            model = scale_activations(model, self.activation_scale)
        with pyops.collecting() as made:  # freed with the compile (`bisect_ov.run.pyops`)
            try:
                compiled, without = self._compile_emulated(
                    emulate_precision(model, self.precision, reductions=self.reductions, lanes=self.lanes), extra)
            except BaseException:
                pyops.release(made)
                raise
        weakref.finalize(compiled.compiled, pyops.release, made).atexit = False  # at exit the process frees all
        acc = (f"reductions accumulate in {self.precision} over {self.lanes} lane(s)" if self.reductions
               else "ops accumulate in f32")
        compiled.info = replace(
            compiled.info, precision=self.precision, requested_precision=self.precision, emulated=True,
            note=f"emulated on the CPU: values rounded to {self.precision} between ops; {acc}{without}",
            precision_counts={},
        )
        return compiled

    def _compile_emulated(self, emulated: ov.Model, extra: dict[str, str] | None) -> tuple[OpenVINOCompiled, str]:
        """Compile the emulated model in f32; the note on a retry without snippets (empty when none ran)."""
        # Runs in f32 and rounds at every boundary itself: tap outputs stay f32.
        without = ""
        try:
            compiled = super()._compile(emulated, extra=extra)
        except DeviceError as err:
            if "SNIPPETS_MODE" in {**self.config, **(extra or {})}:
                raise
            # The CPU plugin's snippets pass (which fuses elementwise chains) fails on some rewritten graphs:
            # "Topological order is required, but not set" at a Select fed by an attention mask's subgraph, in
            # an ONNX export of MobileBERT. Without snippets the same ops run unfused, in f32 all the same.
            try:
                compiled = super()._compile(emulated, extra={**(extra or {}), "SNIPPETS_MODE": "DISABLE"})
            except DeviceError:
                raise err from None
            without = f"; compiled without the CPU plugin's snippets (SNIPPETS_MODE=DISABLE): with them, {err}"
        return compiled, without
