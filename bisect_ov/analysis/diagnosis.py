"""Why a node diverged: what its statistics show and what pattern they suggest, as `Cause` records.

Pure functions over `TensorStats`, returning `Cause` records (`bisect_ov.core.records`): a ``kind`` that code
tests, the magnitudes behind it and the sentence a person reads. `kind_of_text` maps a sentence saved by schema
version 2 or earlier (texts only) back to its kind. Observations (always reported when present): NaN/Inf that appeared on
the target, values at the f16 limit (±65504, overflow or saturation), values at an integer type's limits,
shape mismatches. Diagnoses (for nodes where error starts or is amplified):

* overflow: the reference's values (or those of an intermediate square, exponential, sum or product) leave
  the target precision's range (f16's 65,504, bf16's 3.4e38, an integer type's limits), with the input
  magnitude that explains it ("inputs reach 400: x*x = 1.6e+05 > 65,504");
* underflow: the reference's values stay below the smallest normal number of the target precision (f16:
  6.1e-5, as after a multiply by a tiny scale), where it keeps fewer significant bits or flushes to zero;
* cancellation (subtractions and sums only): the output is much smaller than the inputs it was computed from (x - mean on data with a
  large offset, a difference of nearly equal values), so the inputs' rounding errors, small relative to the
  inputs, are large relative to the output;
* long reduction: the node sums many values (its reduction length K) and its error exceeds what the
  precision predicts for K, as when a kernel keeps its partial sums in low precision;
* otherwise, how many times over its tolerance the error is.
"""

from __future__ import annotations

import math
import re
from typing import Sequence

from bisect_ov.analysis.bodies import WITH_BODIES
from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.core.numeric import BF16_MAX, F16_MAX, F16_MIN_NORMAL
from bisect_ov.core.records import Cause

__all__ = ["observations", "diagnose", "kernel_difference", "overflow", "underflow", "concentrated", "kind_of_text", "Cause",
           "CANCELLATION_RATIO", "LONG_REDUCTION", "CANCELLING_OPS", "SPIKE", "CONCENTRATED", "OWN_CONCENTRATED", "REDUCING", "PRODUCTS",
           "LIPSCHITZ", "peak_error", "own_peak_error", "is_concentrated", "is_concentrated_own", "is_cancelling"]

# Ops whose output can be much smaller than their inputs by subtracting nearly equal values.
CANCELLING_OPS = frozenset({"Subtract", "Add", "MVN", "ReduceSum", "ReduceMean", "MatMul", "Convolution",
                            "GroupConvolution", "Einsum", "FullyConnected"})
_RANGE = {"f16": F16_MAX, "bf16": BF16_MAX}
_MIN_NORMAL = {"f16": F16_MIN_NORMAL}
_SQUARING = frozenset({"Power", "SquaredDifference", "MVN", "NormalizeL2", "ReduceL2", "ReduceSumSquare"})
_SUMMING = frozenset({"ReduceSum", "ReduceMean", "MatMul", "Convolution", "GroupConvolution", "Einsum",
                      "FullyConnected", "Add", "ScaledDotProductAttention", "Softmax"})

CANCELLATION_RATIO = 10.0  # inputs this many times larger than the output
# A few elements wrong (the judge's concentrated-error rule): rounding leaves each element within ~u of the
# tensor's largest value and the tolerance is 8u or more, so a worst element this many tolerances off (as a share
# of the largest value) is beyond what rounding leaves anywhere ...
SPIKE = 2.0
# ... and, this many times the relative L2 error, it sits in a few elements, not in all of them.
CONCENTRATED = 3.0
# Against each element's own size (`TensorStats.max_elem_rel`: |t - r| / (|r| + rms(r))), a small element doubled
# is off by about its whole value, while rounding leaves each element of an elementwise op within ~u of its own size
# plus what its inputs carried: a few times the relative L2 error (Gaussian tails), more where a sum of products'
# tail is carried on (17.5x in benign runs, docs/needle.md; the judge's growth bound keeps those out). A few
# elements are wrong when the worst is `SPIKE` tolerances off and this many times the relative L2 error.
OWN_CONCENTRATED = 10.0
# Ops that sum products: rounding bounds each element by its terms' magnitudes, which its own size does not show
# (rows of different scale, cancellation), so they are not judged against their own size.
REDUCING = frozenset({"MatMul", "Convolution", "GroupConvolution", "ConvolutionBackpropData", "Einsum", "MVN", "FullyConnected",
                      "ReduceSum", "ReduceMean", "ReduceL2", "NormalizeL2", "Softmax", "AvgPool", "ScaledDotProductAttention", "CumSum"})
