"""Match the nodes of a model with those of its twin (an int8 or f16 version, or the model after a change).

Nodes match by friendly name first, then by output tensor name (ONNX names survive conversion, so a twin
converted separately still matches). Only compute nodes are matched; those left over on either side are
returned so the report can list them: nothing is dropped silently.

A quantized twin (NNCF) holds ops its model lacks: FakeQuantize on activations and weights, weight
decompression subgraphs, f16 weight Converts (`bisect_ov.model.quantized`). They are the twin's quantization
of a matched node, not unmatched nodes: each matched node records its `Quantization`, and a node whose output
the twin quantizes (``<name>/fq_output_0``) is compared at that quantized output, the tensor the twin's fused
int8 kernel really produces (tapping the raw output instead would split the kernel). Two maps come out:

* `Match.pairs`: reference tap -> target tap *compared* (the quantized output where there is one);
* `Match.ops`: reference op -> the twin's op itself, for running pieces of the twin in place of pieces of the
  model (partitioned runs): the quantizers on a node's inputs then go with that node, as NNCF's ignored
  scope removes them with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from bisect_ov.model.graph import LAYOUT_OPS, ModelGraph
from bisect_ov.model.quantized import Quantization, activation_quantizers, find_quantization, is_weight_quantizer
from bisect_ov.model.taps import Tap

__all__ = ["Match", "match_nodes", "identity_match", "foreign_inputs"]



@dataclass(frozen=True)
class Match:
    """Pairs of tensors (reference tap, target tap) and the nodes left unmatched on each side."""

    pairs: tuple[tuple[Tap, Tap], ...]
    unmatched_ref: tuple[str, ...]
    unmatched_target: tuple[str, ...]
    ops: tuple[tuple[str, str], ...] = ()  # reference op key -> the twin's op key (empty: one model)
    quantized: dict[str, Quantization] = field(default_factory=dict)  # by reference key
    quantizers: tuple[str, ...] = ()  # the twin's ops recognised as its quantization (keys)

    def coverage(self, ref: ModelGraph) -> float:
        """Share of `ref`'s compute nodes with a counterpart to compare."""
        compute = {n.key for n in ref.candidates()}
        return len({r.key for r, _ in self.pairs} & compute) / max(1, len(compute))

    def target_op(self) -> dict[str, str]:
        """Reference op key -> the twin's op key (every matched op; the identity for one model)."""
        return dict(self.ops) if self.ops else {r.key: t.key for r, t in self.pairs}


def identity_match(graph: ModelGraph) -> Match:
    """Every candidate tensor matched with itself (both sides run the same model)."""
    pairs = tuple((Tap(n.key, t.port), Tap(n.key, t.port)) for n in graph.candidates() for t in n.outputs)
    return Match(pairs, (), ())


def match_nodes(ref: ModelGraph, target: ModelGraph) -> Match:
    """Match candidates of `ref` with candidates of `target` by friendly name, then by tensor name.

    The twin's quantizers are recognised (see the module docstring): each matched node's output is compared
    after the FakeQuantize that quantizes it, when the twin has one.
    """
    op_pairs: list[tuple[str, str]] = []
    used: set[str] = set()
    unmatched_ref: list[str] = []
    for node in ref.candidates():
        other = target[node.key] if node.key in target and target[node.key].is_candidate else None
        if other is not None and other.key not in used:
            used.add(other.key)
            op_pairs.append((node.key, other.key))
            continue
        found = False
        for t in node.outputs:
            for name in t.names:
                hit = target.lookup_tensor(name)
                if hit is not None and target[hit[0]].is_candidate and hit[0] not in used:
                    op_pairs.append((node.key, hit[0]))
                    used.add(hit[0])
                    found = True
                    break
            if found:
                break
        if not found:
            unmatched_ref.append(node.key)
    unmatched_ref = [ref[k].name for k in _by_structure(ref, target, unmatched_ref, op_pairs, used)]
    quantized_out = activation_quantizers(target)
    by_target = find_quantization(target)
    pairs: list[tuple[Tap, Tap]] = []
    quantizers: set[str] = set()
    for ref_key, target_key in op_pairs:
        node, other = ref[ref_key], target[target_key]
        fq = [k for k in quantized_out.get(target_key, []) if k not in used]
        for port in range(min(len(node.outputs), len(other.outputs))):
            # Compared at the quantized output: what the twin's fused kernel produces and its readers read.
            at = next((k for k in fq if target[k].inputs[0] == (target_key, port)), None)
            pairs.append((Tap(ref_key, port), Tap(at, 0) if at is not None else Tap(target_key, port)))
            if at is not None:
                quantizers.add(at)
        if target_key in by_target:
            quantizers.update(by_target[target_key].ops)
    # A quantization the model has too (both stored their weights in f16, say) is no difference between them.
    by_ref = find_quantization(ref) if by_target else {}
    quantized = {r: by_target[t] for r, t in op_pairs if t in by_target and not _same(by_ref.get(r), by_target[t])}
    # Quantizers of model inputs are the quantization of the ops that read them.
    for q in by_target.values():
        quantizers.update(q.ops)
    # Weights compressed where no compute op reads them directly (a constant of a shape computation).
    quantizers.update(n.key for n in target if n.key not in ref and is_weight_quantizer(target, n.key))
    unmatched_target = [n.name for n in target.candidates() if n.key not in used and n.key not in quantizers]
    # Ops on constants only (FakeQuantize or Convert of weights) change values too: list those the model lacks
    # and that are no recognised quantization.
    ref_of = {t: r for r, t in op_pairs}
    unmatched_target += [n.name for n in target if n.kind == "static" and n.key not in ref and n.key not in quantizers
                         and n.op_type not in LAYOUT_OPS and any(t.is_float for t in n.outputs)
                         and not _static_in_ref(ref, target, n.key, ref_of)]
    unmatched_target += _extra_outputs(ref, target, dict(pairs))
    twin_ops = tuple(op_pairs) if target is not ref else ()
    return Match(tuple(pairs), tuple(unmatched_ref), tuple(unmatched_target), twin_ops, quantized,
                 tuple(sorted(quantizers, key=lambda k: target[k].index)))


