"""Part of the report's view (`bisect_ov.report.view`): what each side ran with (`Side`) and the tolerance
model as shown (`ToleranceFacts`), each with the numbers code reads and the line people read (``text``)."""

from __future__ import annotations

from dataclasses import dataclass

from bisect_ov.core.records import DeviceInfo, ToleranceInfo

__all__ = ["Side", "ToleranceFacts", "side", "tolerance_facts"]


@dataclass(frozen=True)
class Side:
    """What one side ran with: `role` ``ref``/``target``, `title` ``Reference``/``Target``, the precision that ran
    and the one asked for (`requested`), emulated or `recorded` (a saved run), the hardware, the device's note,
    runtime ops by precision (`kernels`) and the compile config, and for AUTO/HETERO/MULTI the devices that
    really ran (`execution_devices`); `text` says it in a line."""

    role: str
    title: str
    device: str
    label: str
    precision: str
    requested: str | None
    emulated: bool
    recorded: bool
    hardware: str
    note: str
    kernels: tuple[tuple[str, int], ...]
    config: tuple[tuple[str, str], ...]
    text: str
    execution_devices: tuple[str, ...] = ()  # AUTO/HETERO/MULTI: the devices that really ran

    @property
    def substituted(self) -> str | None:
        """The precision asked for when another one ran (the device could not run it), else None."""
        return self.requested if self.requested not in (None, self.precision) else None


@dataclass(frozen=True)
class ToleranceFacts:
    """The tolerance model as shown: `model` ``fixed`` (one threshold, `value`) or ``rounding`` (`factor` x the
    unit roundoff of `precision`, at least `floor`), the per-node overrides and the twin's quantized nodes
    (counts), the quantization factor and the growth a source needs; `text` says it all in a line."""

    model: str
    precision: str | None
    factor: float
    floor: float
    value: float | None
    per_node: int
    quantized: int
    quant_factor: float
    min_growth: float
    text: str



def side(role: str, info: DeviceInfo) -> Side:
    """What one side ran with (see `Side`)."""
    text = f"{info.name} ran {info.precision}"
    if info.requested_precision not in (None, info.precision):
        text += f" (asked for {info.requested_precision})"
    if info.emulated:
        text += " (emulated)"
    if info.execution_devices:
        text += f" on {', '.join(info.execution_devices)}" + (f" ({info.full_name})" if info.full_name else "")
    elif info.full_name:
        text += f" on {info.full_name}"
    if info.note:
        text += f" [{info.note}]"
    return Side(role=role, title="Reference" if role == "ref" else "Target", device=info.name, label=info.label,
                precision=info.precision, requested=info.requested_precision, emulated=info.emulated,
                recorded=info.recorded, hardware=info.full_name, note=info.note,
                kernels=tuple((str(k), int(v)) for k, v in (info.precision_counts or {}).items()),
                config=tuple((str(k), str(v)) for k, v in (info.config or {}).items()), text=text,
                execution_devices=tuple(info.execution_devices))


def tolerance_facts(t: ToleranceInfo) -> ToleranceFacts:
    """The tolerance model as one line (see `ToleranceFacts`)."""
    if t.value is not None:
        text = f"fixed {t.value}"
    else:
        text = f"{t.factor} x unit roundoff of {t.precision} x (1 + log2(K)/4), floor {t.floor}"
    if t.per_node:
        text += f"; {len(t.per_node)} per-node override(s)"
    if t.quantization:
        text += (f"; twin: {t.quant_factor} x the expected quantization error at {len(t.quantization)} nodes (bits, "
                 "group size, reduction length)")
    text += f"; a source needs growth >= {t.min_growth}"
    return ToleranceFacts(model="fixed" if t.value is not None else "rounding", precision=t.precision,
                          factor=t.factor, floor=t.floor, value=t.value, per_node=len(t.per_node),
                          quantized=len(t.quantization), quant_factor=t.quant_factor, min_growth=t.min_growth,
                          text=text)