# Products of two varying tensors: an element's error on the own-size scale is a factor's times the other
# factor's size there over its rms, so a factor's tail multiplies it (SwiGLU's gate times up: 4x in a benign bf16
# Llama). Like `REDUCING` ops they are left out of the own-size test.
PRODUCTS = frozenset({"Multiply", "Divide"})
# Elementwise functions of one input whose slope is bounded: |f(x + d) - f(x)| <= L |d|, so an element's error is
# at most L times its input's there, whatever either's size. A cosine of large angles (rotary embeddings at long
# positions) turns an angle's f16 rounding, tiny against the angle, into an error near zero crossings that is
# large against the cosine's own size and its largest value alike; its largest absolute error still stays
# within the angle's. By op type: the largest slope (GELU's and Swish's just above 1, HSwish's 1.5).
LIPSCHITZ = {"Sin": 1.0, "Cos": 1.0, "Tanh": 1.0, "Sigmoid": 0.25, "Erf": 1.13, "Gelu": 1.13, "Swish": 1.1,
             "Mish": 1.1, "Relu": 1.0, "Clamp": 1.0, "Abs": 1.0, "Elu": 1.0, "SoftPlus": 1.0, "SoftSign": 1.0,
             "HSigmoid": 1 / 6, "HSwish": 1.5, "Negative": 1.0, "Atan": 1.0}
LONG_REDUCTION = 64


def observations(stats: Sequence[TensorStats]) -> list[Cause]:
    """What the target's values show, whatever the node's role."""
    found = []
    new = sum(s.new_nonfinite for s in stats)
    if new:
        found.append(Cause("nonfinite", f"NaN/Inf appeared in {new:,} value(s)", {"count": new}))
    at_f16 = sum(s.at_f16_limit for s in stats)
    if at_f16:
        found.append(Cause("f16_limit", f"{at_f16:,} value(s) at or beyond the f16 limit 65504 (saturation/overflow)",
                           {"count": at_f16, "limit": F16_MAX}))
    at_int = sum(s.at_int_limit for s in stats)
    if at_int:
        found.append(Cause("int_limit", f"{at_int:,} value(s) at the integer type's limits (saturation)",
                           {"count": at_int}))
    found += [Cause("note", s.note) for s in stats if s.note]
    return found


def diagnose(
    role: str,
    error: float,
    tolerance: float,
    reduction_length: int,
    output: TensorStats | None,
    inputs: Sequence[TensorStats],
    precision: str,
    op_type: str = "",
    given: bool = False,
) -> list[Cause]:
    """The likely mechanism, for sources and amplifiers; empty for other roles. `given`: `tolerance` is the
    user's one threshold, not what `precision`'s rounding predicts (the sentences say so).

    `op_type` (the node's operation) keeps each diagnosis to the ops it fits: overflow names the square,
    exponential or sum that left the range, underflow a multiply by a tiny scale, cancellation only ops that
    subtract or sum (a multiply cannot cancel).

    Examples
    --------
    >>> from bisect_ov.analysis.metrics import compare
    >>> import numpy as np
    >>> x = np.full(8, 1000.0) + np.arange(8)
    >>> out = compare(x - x.mean(), x - x.mean() + 0.5)
    >>> diagnose("source", 0.2, 0.01, 1, out, [compare(x, x)], "bf16")[0].kind
    'cancellation'
    """
    if role not in ("source", "amplifier") or output is None:
        return []
    found = overflow(op_type, output, inputs, precision)
    if found or output.new_nonfinite:
        return found
    found = underflow(op_type, output, precision)
    if found:
        return found
    scale_in = max((s.ref_absmax for s in inputs), default=0.0)
    # Before a few elements far off: cancellation magnifies rounding most in the output's smallest elements.
    cancels = is_cancelling(op_type, scale_in, output.ref_absmax)
    found = [] if cancels else concentrated(output, tolerance, op_type, factors=len(inputs))
    if found:
        return found
    if cancels:
        ratio = scale_in / output.ref_absmax
        return [Cause(
            "cancellation",
            f"cancellation: its inputs reach {scale_in:.3g} but its output only {output.ref_absmax:.3g} "
            f"({ratio:.0f}x smaller), so the inputs' {precision} rounding is magnified (as in x - mean on data "
            "with a large offset); compute it in f32 or remove the offset earlier",
            {"input_max": scale_in, "output_max": output.ref_absmax, "ratio": ratio})]
    over = error / tolerance if tolerance > 0 else math.inf
    allowed = "the tolerance given" if given else f"what {precision} rounding predicts for that length"
    if reduction_length >= LONG_REDUCTION and math.isfinite(over):
        return [Cause(
            "long_reduction",
            f"long reduction over {reduction_length:,} values: error {over:.1f}x {allowed}, as when partial sums are "
            "accumulated in low precision; keep its accumulator in f32",
            {"reduction_length": reduction_length, "ratio": over})]
    if math.isfinite(over) and tolerance > 0:
        return [Cause("over_tolerance", f"error {over:.1f}x the tolerance "
                      + ("given" if given else f"of {precision} rounding for this op"), {"ratio": over})]
    return []