def _by_structure(ref: ModelGraph, target: ModelGraph, unmatched: list[str], op_pairs: list[tuple[str, str]],
                  used: set[str]) -> list[str]:
    """Pair the `unmatched` nodes of `ref` (keys) whose names OpenVINO made up with the one unused node of
    `target` of the same op type, its name made up too, that reads the counterparts of what they read, in graph
    order (so a chain pairs node after node); returns those left unmatched. Made-up names come from a
    process-wide counter (``MVN_528`` in one load, ``MVN_2259`` in the next): the same file loaded twice matched
    by name only partly. Names someone gave are not second-guessed: a node renamed in the twin stays unmatched."""
    if not unmatched:
        return unmatched
    mapped = dict(op_pairs) | {p.key: p.key for p in ref.parameters() if p.key in target}
    free: dict[tuple, list[str]] = {}
    for node in target.candidates():
        if node.key not in used and node.auto_named:
            free.setdefault((node.op_type, tuple(target.data_inputs(node.key))), []).append(node.key)
    left = []
    for key in unmatched:
        reads = ref.data_inputs(key)
        hits = (free.get((ref[key].op_type, tuple((mapped[k], p) for k, p in reads)), [])
                if ref[key].auto_named and reads and all(k in mapped for k, _ in reads) else [])
        if len(hits) != 1:
            left.append(key)
            continue
        mapped[key] = hits.pop()
        used.add(mapped[key])
        op_pairs.append((key, mapped[key]))
    return left


def _same(mine, theirs) -> bool:
    """Whether two ops' quantizations are the same (their ops aside)."""
    return mine is not None and replace(mine, ops=()) == replace(theirs, ops=())


def _static_in_ref(ref: ModelGraph, target: ModelGraph, key: str, ref_of: dict[str, str]) -> bool:
    """Whether the model has the twin's op on constants `key` where the twin has it: an op of the same type at the
    same input of a matched reader (an unnamed one's made-up name differs from load to load)."""
    for reader in target.consumers(key):
        if reader in ref_of:
            ports = [i for i, (k, _) in enumerate(target[reader].inputs) if k == key]
            inputs = ref[ref_of[reader]].inputs
            if any(i < len(inputs) and ref[inputs[i][0]].op_type == target[key].op_type for i in ports):
                return True
    return False


def _extra_outputs(ref: ModelGraph, target: ModelGraph, target_of: dict[Tap, Tap]) -> list[str]:
    """The twin's outputs the model has no counterpart for (none reads a matched tensor or has the name of one of the
    model's outputs, and the twin has more outputs): they are run but not compared, and listed as unmatched."""
    ref_results, target_results = ref.results(), target.results()
    if len(target_results) <= len(ref_results):
        return []  # as many outputs: unmatched ones pair by position (`engine.comparison`)
    compared = {target_of.get(Tap(*r.inputs[0])) for r in ref_results}
    names = {ref.output_name(r.key) for r in ref_results}
    return [f"output '{target.output_name(r.key)}' (not compared: the model has no such output)" for r in target_results
            if Tap(*r.inputs[0]) not in compared and target.output_name(r.key) not in names]


def foreign_inputs(match: Match, target: ModelGraph, target_key: str) -> list[str]:
    """Ops the target model runs between a matched node and its matched producers (e.g. an injected fault).

    The twin's recognised quantizers (FakeQuantize, weight decompression) are its quantization, not listed here.
    """
    # A matched op counts by its own key as well as its tap's: a twin compares a quantized output after its
    # FakeQuantize, and the op itself (and readers of its unquantized output) is not foreign for that.
    matched = {t.key for _, t in match.pairs} | {t for _, t in match.ops} | set(match.quantizers)
    between = target.upstream(target_key, data_only=False, include_self=False,
                              stop=lambda k: k in matched or target[k].kind in ("parameter", "constant"))
    # Nearest first: the op right in front of the node is what a reader looks for.
    return [f"'{target[k].name}' ({target[k].op_type})" for k in sorted(between, key=lambda k: -target[k].index)
            if target[k].kind in ("compute", "static") and target[k].op_type not in LAYOUT_OPS]
