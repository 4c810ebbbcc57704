"""The judge on records, no device: one case per regime, and the invariants checked on every case.

Each case is a hand-made graph (`Topology`), the errors and tolerances a run would have measured, and what the
experiments found (local errors, rounding-only expected errors, impacts, NaN/Inf); the table says which node
the verdict must name. `_invariants` holds on every case, whatever the regime.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from bisect_ov.analysis.judge import CONCENTRATED, MOVEMENT, OWN_CONCENTRATED, SPIKE, STEPS, Evidence, Topology, judge, whole_unit
from bisect_ov.analysis.movement import carried_from, only_selects

TOL = 1e-2


def _chain(*ops: tuple[str, str]) -> Topology:
    """x -> ops in a line -> out."""
    nodes, previous = [("x", "Parameter", ())], "x"
    for key, op in ops:
        nodes.append((key, op, (previous,)))
        previous = key
    nodes.append(("out", "Result", (previous,)))
    return Topology(nodes)


def _attention() -> Topology:
    """q, k -> scores MatMul -> Softmax -> bmm MatMul (with v) -> Transpose -> Reshape -> proj MatMul -> add."""
    return Topology([
        ("x", "Parameter", ()), ("q", "MatMul", ("x",)), ("k", "MatMul", ("x",)), ("v", "MatMul", ("x",)),
        ("scores", "MatMul", ("q", "k")), ("softmax", "Softmax", ("scores",)), ("bmm", "MatMul", ("softmax", "v")),
        ("permute", "Transpose", ("bmm",)), ("view", "Reshape", ("permute",)), ("proj", "MatMul", ("view",)),
        ("add", "Add", ("proj", "x")), ("out", "Result", ("add",))])


@dataclass(frozen=True)
class Case:
    graph: Topology
    errors: dict[str, float]
    named: tuple[str, ...]  # the first divergences the verdict must give
    tolerances: dict[str, float] = field(default_factory=dict)
    outputs: tuple[tuple[float, float], ...] = ((0.2, TOL),)
    local: dict[str, float] = field(default_factory=dict)
    expected: dict[str, float] = field(default_factory=dict)
    impacts: dict[str, float] = field(default_factory=dict)
    nonfinite: frozenset[str] = frozenset()
    inside: dict[str, str] = field(default_factory=dict)
    kernel_outputs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    flips: int = 0
    rejected: bool = False
    localized: str | None = None
    roles: dict[str, str] = field(default_factory=dict)  # roles the verdict must give
    peaks: dict[str, float] = field(default_factory=dict)  # worst element's error / largest value (rel_l2: errors)
    own: dict[str, float] = field(default_factory=dict)  # worst element's error / its own size (floored at the rms)
    impacts_possible: bool = True
    whole_units: frozenset[str] = frozenset()
    max_abs: dict[str, float] = field(default_factory=dict)  # largest absolute element error

    def evidence(self) -> Evidence:
        """Only the nodes in `errors` were measured."""
        return Evidence(
            errors={(k, 0): e for k, e in self.errors.items()},
            tolerances={k: self.tolerances.get(k, TOL) for k in self.errors}, outputs=self.outputs, flips=self.flips,
            local=self.local, expected=self.expected, impacts=self.impacts, nonfinite=self.nonfinite,
            movement=frozenset(n.key for n in self.graph if n.op_type in MOVEMENT), inside_kernel=self.inside,
            kernel_outputs=self.kernel_outputs, rejected=self.rejected, localized=self.localized,
            peaks={k: (p, self.errors[k]) for k, p in self.peaks.items()},
            own_peaks={k: (p, self.errors[k]) for k, p in self.own.items()},
            steps=frozenset(n.key for n in self.graph if n.op_type in STEPS), impacts_possible=self.impacts_possible,
            whole_units=self.whole_units, max_abs=self.max_abs)


CHAIN = _chain(("conv", "Convolution"), ("relu", "Relu"), ("mul", "Multiply"), ("fc", "MatMul"))
NORM = _chain(("fc", "MatMul"), ("add", "Add"), ("pow", "Power"), ("mean", "ReduceMean"), ("sqrt", "Sqrt"),
              ("div", "Divide"))
INF = math.inf

CASES = {
    # Outputs over tolerance, one node makes the error: it is named, its consumers inherit.
    "one source": Case(CHAIN, {"relu": 0.1, "mul": 0.1, "fc": 0.11}, ("relu",),
                       roles={"mul": "inherits", "fc": "inherits"}),
    # Growth on top of inherited error: the amplifier ranks after the source.
    "amplifier": Case(CHAIN, {"relu": 0.02, "mul": 0.5, "fc": 0.5}, ("relu",), roles={"mul": "amplifier"}),
    # A Transpose after a fused attention kernel whose last MatMul has the long reduction's larger tolerance:
    # with the producer's tolerance the Transpose is within, and the kernel's member Softmax, whose local error
    # is far beyond rounding, is the origin.
    "transpose after a kernel": Case(
        _attention(), {"softmax": 0.2, "bmm": 0.06, "permute": 0.06, "view": 0.06, "proj": 0.06, "add": 0.03},
        ("softmax",), tolerances={"bmm": 0.0625, "permute": 0.0625, "view": 0.0625, "proj": 0.0625, "scores": 0.0625,
                                  "add": 0.031},
        outputs=((0.03, 0.0625),), local={"softmax": 0.2}, expected={"softmax": 3e-3},
        inside={"scores": "attn", "softmax": "attn"}, kernel_outputs={"attn": ("bmm",)}),
    # A movement op measured as a source (the kernel that produced its values stored none of its own, so the
    # movement op is where they are measured): named at the producer, which it stands for.
    "movement op looks like a source": Case(
        _chain(("ln", "MVN"), ("fc", "MatMul"), ("t", "Transpose"), ("gelu", "Gelu")),
        {"ln": 1e-3, "t": 0.05, "gelu": 0.05}, ("fc",), roles={"t": "inherits", "fc": "source"}),
    # A movement op whose measured producer is clean changed the values itself (a twin's own input before a
    # Concat): it is named.
    "movement op after a clean producer": Case(
        _chain(("fc", "MatMul"), ("cat", "Concat"), ("gelu", "Gelu")), {"fc": 0.0, "cat": 0.08, "gelu": 0.08},
        ("cat",)),
    # The same when the producer was measured too, with a long reduction's larger tolerance: named there.
    "movement op after a measured producer": Case(
        _chain(("fc", "MatMul"), ("t", "Transpose"), ("gelu", "Gelu")), {"fc": 0.05, "t": 0.05, "gelu": 0.05},
        (), tolerances={"fc": 0.06, "t": 0.06}, roles={"t": "ok", "fc": "ok", "gelu": "inherits"}),
    # A Concat of a rotary Add that was not measured (the plugin handed back the Concat's tensor for it) and of
    # a pass-through Slice of a clean projection: the error came through the Add, which is named, not the Concat
    # (a partial-rotary GPT-NeoX's fault at that Add was named at the Concat).
    "a concat of an unmeasured and a clean input": Case(
        Topology([("x", "Parameter", ()), ("q", "MatMul", ("x",)), ("rot", "Slice", ("q",)), ("mul", "Multiply", ("rot",)),
                  ("add", "Add", ("mul",)), ("pass", "Slice", ("q",)), ("cat", "Concat", ("add", "pass")),
                  ("score", "MatMul", ("cat",)), ("out", "Result", ("score",))]),
        {"q": 3e-3, "pass": 3e-3, "cat": 0.2, "score": 0.2}, ("add",), roles={"cat": "inherits"}),
    # A movement op fed by a movement op: walked up to the arithmetic node.
    "movement chain": Case(
        _chain(("fc", "MatMul"), ("mvn", "MVN"), ("split", "Split"), ("reshape", "Reshape"), ("mul", "Multiply")),
        {"fc": 1e-3, "reshape": 0.3, "mul": 0.3}, ("mvn",)),
    # An embedding lookup: a Gather of the weights (a constant) at computed indices. Nothing computes the values
    # it moves (the indices only choose them), so what it shows is its own: it is named, not the indices' op.
    "an embedding lookup": Case(
        Topology([("ids", "Parameter", ()), ("table", "Constant", ()), ("cast", "Convert", ("ids",)),
                  ("emb", "Gather", ("table", "cast")), ("scale", "Multiply", ("emb",)), ("ln", "MVN", ("scale",)),
                  ("fc", "MatMul", ("ln",)), ("out", "Result", ("fc",))]),
        {"emb": 0.2, "scale": 0.2, "ln": 0.2, "fc": 0.2}, ("emb",), tolerances={"fc": 0.04},
        outputs=((0.2, 0.04),), roles={"emb": "source", "scale": "inherits"}),
    # A Gather whose table is computed (weights decompressed by a Multiply): named at the Multiply it moves the
    # values of, not at the indices.
    "a lookup in a computed table": Case(
        Topology([("ids", "Parameter", ()), ("w", "Constant", ()), ("dq", "Multiply", ("w",)),
                  ("cast", "Convert", ("ids",)), ("emb", "Gather", ("dq", "cast")), ("ln", "MVN", ("emb",)),
                  ("out", "Result", ("ln",))]),
        {"cast": 0.0, "emb": 0.2, "ln": 0.2}, ("dq",), roles={"emb": "inherits"}),
    # Overflow: x*x gains inf from finite inputs. An impact run measured it small (the norm turns inf into 0 and
    # the branch it zeroes adds little) and the consumers inherit inf: the Power is still named, and the mean
    # is not a source of its own.
    "overflow with a small impact": Case(
        NORM, {"add": 0.02, "pow": INF, "mean": INF, "sqrt": INF, "div": 1.0}, ("pow",),
        tolerances={"add": 0.03}, nonfinite=frozenset({"pow", "mean", "sqrt"}),
        impacts={"pow": 1e-4, "fc": 0.5}, local={"pow": INF, "fc": 0.3}, roles={"mean": "inherits"}),
    # Two norms in a row, as in a Llama with massive activations: the first x*x overflows, its norm turns inf
    # into 0 (rsqrt), the residual stream stays finite and the second norm's x*x overflows again from finite
    # inputs. Its impact alone is tiny (the branch it zeroes adds little to the residual): it is an overflow
    # origin too, neither absorbed nor a bystander, and its mean inherits.
    "an overflow after a norm took one out": Case(
        Topology([("x", "Parameter", ()), ("pow1", "Power", ("x",)), ("mean1", "ReduceMean", ("pow1",)),
                  ("rs1", "Sqrt", ("mean1",)), ("norm1", "Divide", ("x", "rs1")), ("fc1", "MatMul", ("norm1",)),
                  ("res", "Add", ("x", "fc1")), ("pow2", "Power", ("res",)), ("mean2", "ReduceMean", ("pow2",)),
                  ("rs2", "Sqrt", ("mean2",)), ("norm2", "Divide", ("res", "rs2")), ("fc2", "MatMul", ("norm2",)),
                  ("res2", "Add", ("res", "fc2")), ("out", "Result", ("res2",))]),
        {"pow1": INF, "mean1": INF, "rs1": INF, "norm1": 1.0, "fc1": 1.0, "res": 2e-3, "pow2": INF, "mean2": INF,
         "rs2": INF, "norm2": 1.0, "fc2": 1.0, "res2": 0.3}, ("pow1",),
        nonfinite=frozenset({"pow1", "mean1", "rs1", "pow2", "mean2", "rs2"}), impacts={"pow1": 0.3, "pow2": 5e-5},
        local={"pow1": INF, "pow2": INF}, roles={"pow2": "source", "mean2": "inherits", "mean1": "inherits"}),
    # Overflow when every output stays within tolerance (the norm divides it away): still an origin.
    "overflow within tolerance": Case(
        NORM, {"pow": INF, "mean": INF}, ("pow",), outputs=((1e-3, TOL),), nonfinite=frozenset({"pow", "mean"}),
        local={"pow": INF}),
    # A tapped inf inside a kernel that never stores it (a fused RMS norm), whose output is clean: internal.
    "tapped inf inside a clean kernel": Case(
        NORM, {"pow": INF, "mean": INF, "div": 1e-3}, (), outputs=((1e-3, TOL),), nonfinite=frozenset({"pow", "mean"}),
        inside={"pow": "rms", "mean": "rms", "sqrt": "rms"}, kernel_outputs={"rms": ("div",)},
        roles={"pow": "internal", "mean": "internal"}),
    # Within tolerance: a node whose local error is 10x rounding's is an origin, the others are absorbed.
    "origin within tolerance": Case(
        CHAIN, {"conv": 0.03, "relu": 0.05, "mul": 0.05}, ("relu",), outputs=((5e-3, TOL),),
        local={"conv": 0.02, "relu": 0.05}, expected={"conv": 0.015, "relu": 0.005}, roles={"conv": "absorbed"}),
    # Every node within tolerance, but one makes 8x what rounding alone makes there, over half its tolerance (a
    # fault in a fused attention, one value in a thousand doubled: ViT's SDPA at 1.7e-02, rounding 2.2e-03,
    # tolerance 3.1e-02): named, not "no divergence".
    "far beyond rounding within tolerance": Case(
        CHAIN, {"conv": 4e-3, "relu": 0.018, "mul": 0.018, "fc": 0.018}, ("relu",), outputs=((3e-3, 0.031),),
        tolerances={k: 0.031 for k in ("conv", "relu", "mul", "fc")},
        local={"relu": 0.0175, "mul": 1.7e-3}, expected={"relu": 2.2e-3, "mul": 1.5e-3}),
    # The same ratio under half the tolerance, or over half the tolerance but under `EXCESS` times rounding's:
    # what the target's own kernels may do; nothing named.
    "beyond rounding, far within tolerance": Case(
        CHAIN, {"conv": 4e-3, "relu": 0.012, "mul": 0.012, "fc": 0.012}, (), outputs=((3e-3, 0.031),),
        tolerances={k: 0.031 for k in ("conv", "relu", "mul", "fc")},
        local={"relu": 0.012}, expected={"relu": 1.5e-3}),
    "over half the tolerance, near rounding": Case(
        CHAIN, {"conv": 4e-3, "relu": 0.02, "mul": 0.02, "fc": 0.02}, (), outputs=((3e-3, 0.031),),
        tolerances={k: 0.031 for k in ("conv", "relu", "mul", "fc")},
        local={"relu": 0.02}, expected={"relu": 6e-3}),
    # Within tolerance and nothing beyond rounding: no divergence, the diverged nodes absorbed.
    "absorbed rounding": Case(
        CHAIN, {"conv": 0.03, "relu": 0.03}, (), outputs=((5e-3, TOL),), local={"conv": 0.02},
        expected={"conv": 0.015}, roles={"conv": "absorbed", "relu": "absorbed"}),
    # Top-1 answers flipped over many samples: the outputs disagree, nothing is absorbed for being within.
    "flips": Case(CHAIN, {"relu": 0.1, "mul": 0.1}, ("relu",), outputs=((5e-3, TOL),), flips=2),
    # A kernel's member over tolerance whose kernel output is clean, no error of its own: internal.
    "internal": Case(
        _chain(("conv", "Convolution"), ("bias", "Add"), ("relu", "Relu")), {"bias": 0.05, "relu": 1e-3}, (),
        inside={"bias": "k"}, kernel_outputs={"k": ("relu",)}, outputs=((1e-3, TOL),), roles={"bias": "internal"}),
    # A source whose impact is tiny while another source with its own error remains: a bystander.
    "bystander": Case(
        Topology([("x", "Parameter", ()), ("a", "Relu", ("x",)), ("b", "Sigmoid", ("x",)), ("c", "Add", ("a", "b")),
                  ("out", "Result", ("c",))]),
        {"a": 0.05, "b": 0.3, "c": 0.3}, ("b",), impacts={"a": 1e-4, "b": 0.25}, local={"a": 0.05, "b": 0.3},
        outputs=((0.3, TOL),), roles={"a": "absorbed"}),
    # The same with nothing else making error of its own: the only source stays named.
    "bystander guard": Case(
        CHAIN, {"relu": 0.05, "mul": 0.05, "fc": 0.3}, ("relu",), impacts={"relu": 1e-4}, local={"relu": 0.05},
        outputs=((0.3, TOL),)),
    # Outputs over: a small-vector norm upstream grows bf16 rounding 13x (a source by growth, but alone, fed the
    # reference's inputs, within its tolerance, and alone it moves the outputs by 4% of their error), while a node
    # downstream makes error of its own that alone takes the outputs over (SK-ResNet's attention BatchNorm above a
    # faulty residual Add). The Add is named; the norm is a bystander; the Relu between, a source only once the
    # norm is set aside, makes no error of its own and is not a first divergence.
    "a dominant origin below a source by growth": Case(
        _chain(("bn", "BatchNormInference"), ("relu", "Relu"), ("add", "Add"), ("fc", "MatMul")),
        {"bn": 0.054, "relu": 0.17, "add": 0.2, "fc": 0.22}, ("add",), tolerances={k: 0.031 for k in ("bn", "relu", "add", "fc")},
        outputs=((0.22, 0.031),), local={"bn": 0.017, "relu": 9e-4, "add": 0.2}, impacts={"bn": 8e-3, "add": 0.22},
        roles={"bn": "absorbed", "add": "amplifier", "fc": "inherits"}),
    # ... while a source upstream that makes error of its own (local over its tolerance) and moves the outputs by
    # a fair share stays a first divergence beside it.
    "a dominant origin beside a source with error of its own": Case(
        _chain(("bn", "BatchNormInference"), ("relu", "Relu"), ("add", "Add"), ("fc", "MatMul")),
        {"bn": 0.054, "relu": 0.17, "add": 0.2, "fc": 0.22}, ("bn", "add"),
        tolerances={k: 0.031 for k in ("bn", "relu", "add", "fc")}, outputs=((0.22, 0.031),),
        local={"bn": 0.05, "relu": 9e-4, "add": 0.2}, impacts={"bn": 0.05, "add": 0.22}),
    # Below a dominant origin, a node whose unit ran its fused group's producer with it shows that producer's
    # error as its local error (a Convert of an integer convolution's output): named only at the producer.
    "dominant below dominant": Case(
        _chain(("conv", "Convolution"), ("to_int", "Convert"), ("fc", "MatMul")),
        {"conv": 5e-4, "to_int": 5e-4, "fc": 5e-4}, ("conv",), tolerances={"conv": 0.0, "to_int": 0.0, "fc": 0.0},
        outputs=((5e-4, 0.0),), local={"conv": 5e-4, "to_int": 5e-4}, impacts={"conv": 5e-4, "to_int": 5e-4},
        roles={"to_int": "inherits"}),
    # A dominant origin needs both: local error over its tolerance, and an impact that takes the outputs over.
    "no dominant origin without its own error": Case(
        _chain(("bn", "BatchNormInference"), ("relu", "Relu"), ("add", "Add"), ("fc", "MatMul")),
        {"bn": 0.054, "relu": 0.17, "add": 0.2, "fc": 0.22}, ("bn",), tolerances={k: 0.031 for k in ("bn", "relu", "add", "fc")},
        outputs=((0.22, 0.031),), local={"bn": 0.017, "relu": 9e-4, "add": 0.02}, impacts={"bn": 8e-3, "add": 0.22}),
    # Against another framework no impact can be measured (it cannot run pieces of the model): a faulty convolution
    # whose local error is 2e5 times its rounding-only one (two f32 implementations: its tolerance) is the origin,
    # not a Swish upstream whose summation order differs by 1.1x the 1e-6 floor and which made no error of its
    # own (an ONNX EfficientNet against ONNX Runtime). With impacts possible but none measured, nothing changes.
    "no impacts: local error far beyond rounding is the evidence": Case(
        _chain(("swish", "Multiply"), ("conv", "Convolution"), ("fc", "MatMul")),
        {"swish": 1.1e-6, "conv": 0.2, "fc": 0.2}, ("conv",), tolerances={"swish": 1e-6, "conv": 1e-6, "fc": 1e-6},
        outputs=((0.2, 1e-5),), local={"swish": 8.4e-7, "conv": 0.2}, expected={"swish": 1e-6, "conv": 1e-6},
        impacts_possible=False),
    "impacts possible, none measured": Case(
        _chain(("swish", "Multiply"), ("conv", "Convolution"), ("fc", "MatMul")),
        {"swish": 1.1e-6, "conv": 0.2, "fc": 0.2}, ("swish",), tolerances={"swish": 1e-6, "conv": 1e-6, "fc": 1e-6},
        outputs=((0.2, 1e-5),), local={"swish": 8.4e-7, "conv": 0.2}, expected={"swish": 1e-6, "conv": 1e-6}),
    # A first divergence by growth whose local error, run with all that made its value, is within its tolerance
    # adds nothing its precision does not: it amplified what it inherited, and with no other origin the outputs'
    # divergence has no single source. Between two implementations of f32: a Softmax that turns its logits' 1.3e-6
    # differences into 1.1e-5 at the outputs (over their 1e-5 floor) while, fed the reference's logits, it is
    # 1.2e-7 off (an ONNX AlexNet against ONNX Runtime); against bf16: an SE block's Swish 2.4x over what it
    # inherits, 0.06 of its tolerance alone, while the outputs are 1.4x over theirs by accumulation (EfficientNet).
    "growth without error of its own": Case(
        _chain(("fc", "MatMul"), ("add", "Add"), ("softmax", "Softmax")),
        {"fc": 1.2e-6, "add": 1.3e-6, "softmax": 1.1e-5}, (), tolerances={"fc": 1.7e-6, "add": 1e-6, "softmax": 1.7e-6},
        outputs=((1.1e-5, 1e-5),), local={"add": 4.3e-7, "softmax": 1.2e-7}, expected={"add": 1e-6, "softmax": 1.7e-6},
        impacts_possible=False, roles={"softmax": "amplifier"}, whole_units=frozenset({"add", "softmax"})),
    # ... but not when that local error ran the node without the kernel the target fused it into (a bisection
    # measures nodes one by one): the CPU's fused attention, 5.6e-3 off ONNX Runtime, has members that are exact
    # alone (MobileViT-XXS through ONNX).
    "a local error that did not run the kernel": Case(
        _chain(("fc", "MatMul"), ("add", "Add"), ("softmax", "Softmax")),
        {"fc": 1.2e-6, "add": 1.3e-6, "softmax": 1.1e-5}, ("softmax",), tolerances={"fc": 1.7e-6, "add": 1e-6, "softmax": 1.7e-6},
        outputs=((1.1e-5, 1e-5),), local={"add": 4.3e-7, "softmax": 0.0}, expected={"add": 1e-6, "softmax": 1.7e-6},
        impacts_possible=False, whole_units=frozenset({"add"})),
    # ... nor when alone on the target it takes the outputs over their tolerance with most of the final error: an
    # int8 twin's residual block whose convolution reads an activation quantized over a range an outlier channel
    # widened (the relu's quantized output 7.1e-2 off, within its tolerance; the block 0.52, 7.3x that). Run alone
    # its unit is fed the reference's unquantized values (2.1e-2); its impact run holds the input quantizer, as
    # NNCF's ignored scope removes it with the block, and gives 0.29 of the final 0.35 (a ResNet through NNCF;
    # "no single source" before, with a one-node verified fix beside it).
    "a twin's amplifier whose impact explains the outputs": Case(
        _chain(("relu", "Relu"), ("block", "Add"), ("fc", "MatMul")),
        {"relu": 7.1e-2, "block": 0.52, "fc": 0.35}, ("block",), tolerances={"relu": 0.13, "block": 0.12, "fc": 0.18},
        outputs=((0.35, 0.18),), local={"block": 2.1e-2, "fc": 4e-3}, impacts={"block": 0.29},
        whole_units=frozenset({"block", "fc"})),
    "the same amplifier whose impact is small": Case(
        _chain(("relu", "Relu"), ("block", "Add"), ("fc", "MatMul")),
        {"relu": 7.1e-2, "block": 0.52, "fc": 0.35}, (), tolerances={"relu": 0.13, "block": 0.12, "fc": 0.18},
        outputs=((0.35, 0.18),), local={"block": 2.1e-2, "fc": 4e-3}, impacts={"block": 0.05},
        whole_units=frozenset({"block", "fc"})),
    # ... and when that source sits below another source by growth that explains nothing: an int8 CNN twin's fourth
    # convolution, 8.2e-01 over inputs that carry 9.9e-03, alone quantized gives the whole final 2.2e-01; its unit
    # alone (no input quantizers) 2.4e-03. The third, a source by growth above it, has an impact of 5.2e-02 and a
    # local error within: "no single node creates the error", beside a sensitivity table that named the fourth.
    "a twin's source below another, its impact explaining the outputs": Case(
        Topology([("x", "Parameter", ()), ("c2", "Add", ("x",)), ("c3", "Add", ("c2",)), ("relu1", "Relu", ("c3",)),
                  ("add", "Add", ("relu1", "c2")), ("c4", "Add", ("add",)), ("relu2", "Relu", ("c4",)),
                  ("fc", "MatMul", ("relu2",)), ("out", "Result", ("fc",))]),
        {"c2": 2e-3, "c3": 0.96, "relu1": 0.9, "add": 9.9e-3, "c4": 0.82, "relu2": 0.72, "fc": 0.22}, ("c4",),
        tolerances={"c2": 0.08, "c3": 0.079, "relu1": 0.087, "add": 0.09, "c4": 0.097, "relu2": 0.1, "fc": 0.11},
        outputs=((0.22, 0.11),), local={"c3": 4.1e-3, "c4": 2.4e-3, "relu2": 4.3e-3}, impacts={"c4": 0.22, "c3": 0.052},
        whole_units=frozenset({"c3", "c4", "fc"})),
    # A cancellation magnifies the rounding of its own inputs: alone, in the target's precision, it is far over its
    # tolerance, and stays named (the demo's instance norm against f16).
    "growth with error of its own": Case(
        _chain(("mean", "ReduceMean"), ("sub", "Subtract"), ("sq", "Multiply")),
        {"mean": 3e-4, "sub": 0.87, "sq": 0.86}, ("sub",), tolerances={"mean": 1.4e-2, "sub": 3.9e-3, "sq": 3.9e-3},
        outputs=((0.1, 7.2e-3),), local={"sub": 0.72, "sq": 0.72}, whole_units=frozenset({"sub", "sq"})),
    # A measured impact never outranks a first divergence.
    "first ranks first": Case(
        CHAIN, {"conv": 0.1, "relu": 0.1, "mul": 0.5, "fc": 0.5}, ("conv",), impacts={"mul": 0.4, "conv": 0.01}),
    # Error accumulated through depth (all inherit), but one node's local error is 20x rounding's: named.
    "no silent no-divergence": Case(
        CHAIN, {"conv": 0.009, "relu": 0.012, "mul": 0.016, "fc": 0.02}, ("mul",),
        local={"mul": 0.1, "conv": 0.005}, expected={"mul": 0.005, "conv": 0.004}),
    # A few elements wrong within tolerance (a sparse fault: one element in a thousand doubled moves a tensor's
    # relative L2 error by ~3%, what bf16 allows one op): the worst element is off by 0.4 of the largest value,
    # 13x the relative L2 error, where its input carried 0.004. Named, though every output is within tolerance;
    # its consumer, which carries the spike on, inherits.
    "a few elements wrong": Case(
        CHAIN, {"conv": 4e-3, "relu": 0.03, "mul": 0.03, "fc": 0.03}, ("relu",), outputs=((5e-3, TOL),),
        tolerances={k: 0.031 for k in ("conv", "relu", "mul", "fc")},
        peaks={"conv": 4e-3, "relu": 0.4, "mul": 0.4, "fc": 0.3}),
    # The same spike when the outputs diverge because of it: named; the MatMul that spread it over its output
    # read a diverged input, so it amplifies, and is no first divergence.
    "a few elements wrong, outputs over": Case(
        CHAIN, {"conv": 4e-3, "relu": 0.03, "mul": 0.03, "fc": 0.2}, ("relu",),
        tolerances={k: 0.031 for k in ("conv", "relu", "mul", "fc")},
        peaks={"conv": 4e-3, "relu": 0.4, "mul": 0.4, "fc": 0.3}, roles={"fc": "amplifier", "mul": "ok"}),
    # Rounding: the worst element about as far off as the relative L2 error says (not concentrated), or off by
    # less than the tolerance allows: nothing named.
    "rounding is spread, not concentrated": Case(
        CHAIN, {"conv": 0.02, "relu": 0.02, "mul": 0.02, "fc": 0.02}, (), outputs=((5e-3, TOL),),
        tolerances={k: 0.031 for k in ("conv", "relu", "mul", "fc")},
        peaks={"conv": 0.05, "relu": 0.05, "mul": 0.04, "fc": 0.05}),
    # A few small elements doubled: off by little of the largest value (4e-3, within what rounding leaves there)
    # but by about their own size (0.5 of it plus the rms), 100x the relative L2 error: named at the node that
    # made them; what carries them on inherits.
    "a few small elements wrong": Case(
        CHAIN, {"conv": 4e-3, "relu": 5e-3, "mul": 5e-3, "fc": 6e-3}, ("relu",), outputs=((5e-3, TOL),),
        tolerances={k: 0.031 for k in ("conv", "relu", "mul", "fc")},
        peaks={"conv": 4e-3, "relu": 4e-3, "mul": 4e-3, "fc": 4e-3},
        own={"conv": 2e-2, "relu": 0.5, "mul": 0.5, "fc": 0.45}),
    # Rounding against each element's own size: the worst of many is a few times the relative L2 error (6x at
    # most in benign runs), however far over the tolerance: nothing named.
    "rounding against each element's size": Case(
        CHAIN, {"conv": 0.02, "relu": 0.02, "mul": 0.02, "fc": 0.02}, (), outputs=((5e-3, TOL),),
        tolerances={k: 0.031 for k in ("conv", "relu", "mul", "fc")},
        own={"conv": 0.01, "relu": 0.12, "mul": 0.12, "fc": 0.12}),
    # Error everywhere (bf16 rounding accumulated through a deep unfused network, each input 8x over tolerance):
    # a ReLU's few elements far off their own size are no fault's mark there, only heavier tails. Not named.
    "error everywhere, a few elements far off": Case(
        CHAIN, {"conv": 0.24, "relu": 0.265, "mul": 0.3, "fc": 0.35}, ("conv",), outputs=((0.35, TOL),),
        tolerances={k: 0.031 for k in ("conv", "relu", "mul", "fc")},
        own={"conv": 1.16, "relu": 2.82, "mul": 2.9, "fc": 3.0}, roles={"relu": "inherits"}),
    # A Pad of zeros lowers the rms its elements are measured against: their own-size error grows there, but
    # a movement op whose producer was measured adds none.
    "a movement op lowers the floor": Case(
        _chain(("fc", "MatMul"), ("pad", "Pad"), ("gelu", "Gelu")), {"fc": 4e-3, "pad": 4e-3, "gelu": 4e-3},
        (), outputs=((5e-3, TOL),), tolerances={k: 0.031 for k in ("fc", "pad", "gelu")},
        own={"fc": 0.03, "pad": 0.09, "gelu": 0.09}),
    # A fault inside a fused kernel whose output dilutes it (a scale's few wrong elements, then the residual Add the
    # CPU fused with it): the member, tapped when the group was refined, holds the wrong elements. Named there,
    # not set aside as a value the target never computed.
    "a few elements wrong inside a kernel": Case(
        _chain(("mm", "MatMul"), ("mul", "Multiply"), ("add", "Add"), ("gelu", "Gelu")),
        {"mm": 4e-3, "mul": 0.04, "add": 6e-3, "gelu": 6e-3}, ("mul",), outputs=((5e-3, TOL),),
        tolerances={"mm": 0.031, "mul": 0.031, "add": 0.031, "gelu": 0.031}, inside={"mul": "k"},
        kernel_outputs={"k": ("add",)}, own={"mm": 0.01, "mul": 0.5, "add": 0.05, "gelu": 0.05}),
    # Ops that sum products are not judged by own size: rounding bounds each of their elements by its terms'
    # magnitudes (rows of different scale, cancellation), not by the element's own (TinyViT's windowed attention
    # scores in its benign run: 34x their relative L2 error). Nor is what carries their output when they were not
    # measured (a bias Add the target fused with its MatMul).
    "a sum of products far off its own size": Case(
        _chain(("ln", "MVN"), ("mm", "MatMul"), ("bias", "Add"), ("gelu", "Gelu")),
        {"ln": 4e-3, "bias": 0.02, "gelu": 0.02}, (), outputs=((5e-3, TOL),),
        tolerances={"ln": 0.031, "bias": 0.07, "gelu": 0.031}, own={"ln": 0.01, "bias": 0.75, "gelu": 0.7}),
    # Nor are products of two varying tensors: an element's own-size error is a factor's times the other's size
    # there over its rms, so the other's tail multiplies it (a benign bf16 Llama's SwiGLU, gate times up: 0.093
    # of its own size from factors at 0.023 and 0.021).
    "a product of two varying tensors": Case(
        Topology([("x", "Parameter", ()), ("gate", "MatMul", ("x",)), ("silu", "Swish", ("gate",)),
                  ("up", "MatMul", ("x",)), ("mul", "Multiply", ("silu", "up")), ("down", "MatMul", ("mul",)),
                  ("out", "Result", ("down",))]),
        {"silu": 5.6e-3, "up": 5.5e-3, "mul": 8.1e-3, "down": 8e-3}, (), outputs=((0.013, 0.031),),
        tolerances={k: 0.031 for k in ("silu", "up", "mul", "down")},
        own={"silu": 0.0227, "up": 0.0209, "mul": 0.0933, "down": 0.02}),
    # An elementwise function of bounded slope carries its input's absolute error whatever the sizes: a Llama's
    # rotary cosine of angles up to 63 against EMU:f16, the angle rounded by up to 0.0156 (tiny against 63), the
    # cosine off by 0.0087 of its largest value 1 (8x its relative L2 error), was named "a few elements wrong".
    "a cosine of large angles": Case(
        _chain(("angle", "MatMul"), ("cos", "Cos"), ("mul", "Multiply")),
        {"angle": 9.5e-5, "cos": 1.1e-3, "mul": 1.2e-3}, (), outputs=((1.6e-3, 3.9e-3),),
        tolerances={k: 3.9e-3 for k in ("angle", "cos", "mul")}, peaks={"angle": 2.5e-4, "cos": 8.7e-3, "mul": 1e-3},
        max_abs={"angle": 0.0156, "cos": 0.0087, "mul": 0.004}),
    # ... and one that makes more absolute error than its input could give it has a fault of its own.
    "a few elements wrong at a cosine": Case(
        _chain(("angle", "MatMul"), ("cos", "Cos"), ("mul", "Multiply")),
        {"angle": 9.5e-5, "cos": 1.1e-3, "mul": 1.2e-3}, ("cos",), outputs=((1.6e-3, 3.9e-3),),
        tolerances={k: 3.9e-3 for k in ("angle", "cos", "mul")}, peaks={"angle": 2.5e-4, "cos": 0.3, "mul": 0.3},
        max_abs={"angle": 0.0156, "cos": 0.3, "mul": 0.3}),
    # ... while a Transpose keeps every value, so its rms: small elements wrong there, where its measured producer
    # holds none, are its own (a kernel that moved them wrongly).
    "a few small elements wrong at a transpose": Case(
        _chain(("fc", "MatMul"), ("t", "Transpose"), ("gelu", "Gelu")), {"fc": 4e-3, "t": 5e-3, "gelu": 5e-3},
        ("t",), outputs=((5e-3, TOL),), tolerances={k: 0.031 for k in ("fc", "t", "gelu")},
        own={"fc": 0.02, "t": 0.5, "gelu": 0.5}),
    # A movement op whose measured producer holds no wrong elements changed values itself (a fault there): named.
    "a few elements wrong at a movement op": Case(
        _chain(("fc", "MatMul"), ("t", "Transpose"), ("gelu", "Gelu")), {"fc": 4e-3, "t": 0.02, "gelu": 0.02},
        ("t",), outputs=((5e-3, TOL),), tolerances={k: 0.031 for k in ("fc", "t", "gelu")},
        peaks={"fc": 4e-3, "t": 0.3, "gelu": 0.3}),
    # ... and when its producer was not measured (a fused kernel's member), the producer is named, as rule 6 does.
    "a few elements wrong after an unmeasured producer": Case(
        _chain(("ln", "MVN"), ("fc", "MatMul"), ("t", "Transpose"), ("gelu", "Gelu")),
        {"ln": 4e-3, "t": 0.02, "gelu": 0.02}, ("fc",), outputs=((5e-3, TOL),),
        tolerances={k: 0.031 for k in ("ln", "t", "gelu")}, peaks={"ln": 4e-3, "t": 0.3, "gelu": 0.3}),
    # A step op (Round, FakeQuantize, Select) gives a whole step at the few elements within rounding of a step:
    # its nature, not a fault. A movement op carries its producer's spike: not where it starts.
    "a step op, a movement op": Case(
        _chain(("fc", "MatMul"), ("round", "Round"), ("t", "Transpose"), ("gelu", "Gelu")),
        {"fc": 4e-3, "round": 0.01, "t": 0.01, "gelu": 0.01}, (), outputs=((5e-3, TOL),),
        tolerances={k: 0.031 for k in ("fc", "round", "t", "gelu")},
        peaks={"fc": 4e-3, "round": 0.3, "t": 0.3, "gelu": 0.3}),
    # A Split taking 9 of its producer's values whose relative error is 2.25x the producer's (the part it took is
    # further off for its size), no element further off than there: it selected, it changed nothing (an
    # EfficientViM's benign bf16 run named the split). Named at the producer, as rule 6 does.
    "a split selects a part further off for its size": Case(
        _chain(("ln", "MVN"), ("conv", "Convolution"), ("split", "VariadicSplit"), ("fc", "MatMul")),
        {"ln": 0.063, "conv": 0.085, "split": 0.19, "fc": 0.64}, ("conv",),
        tolerances={"ln": 0.096, **{k: 0.056 for k in ("conv", "split", "fc")}},
        outputs=((0.082, 0.047),), max_abs={"conv": 0.03, "split": 0.02, "fc": 0.05}, roles={"split": "inherits"}),
    # ... while a Split with an element further off than anywhere in its producer changed values: named.
    "a split with an element its producer lacks": Case(
        _chain(("ln", "MVN"), ("conv", "Convolution"), ("split", "VariadicSplit"), ("fc", "MatMul")),
        {"ln": 0.01, "conv": 0.01, "split": 0.19, "fc": 0.2}, ("split",), tolerances={k: 0.056 for k in ("conv", "split", "fc")},
        outputs=((0.082, 0.047),), max_abs={"conv": 0.003, "split": 0.02, "fc": 0.05}),
    # The taps were unfaithful and partitioned runs localized a node: only it is named.
    "unfaithful, localized": Case(CHAIN, {"relu": 0.1, "mul": 0.1}, ("fc",), rejected=True, localized="fc"),
    "unfaithful": Case(CHAIN, {"relu": 0.1, "mul": 0.1}, (), rejected=True),
}


def _invariants(case: Case, verdict) -> None:
    ev = case.evidence()
    nodes = verdict.scores.nodes
    for key in verdict.first:
        if key in ev.movement:  # only where nothing computes the values it moves, or its measured producer of
            # them is clean: its values changed in between
            chain = carried_from(case.graph, key)
            if chain:
                producer = chain[0]
                assert producer in nodes, key
                assert nodes[key].error >= ev.min_growth * nodes[producer].error or key in verdict.spikes, key
                assert not only_selects(case.graph[key].op_type, ev.max_abs.get(key), ev.max_abs.get(producer)), key
        assert key in nodes or key == case.localized, f"named without being measured: {key}"
    assert verdict.ranking[:len(verdict.first)] == verdict.first, "first divergences must rank first"
    for key in verdict.overflow:
        assert nodes[key].role not in ("absorbed",) and key not in verdict.bystanders
        if nodes[key].role != "internal":
            assert key in verdict.first or any(f in case.graph.upstream(key) for f in verdict.first)
    assert not set(verdict.absorbed) & set(verdict.overflow)
    limit = min((t for _, t in ev.outputs), default=0.0)
    final = max((e for e, _ in ev.outputs), default=0.0)
    for key in verdict.dominant:  # named for error of its own that alone takes the outputs over: its local error, or
        # its measured error over inputs within (a twin's local run lacks its input quantizers; its impact holds them)
        assert key in verdict.first and (ev.local[key] > nodes[key].tolerance or (
            nodes[key].inherited <= nodes[key].tolerance < nodes[key].error and ev.impacts_possible))
        if ev.impacts_possible:
            assert ev.impacts[key] > limit and ev.impacts[key] >= 0.5 * final
        else:  # no impact can be measured: local error far beyond rounding instead
            assert ev.local[key] >= 4.0 * ev.expected[key]
        assert key not in verdict.bystanders and nodes[key].role in ("source", "amplifier")
    for key in verdict.demoted:  # not a first divergence: no error of its own, while a dominant origin is named
        assert key not in verdict.first and ev.local[key] <= nodes[key].tolerance  # (or two implementations)
    for key in verdict.first:  # makes error of its own, as far as a local error that ran all that made it can tell,
        # or alone on the target takes the outputs over their tolerance with most of the final error
        impact = ev.impacts.get(key)
        assert (key in verdict.overflow or key in verdict.spikes or key in verdict.dominant or key not in ev.whole_units
                or ev.local.get(key, math.inf) > nodes[key].tolerance
                or impact is not None and impact > limit and impact >= 0.5 * final)
    for key, s in nodes.items():
        assert s.first == (key in verdict.first)
        assert (s.rank is not None) == (key in verdict.ranking)


@pytest.mark.parametrize("name", list(CASES))
def test_the_verdict_of_each_regime(name):
    case = CASES[name]
    verdict = judge(case.graph, case.evidence())
    _invariants(case, verdict)
    assert verdict.first == case.named
    for key, role in case.roles.items():
        assert verdict.role(key) == role, f"{key}: {verdict.role(key)}, expected {role}"


def test_a_movement_op_s_error_is_named_at_its_producer_with_the_movement_op_s_numbers():
    case = CASES["movement op looks like a source"]
    verdict = judge(case.graph, case.evidence())
    assert verdict.moved == {"t": "fc"}
    fc, t = verdict.scores.nodes["fc"], verdict.scores.nodes["t"]
    assert (fc.error, fc.inherited, fc.rank) == (t.error, t.inherited, 1) and t.rank > 1


def test_an_overflow_origin_is_never_a_bystander_whatever_its_impact():
    case = CASES["overflow with a small impact"]
    for impact in (0.0, 1e-9, 1e-4):
        verdict = judge(case.graph, Evidence(**{**case.evidence().__dict__, "impacts": {"pow": impact, "fc": 0.5}}))
        assert verdict.first[0] == "pow" and "pow" not in verdict.bystanders and "pow" not in verdict.absorbed


def test_each_place_that_overflows_from_finite_inputs_is_an_overflow_origin():
    case = CASES["an overflow after a norm took one out"]
    verdict = judge(case.graph, case.evidence())
    assert verdict.overflow == ("pow1", "pow2")
    assert "pow2" not in verdict.bystanders and "pow2" not in verdict.absorbed
    assert verdict.ranking.index("pow2") < verdict.ranking.index("mean2")


def test_a_spike_is_named_only_past_each_bound_of_the_rule():
    case = CASES["a few elements wrong"]
    tol = case.tolerances["relu"]

    def first(peak_relu: float, peak_conv: float = 4e-3) -> tuple[str, ...]:
        peaks = {**case.peaks, "relu": peak_relu, "mul": peak_relu, "fc": peak_relu, "conv": peak_conv}
        return judge(case.graph, Evidence(**{**case.evidence().__dict__,
                                             "peaks": {k: (p, case.errors[k]) for k, p in peaks.items()}})).first

    err = case.errors["relu"]
    assert first(max(SPIKE * tol, CONCENTRATED * err) * 1.01) == ("relu",)
    assert first(SPIKE * tol * 0.99) == ()  # not beyond rounding at the largest value
    assert first(CONCENTRATED * err * 0.99) == ()  # not concentrated: spread like rounding
    assert first(0.4, peak_conv=0.25) == ("conv",)  # it starts upstream: relu only carries it on


def test_a_spike_against_its_own_size_is_named_only_past_each_bound_of_the_rule():
    case = CASES["a few small elements wrong"]
    tol, err = case.tolerances["relu"], case.errors["relu"]

    def first(own_relu: float, own_conv: float = 1e-2) -> tuple[str, ...]:
        own = {**case.own, "relu": own_relu, "mul": own_relu, "fc": own_relu, "conv": own_conv}
        return judge(case.graph, Evidence(**{**case.evidence().__dict__,
                                             "own_peaks": {k: (p, case.errors[k]) for k, p in own.items()}})).first

    assert first(max(SPIKE * tol, OWN_CONCENTRATED * err) * 1.01) == ("relu",)
    assert first(SPIKE * tol * 0.99) == ()  # not beyond rounding
    assert first(0.4, own_conv=0.25) == ()  # relu only carries what conv holds (conv sums products: not judged so)
    # elementwise arithmetic adds its inputs' own-size errors (a square doubles them): twice min_growth over them
    assert first(0.3, own_conv=0.3 / 4 * 1.01) == () and first(0.3, own_conv=0.3 / 4 * 0.99) == ("relu",)
    err = 0.01
    spread = {**case.errors, "relu": err}
    verdict = judge(case.graph, Evidence(**{**case.evidence().__dict__, "errors": {(k, 0): e for k, e in spread.items()},
                                            "own_peaks": {"relu": (OWN_CONCENTRATED * err * 0.99, err)}}))
    assert verdict.first == ()  # not concentrated: within what rounding's worst element reaches


def test_a_spike_is_not_judged_under_another_metric():
    case = CASES["a few elements wrong"]
    verdict = judge(case.graph, Evidence(**{**case.evidence().__dict__, "peaks": {}}))
    assert verdict.first == () and verdict.spikes == ()


def test_the_judge_is_a_pure_function_of_its_records():
    case = CASES["bystander"]
    assert judge(case.graph, case.evidence()) == judge(case.graph, case.evidence())


def test_a_local_error_speaks_for_what_its_unit_ran():
    """A node's local error covers its measured value only when its unit ran the kernel the target fused it into
    and, for an op that only moves values, the arithmetic it carries from."""
    graph = _attention()
    kernel = {"scores": "mha", "softmax": "mha", "bmm": "mha"}.get
    members = {"mha": ("scores", "softmax", "bmm")}.get
    assert whole_unit(graph, "proj", ("proj",), kernel, members)
    assert not whole_unit(graph, "bmm", ("bmm",), kernel, members)
    assert whole_unit(graph, "bmm", ("bmm", "softmax", "scores"), kernel, members)
    assert not whole_unit(graph, "view", ("view",), kernel, members)  # carries bmm's values, made in the kernel
    assert whole_unit(graph, "view", ("view", "permute", "bmm", "softmax", "scores"), kernel, members)