def overflow(op_type: str, output: TensorStats, inputs: Sequence[TensorStats], precision: str) -> list[Cause]:
    """The overflow that explains NaN/Inf (or values at the limit) on the target, with the magnitudes, if any."""
    limit = _RANGE.get(precision)
    if limit is None and precision in ("", None) and (output.new_nonfinite or output.at_f16_limit):
        limit = F16_MAX  # precision unknown here: the f16 limit is the one values hit
    if limit is None or not (output.new_nonfinite or output.at_f16_limit or output.target_inf):
        return []
    out, scale_in = output.ref_absmax, max((s.ref_absmax for s in inputs), default=0.0)
    name = f"{limit:,.0f}" if limit < 1e6 else f"{limit:.2g}"
    numbers = {"input_max": scale_in, "output_max": out, "limit": limit}
    if op_type in _SQUARING and scale_in * scale_in > limit:
        return [Cause("overflow", f"overflow: inputs reach {scale_in:.3g}: x*x = {scale_in * scale_in:.2g} > {name}, "
                      f"{precision or 'f16'} overflows in the square (the reference's output reaches {out:.3g}); "
                      "keep the square and its mean in f32", numbers)]
    if out > limit:
        return [Cause("overflow", f"overflow: its values reach {out:.3g} on the reference, beyond "
                      f"{precision or 'f16'}'s largest value {name}, so the target holds inf there (inputs reach "
                      f"{scale_in:.3g}); keep it in f32 or scale its inputs down", numbers)]
    if op_type in ("Exp", "Softmax", "SoftPlus", "Swish", "Sigmoid", "Gelu") and scale_in > math.log(limit):
        return [Cause("overflow", f"overflow: inputs reach {scale_in:.3g}: exp({scale_in:.3g}) > {name}, "
                      f"{precision or 'f16'} overflows in the exponential; subtract the maximum first or keep it in "
                      "f32", numbers)]
    if op_type in _SUMMING or op_type == "Multiply":
        what = "product" if op_type == "Multiply" else "sum"
        return [Cause("overflow", f"overflow: an intermediate {what} leaves {precision or 'f16'}'s range {name} "
                      f"(inputs reach {scale_in:.3g}, the reference's output {out:.3g}); accumulate it in f32",
                      numbers)]
    return []


def peak_error(stats: TensorStats) -> float | None:
    """The worst element's error as a share of the reference's largest magnitude (`max_abs / ref_absmax`); None for
    an integer or empty tensor, or one whose reference is all zeros or not finite."""
    if stats.integer or stats.numel == 0 or stats.ref_absmax <= 0 or not math.isfinite(stats.ref_absmax):
        return None
    return stats.max_abs / stats.ref_absmax


def own_peak_error(stats: TensorStats) -> float | None:
    """The worst element's error against its own size, floored at the tensor's rms (`TensorStats.max_elem_rel`);
    None where `peak_error` is, or when the report was saved before it was recorded (0.0)."""
    if peak_error(stats) is None or not stats.max_elem_rel:
        return None
    return stats.max_elem_rel


def is_cancelling(op_type: str, input_max: float, output_max: float) -> bool:
    """An op that subtracts or sums (`CANCELLING_OPS`; any op when `op_type` is not given) whose inputs reach
    `CANCELLATION_RATIO` times its output's largest magnitude (on the reference): it cancels."""
    return (not op_type or op_type in CANCELLING_OPS) and output_max > 0 and input_max > CANCELLATION_RATIO * output_max


def is_concentrated(peak: float, rel_l2: float, tolerance: float) -> bool:
    """The error sits in a few elements beyond rounding: the worst element `SPIKE` tolerances off (as a share of the
    largest value) and `CONCENTRATED` times the relative L2 error (the judge's test and the diagnosis's)."""
    return math.isfinite(peak) and tolerance > 0 and peak >= SPIKE * tolerance and peak >= CONCENTRATED * rel_l2


def is_concentrated_own(own: float, rel_l2: float, tolerance: float) -> bool:
    """The same against each element's own size (`own_peak_error`): the worst element `SPIKE` tolerances off and
    `OWN_CONCENTRATED` times the relative L2 error."""
    return math.isfinite(own) and tolerance > 0 and own >= SPIKE * tolerance and own >= OWN_CONCENTRATED * rel_l2


