"""Matching a PyTorch eager run to the walked OpenVINO graph, by the names the PyTorch frontend gives.

A traced conversion (``ov.convert_model(module, example_input=...)``) names each op after the module whose
forward called the aten op it comes from: ``__module.encoder.layer.0.attention.output.dense/aten::linear/MatMul``
(ops of the root module: ``aten::mean/ReduceMean``). One aten call may become several OpenVINO ops (``linear``:
MatMul and Add), which share the label (module path, aten op); several calls of one op in one module share it
too (the three ``aten::view`` of query, key and value), so a label alone does not say which call a node is.

The eager run is recorded as `Event` s: each top-level torch call with the module it ran in, the op, which
earlier events (or model inputs) its tensor arguments came from, and its outputs' shapes. On the OpenVINO side,
connected nodes of one label form one *call* (`ov_calls`), whose value leaves it at an *exit*. `match_events`
walks the events in execution order and pairs each with the unused OpenVINO call of the same label whose
inputs come from the calls its own inputs were paired with (and of the same output shape): the query's view
reads the query projection, the key's view the key projection. Events with no OpenVINO call (a dropout, a
``contiguous``) and calls with no event (a Convert) are looked through, so what each reads is the nearest
paired value upstream. `match_modules` pairs, for what that leaves, a module's output (forward hooks) with the
one value leaving the module's ops that has its shape. `match_neighbours` pairs what no name places (an op the
conversion renamed, such as a convolution with its BatchNorm folded in, ``Multiply_<n>``) through a paired op
that reads it: its one unpaired input is its event's one unpaired input.

Pure functions of the walked graph and the events: no torch, no OpenVINO. Assumes the events come in
execution order, so an event's inputs come before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.taps import Tap

__all__ = ["Event", "ModuleOutput", "ov_label", "ov_calls", "normalize_op", "match_events", "match_modules",
           "match_neighbours", "exported_label"]

_TRACED = re.compile(r"^(?:__module(?:\.(?P<module>[^/]+))?/)?aten::(?P<op>[A-Za-z0-9_]+)(?:/|$)")
_EXPORTED = re.compile(r"^(?P<call>[A-Za-z_][A-Za-z0-9_]*)/aten\.[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?(?:/|$)")
# What torch calls an op in Python against what a trace records (normalised: no leading or trailing '_').
_ALIASES = {
    "conv1d": ("convolution",), "conv2d": ("convolution",), "conv3d": ("convolution",),
    "conv_transpose1d": ("convolution",), "conv_transpose2d": ("convolution",), "iadd": ("add",),
    "radd": ("add",), "rmul": ("mul",), "imul": ("mul",), "truediv": ("div",), "rtruediv": ("div",),
    "isub": ("sub",), "floordiv": ("floor_divide",), "rpow": ("pow",), "matmul": ("matmul",),
    "getitem": ("slice", "select", "index", "unsqueeze"), "max_pool2d": ("max_pool2d", "max_pool2d_with_indices"),
    "avg_pool2d": ("avg_pool2d",), "softmax": ("softmax",), "log_softmax": ("log_softmax",),
}

# A value of the eager run: ("event", event index, output index) or ("input", position).
Ref = tuple


@dataclass(frozen=True)
class Event:
    """One top-level torch call of the eager run: where it ran, what it read, what it made."""

    index: int
    module: str  # module path ("" for the root module)
    op: str  # the torch function's name (``linear``, ``__add__``, ``view``)
    inputs: tuple[Ref, ...]  # the recorded values its tensor arguments are
    shapes: tuple[tuple[int, ...], ...]  # of its tensor outputs
    bias: bool = False  # a convolution or linear call given a nonzero bias: its value holds the bias


# OpenVINO ops that a biased torch call becomes without its bias (the Add after them is the bias): when the
# conversion merged that Add into a later one (``conv(x) + 1000``) or folded a BatchNorm in, such an op alone is
# not the torch call's value.
UNBIASED = frozenset({"Convolution", "GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData",
                      "MatMul"})


def _bias_lost(graph: ModelGraph, keys: Sequence[str], event: Event | None) -> bool:
    """`event` has a bias and none of the ops `keys` adds it."""
    return event is not None and event.bias and not any(graph[k].op_type not in UNBIASED for k in keys)


@dataclass(frozen=True)
class ModuleOutput:
    """One output tensor of one module call (a forward hook), and the recorded value it is."""

    call: int  # the module call's position among all module calls
    module: str
    position: int
    value: Ref
    shape: tuple[int, ...]


def normalize_op(name: str) -> str:
    """An op name without leading or trailing underscores: ``__add__`` -> ``add``, ``_convolution`` -> ``convolution``."""
    return name.strip("_")


def _names_for(op: str) -> tuple[str, ...]:
    op = normalize_op(op)
    return _ALIASES.get(op, (op,))


def ov_label(name: str) -> tuple[str, str] | None:
    """(module path, aten op) of a traced-conversion op name, or None.

    >>> ov_label("__module.encoder.layer.0.output.dense/aten::linear/MatMul")
    ('encoder.layer.0.output.dense', 'linear')
    >>> ov_label("aten::mean/ReduceMean")
    ('', 'mean')
    >>> ov_label("conv2_1/Add") is None
    True
    """
    m = _TRACED.match(name)
    if m is None:
        return None
    return m["module"] or "", normalize_op(m["op"])


def exported_label(name: str) -> str | None:
    """The ``torch.export`` graph node an op comes from (``linear_6/aten.linear.default/MatMul`` -> ``linear_6``)."""
    m = _EXPORTED.match(name)
    return m["call"] if m else None


@dataclass(frozen=True)
class OVCall:
    """Connected OpenVINO ops of one label (of different op types): one aten call, as far as the names tell."""

    label: tuple[str, str]
    members: tuple[str, ...]  # keys, topological order
    exits: tuple[Tap, ...]  # values read outside the call (or model outputs)
    inputs: tuple[tuple[str, int], ...]  # values it reads from outside


def ov_calls(graph: ModelGraph) -> list[OVCall]:
    """The traced-name calls of `graph` (see the module docstring), in topological order."""
    labels = {n.key: ov_label(n.name) for n in graph.candidates()}
    parent = {k: k for k, v in labels.items() if v is not None}

    def root(k: str) -> str:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for key in parent:
        for src, _ in graph.data_inputs(key):
            # One call's ops are connected ops of one label; two of one label and one op type reading one another
            # are two calls of that label (a block's two residual Adds, when its other calls are modules of their
            # own), not one decomposed.
            if src in parent and labels[src] == labels[key] and graph[src].op_type != graph[key].op_type:
                a, b = root(src), root(key)
                if a != b:
                    parent[max(a, b, key=lambda k: graph[k].index)] = min(a, b, key=lambda k: graph[k].index)
    groups: dict[str, list[str]] = {}
    for key in graph.order:
        if key in parent:
            groups.setdefault(root(key), []).append(key)
    readers: dict[tuple[str, int], list[str]] = {}
    for node in graph:
        for source in node.inputs:
            readers.setdefault(source, []).append(node.key)
    calls = []
    for members in groups.values():
        inside = set(members)
        exits = [Tap(k, t.port) for k in members for t in graph[k].outputs
                 if any(r not in inside for r in readers.get((k, t.port), ()))]
        inputs = [(s, p) for k in members for s, p in graph.data_inputs(k) if s not in inside]
        label = labels[members[0]]
        assert label is not None
        calls.append(OVCall(label, tuple(members), tuple(exits), tuple(dict.fromkeys(inputs))))
    return calls


def _shape_fits(shape: tuple[int, ...] | None, wanted: tuple[int, ...]) -> bool:
    return shape is None or tuple(shape) == tuple(wanted)


def match_events(graph: ModelGraph, events: Sequence[Event], shapes: Mapping[Tap, tuple[int, ...]]
                 ) -> tuple[dict[Tap, Ref], set[str]]:
    """Pair the eager run's events with the graph's traced-name calls (see the module docstring).

    Parameters
    ----------
    graph
        The walked OpenVINO model.
    events
        The eager run, in execution order.
    shapes
        The graph's tensor shapes for the inputs the events were recorded with (unknown ones are not checked).

    Returns
    -------
    tuple of (dict, set)
        OpenVINO tap -> the event output it is (``("event", i, j)``), and the keys of every node inside a
        paired call (what the comparison covers through the call's exit).
    """
    calls = ov_calls(graph)
    call_of = {k: i for i, c in enumerate(calls) for k in c.members}
    by_label: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(calls):
        by_label.setdefault(c.label, []).append(i)
    paired_call: dict[int, int] = {}  # OV call -> event
    paired_event: dict[int, int] = {}  # event -> OV call
    event_at = {e.index: e for e in events}

    def ov_rep(src: str, port: int, memo: dict) -> frozenset:
        if (src, port) in memo:
            return memo[(src, port)]
        memo[(src, port)] = frozenset()  # a cycle cannot happen in a DAG; this only guards the recursion
        node = graph[src]
        if node.kind == "parameter":
            found: frozenset = frozenset({("input", graph.parameter_position[src])})
        elif node.kind != "compute":
            found = frozenset()
        elif src in call_of and call_of[src] in paired_call:
            found = frozenset({("call", call_of[src])})
        elif src in call_of:
            found = frozenset().union(*(ov_rep(s, p, memo) for s, p in calls[call_of[src]].inputs))
        else:
            found = frozenset().union(*(ov_rep(s, p, memo) for s, p in graph.data_inputs(src)))
        memo[(src, port)] = found
        return found

    def torch_rep(ref: Ref, memo: dict) -> frozenset:
        if ref[0] == "input":
            return frozenset({ref})
        index = ref[1]
        if index in memo:
            return memo[index]
        if index in paired_event:
            found: frozenset = frozenset({("call", paired_event[index])})
        else:
            event = event_at.get(index)
            found = frozenset().union(*(torch_rep(r, memo) for r in event.inputs)) if event is not None else frozenset()
        memo[index] = found
        return found

    taps: dict[Tap, Ref] = {}
    for event in events:
        if not event.shapes:
            continue
        options = [i for name in _names_for(event.op) for i in by_label.get((event.module, name), ())
                   if i not in paired_call]
        if not options:
            continue
        wanted = frozenset().union(*(torch_rep(r, {}) for r in event.inputs))
        memo: dict = {}
        for i in sorted(options, key=lambda i: graph[calls[i].members[0]].index):
            call = calls[i]
            have = frozenset().union(*(ov_rep(s, p, memo) for s, p in call.inputs))
            if have != wanted:
                continue
            pairs = _pair_outputs(call, event, shapes)
            if pairs is None or _bias_lost(graph, call.members, event):
                continue
            paired_call[i] = event.index
            paired_event[event.index] = i
            for tap, j in pairs:
                taps[tap] = ("event", event.index, j)
            break
    covered = {k for i in paired_call for k in calls[i].members}
    return taps, covered


def _pair_outputs(call: OVCall, event: Event, shapes: Mapping[Tap, tuple[int, ...]]) -> list[tuple[Tap, int]] | None:
    """The call's exits paired with the event's outputs by shape; None when an output finds no exit."""
    exits = list(call.exits)
    if not exits:
        return None
    pairs: list[tuple[Tap, int]] = []
    used: set[Tap] = set()
    for j, shape in enumerate(event.shapes):
        fitting = [t for t in exits if t not in used and _shape_fits(shapes.get(t), shape)]
        if not fitting:
            if len(event.shapes) == 1:
                return None
            continue
        # One output and several exits of its shape: the call's last value is the one it hands on.
        tap = fitting[-1] if len(event.shapes) == 1 else fitting[0]
        used.add(tap)
        pairs.append((tap, j))
    return pairs or None


def match_modules(graph: ModelGraph, outputs: Sequence[ModuleOutput], taken: Mapping[Tap, Ref],
                  shapes: Mapping[Tap, tuple[int, ...]], events: Sequence[Event] = ()) -> dict[Tap, Ref]:
    """Module outputs whose value no paired call holds, paired with the one value leaving the module's ops
    (nodes whose label's module path is the module or inside it) that has the output's shape; not a
    convolution or MatMul alone for a biased call of `events` (`_bias_lost`)."""
    event_at = {e.index: e for e in events}
    labels = {n.key: ov_label(n.name) for n in graph.candidates()}
    readers: dict[str, list[str]] = {}
    for node in graph:
        for src, _ in node.inputs:
            readers.setdefault(src, []).append(node.key)
    held = set(taken.values())
    found: dict[Tap, Ref] = {}
    done: set[str] = set()
    for out in outputs:
        if out.value in held or (out.module, out.position) in done:
            continue
        done.add((out.module, out.position))  # type: ignore[arg-type]
        prefix = out.module + "."
        inside = {k for k, v in labels.items() if v is not None and (v[0] == out.module or v[0].startswith(prefix))}
        if not out.module or not inside:
            continue
        exits = [Tap(k, t.port) for k in inside for t in graph[k].outputs
                 if any(r not in inside for r in readers.get(k, ()))
                 and _shape_fits(shapes.get(Tap(k, t.port)), out.shape) and shapes.get(Tap(k, t.port)) is not None]
        exits = [t for t in exits if t not in taken and t not in found]
        event = event_at.get(out.value[1]) if out.value[0] == "event" else None
        if len(exits) == 1 and not _bias_lost(graph, [exits[0].key], event):
            found[exits[0]] = out.value
    return found


def match_neighbours(graph: ModelGraph, events: Sequence[Event], taken: Mapping[Tap, Ref], covered: set[str],
                     shapes: Mapping[Tap, tuple[int, ...]]) -> dict[Tap, Ref]:
    """Values that no name places, paired through a paired op that reads them (see the module docstring): when
    every other value a paired call (or an op paired this way) reads is paired with one of its event's inputs,
    its one value left is the event's one input left, if their shapes agree. A convolution whose BatchNorm the
    conversion folded in is named ``Multiply_<n>``; the ReLU that reads it is paired, and so it is the
    BatchNorm's output. Repeated until nothing more pairs, so a chain of such ops pairs one by one."""
    calls = ov_calls(graph)
    call_of = {k: i for i, c in enumerate(calls) for k in c.members}
    event_at = {e.index: e for e in events}
    held: dict[Tap, Ref] = {}  # every value paired so far
    held.update(taken)
    for key in graph.order:
        if graph[key].kind == "parameter":
            held[Tap(key, 0)] = ("input", graph.parameter_position[key])
    # Consumers: a paired call reads its inputs; an event reads its refs.
    consumers: list[tuple[tuple, int]] = []
    seen_calls = set()
    for tap, ref in taken.items():
        if ref[0] != "event" or tap.key not in call_of or call_of[tap.key] in seen_calls:
            continue
        seen_calls.add(call_of[tap.key])
        consumers.append((tuple(calls[call_of[tap.key]].inputs), ref[1]))
    found: dict[Tap, Ref] = {}
    refs_held = set(held.values())

    def shape_of(ref: Ref) -> tuple[int, ...] | None:
        if ref[0] != "event":
            return None
        event = event_at.get(ref[1])
        return event.shapes[ref[2]] if event is not None and ref[2] < len(event.shapes) else None

    readers_of: dict[Ref, list[Event]] = {}
    for reader in events:
        for r in dict.fromkeys(reader.inputs):
            readers_of.setdefault(r, []).append(reader)

    def place(tap: Tap, ref: Ref) -> bool:
        """Pair `tap` with `ref` if their shapes agree; an op no name places (a convolution named Multiply_n)
        then reads too: what the first call of the chain folded into it read (the convolution's input, not its
        BatchNorm's)."""
        shape = shape_of(ref)
        if shape is None or shapes.get(tap) is None or not _shape_fits(shapes.get(tap), shape):
            return False
        if _bias_lost(graph, [tap.key], event_at.get(ref[1])):
            return False
        held[tap] = found[tap] = ref
        refs_held.add(ref)
        if tap.key not in call_of:
            consumers.append((tuple(graph.data_inputs(tap.key)), _chain_start(event_at, ref[1])))
        return True

    changed = True
    while changed:
        changed = False
        for sources, index in list(consumers):
            event = event_at.get(index)
            # A folded call's input is not what its paired op reads: the BatchNorm's scale went into the
            # convolution before it (``Multiply_<n>`` is conv(x, W * scale), not conv(x, W) + b).
            if event is None or normalize_op(event.op) in FOLDED:
                continue
            left = [Tap(s, p) for s, p in sources if Tap(s, p) not in held and s not in covered
                    and graph[s].kind == "compute"]
            known = {held[Tap(s, p)] for s, p in sources if Tap(s, p) in held}
            if not known <= set(event.inputs):  # the neighbours it reads are not the event's: no safe pairing
                continue
            refs = [r for r in dict.fromkeys(event.inputs) if r not in refs_held]
            if len(left) != 1 or len(refs) != 1:
                continue
            changed = place(left[0], refs[0]) or changed
        # From the producer's side: an unpaired op whose every data input is paired is the last value of the one
        # unpaired chain of events that reads exactly those values (a convolution, and the BatchNorm the
        # conversion folded into it), when it is the only such op and that the only such chain. A residual sum
        # of two renamed convolutions (a downsampling block's) leaves the consumer rule two values to place;
        # the block input read by the downsampling convolution alone places one of them here.
        for tap, ref in _paired_by_inputs(graph, events, held, refs_held, covered, call_of, readers_of).items():
            changed = place(tap, ref) or changed
    return found


def _chain_start(event_at: Mapping[int, Event], index: int) -> int:
    """The first call of the chain a renamed op stands for, from its last (`index`): back through the calls the
    conversion folds into the one before them (`FOLDED`), while each reads one value made by a call."""
    event = event_at.get(index)
    while (event is not None and normalize_op(event.op) in FOLDED and len(event.inputs) == 1
           and event.inputs[0][0] == "event" and event.inputs[0][1] in event_at):
        event = event_at[event.inputs[0][1]]
    return event.index if event is not None else index


# Torch calls the conversion folds into the op before them (their value is that op's, renamed).
FOLDED = frozenset({"batch_norm"})


def _paired_by_inputs(graph: ModelGraph, events: Sequence[Event], held: Mapping[Tap, Ref], refs_held: set,
                      covered: set[str], call_of: Mapping[str, int],
                      readers_of: Mapping[Ref, list[Event]]) -> dict[Tap, Ref]:
    """Unpaired ops no name places, each with the end of the one unpaired event chain that reads what it reads
    (see `match_neighbours`); an op or a chain that has a twin reading the same values is left unpaired."""
    ops: dict[frozenset, list[Tap]] = {}
    for key in graph.order:
        node = graph[key]
        if node.kind != "compute" or key in call_of or key in covered or len(node.outputs) != 1:
            continue
        tap = Tap(key, 0)
        sources = graph.data_inputs(key)
        if tap in held or not sources or any(Tap(k, p) not in held for k, p in sources):
            continue
        ops.setdefault(frozenset(held[Tap(k, p)] for k, p in sources), []).append(tap)
    found: dict[Tap, Ref] = {}
    for reads, taps in ops.items():
        if len(taps) != 1:
            continue
        ends = []
        for event in {e.index: e for r in reads for e in readers_of.get(r, ())}.values():
            if set(event.inputs) != reads:
                continue
            last = event
            while True:
                after = readers_of.get(("event", last.index, 0), [])
                if len(after) != 1 or normalize_op(after[0].op) not in FOLDED:
                    break
                last = after[0]
            end: Ref = ("event", last.index, 0)
            if end not in refs_held:
                ends.append(end)
        if len(ends) == 1:
            found[taps[0]] = ends[0]
    return found