def concentrated(output: TensorStats, tolerance: float, op_type: str = "", factors: int = 1) -> list[Cause]:
    """A few elements wrong (`is_concentrated`, or `is_concentrated_own` for an op not in `REDUCING`, nor a
    product of `factors` >= 2 measured tensors), as a cause."""
    if op_type in WITH_BODIES:  # many ops in one node: no kernel's mark
        return []
    rel = max(output.rel_l2, 1e-30)
    own_scale = op_type not in REDUCING and not (op_type in PRODUCTS and factors >= 2)
    peak, own = peak_error(output), own_peak_error(output) if own_scale else None
    if peak is not None and is_concentrated(peak, output.rel_l2, tolerance):
        what = f"off by {peak:.2g} of the tensor's largest value, {peak / rel:.0f}x its relative L2 error"
        ratio = peak / rel
    elif own is not None and is_concentrated_own(own, output.rel_l2, tolerance):
        what = f"off by {own:.2g} of its own magnitude plus the tensor's rms, {own / rel:.0f}x its relative L2 error"
        peak, ratio = own, own / rel
    else:
        return []
    return [Cause("concentrated", f"concentrated: its worst element is {what}: a few elements are wrong, not every "
                  "element rounded (look for a wrong index, a bad lane or a race in its kernel)",
                  {"peak": peak, "rel_l2": output.rel_l2, "ratio": ratio})]


def underflow(op_type: str, output: TensorStats, precision: str) -> list[Cause]:
    """Values below the target precision's smallest normal number (subnormals lose bits, or flush to zero)."""
    tiny = _MIN_NORMAL.get(precision)
    if tiny is None or not 0 < output.ref_absmax < tiny:
        return []
    how = "a multiply by a tiny scale" if op_type == "Multiply" else f"its {op_type or 'op'}"
    return [Cause("underflow", f"underflow: its values reach only {output.ref_absmax:.2g}, below {precision}'s "
                  f"smallest normal number {tiny:.2g} (after {how}), where {precision} keeps fewer significant bits "
                  "or flushes to zero; keep it in f32 or rescale", {"output_max": output.ref_absmax, "min_normal": tiny})]


# How each kind's sentence starts (`observations`, `diagnose`, and the causes `bisect_ov.pipeline.assemble`
# adds): schema version 2 and earlier saved the sentences only.
_SAVED_KINDS = (
    (re.compile(r"(overflow|underflow|cancellation|concentrated): "), None),
    (re.compile(r"long reduction over "), "long_reduction"),
    (re.compile(r"error \S+x the tolerance (of |given)"), "over_tolerance"),
    (re.compile(r"NaN/Inf appeared in "), "nonfinite"),
    (re.compile(r"[\d,]+ value\(s\) at or beyond the f16 limit"), "f16_limit"),
    (re.compile(r"[\d,]+ value\(s\) at the integer type's limits"), "int_limit"),
    (re.compile(r"ran differently: "), "kernel_difference"),
    (re.compile(r"in the target model its inputs pass through "), "foreign_inputs"),
    (re.compile(r"(exact integer result |integer-exact on both sides)"), "exact"),
)


def kind_of_text(text: str) -> str:
    """The `Cause.kind` of a sentence saved by an older report (schema version 2 or earlier held texts only).

    Examples
    --------
    >>> kind_of_text("cancellation: its inputs reach 1.1e+03 but its output only 3.63 (302x smaller), ...")
    'cancellation'
    >>> kind_of_text("shapes differ: reference [1, 2], target [2, 1]")
    'note'
    """
    for pattern, kind in _SAVED_KINDS:
        match = pattern.match(text)
        if match:
            return kind or match.group(1)
    return "note"


def kernel_difference(runtime: dict[str, dict], same_precision: bool) -> str:
    """'ran differently: ...' when a node's kernel or precision differs between sides, else ''.

    Both sides must report runtime info. When the two sides run different precisions on purpose (f32 against
    bf16), every node differs in precision and kernel name; only a different kernel at the same runtime
    precision is then worth a mention (another ISA, as VNNI against AVX2).
    """
    ref, target = runtime.get("ref"), runtime.get("target")
    if not ref or not target:
        return ""
    kernel_differs = ref.get("kernel") != target.get("kernel")
    precision_differs = ref.get("precision") != target.get("precision")
    if not (kernel_differs or precision_differs) or (not same_precision and precision_differs):
        return ""
    return (f"ran differently: reference {ref.get('precision')} {ref.get('kernel')}, "
            f"target {target.get('precision')} {target.get('kernel')}")
