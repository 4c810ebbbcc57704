"""PyTorch eager as a side: `Torch(module, dtype="f32" | "f64")`.

The module runs eagerly on the CPU under `torch.no_grad()`. Its intermediate values come from

* every top-level torch call (a `TorchFunctionMode` sees ``linear``, ``__add__``, ``view``, ``softmax`` ... with
  the module whose forward made the call, tracked by forward pre-hooks and hooks): matched to a traced
  conversion's ``__module.<path>/aten::<op>`` ops by `bisect_ov.frameworks.torch_match.match_events`;
* every module's output (forward hooks), for what the calls leave unmatched (`match_modules`);
* for a ``torch.export`` conversion (names like ``linear_6/aten.linear.default/MatMul``, tensors ``linear_6:0``):
  the exported graph run node by node (`torch.fx.Interpreter`), each node's value matched by its name. Pass
  the `ExportedProgram` itself, or the module: it is exported again with the inputs, which gives the same
  node names when the module and torch are the same.

``dtype="f64"`` runs a float64 copy of the module (the user's module is never changed) with float inputs in
float64: the exact side of ``truth="f64"``.

The first run (`bind`) records what every call read and made; later runs record only the values asked for,
and must make the same calls in the same order (a module whose control flow follows its inputs' values is
refused for inputs that change it). A module on another device than the CPU, or with a dropout or batch-norm
module in training mode, is refused; a module random in another way (``F.dropout(x, p, self.training)`` in
training mode, ``torch.rand``) is refused when its second run on the bound inputs gives other outputs
(`FrameworkSide.bind`). Eager runs of every side hold one lock: two sides on the same module object (``ref=m,
target=m``) would otherwise see each other's hooks fire when the pipeline runs them in threads.

Assumes torch is installed (the ``zoo`` extra); it is imported when a side is made.
"""

from __future__ import annotations

import copy
import inspect
import threading
from functools import partial
from typing import Any, Hashable, Sequence

import numpy as np

from bisect_ov.core.errors import DeviceError, InputError, first_line
from bisect_ov.core.extras import install_hint
from bisect_ov.frameworks.side import Binding, FrameworkSide, check_outputs, static_shapes
from bisect_ov.frameworks.torch_match import (
    Event,
    ModuleOutput,
    exported_label,
    match_events,
    match_modules,
    match_neighbours,
)
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.taps import Tap

__all__ = ["Torch", "import_torch", "is_torch_module"]

# Torch functions whose result is not a value of the model (sizes, attributes, conversions to Python).
_RUNNING = threading.RLock()  # one eager or graph run at a time: hooks on a shared module fire for every caller
_SKIP = frozenset({"size", "dim", "numel", "__len__", "__bool__", "item", "tolist", "__format__", "__repr__",
                   "__hash__", "is_floating_point", "is_contiguous", "data_ptr", "stride"})
# Torch functions whose third argument (or ``bias=``) is a bias added to their value (`Event.bias`).
_BIASED = frozenset({"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "linear"})


def import_torch():
    """torch, or an `InputError` naming the extra that installs it."""
    try:
        import torch
    except ImportError as err:
        raise InputError("The PyTorch side needs torch: " + install_hint("zoo", "torch") + ".") from err
    return torch


def _as_converted(program: Any) -> Any:
    """The graph module of `program` as `ov.convert_model` reads it: OpenVINO's PyTorch frontend first runs its
    export decompositions on the program, which numbers the graph's nodes anew (``view_3`` of the program may be
    ``view_4`` after), and the converted model's names are those. Through the frontend's own reader, so that the
    decompositions are the installed OpenVINO's; the program's own module when that reader is not there."""
    try:
        from openvino.frontend.pytorch.fx_decoder import TorchFXPythonDecoder
    except ImportError:
        return program.module()
    return TorchFXPythonDecoder.from_exported_program(program).pt_module


def is_torch_module(obj: Any) -> bool:
    """Whether `obj` is a `torch.nn.Module` or a `torch.export.ExportedProgram`, without importing torch."""
    names = {f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__}
    return "torch.nn.modules.module.Module" in names or "torch.export.exported_program.ExportedProgram" in names


def _tensors(torch, value: Any) -> list:
    """The tensors of a module's or call's result, flattened in order (dict-like results by their values)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "to_tuple"):  # transformers' ModelOutput
        value = value.to_tuple()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(torch, v)]
    return []


def _numpy(torch, t) -> np.ndarray:
    t = t.detach()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()
    return t.cpu().numpy().copy()


class _Recorder:
    """One eager run: the events (`track`: with what each read), module outputs, and the values in `keep`."""

    def __init__(self, torch, keep: set | None, track: bool):
        self.torch, self.keep, self.track = torch, keep, track
        self.events: list[Event] = []
        self.labels: list[tuple[str, str]] = []
        self.modules: list[ModuleOutput] = []
        self.values: dict[Hashable, np.ndarray] = {}
        self.stack = [""]
        self.ids: dict[int, tuple] = {}
        self.alive: list = []  # tensors kept alive while tracking, so that ids stay unique
        self.calls = 0

    def inputs(self, tensors) -> None:
        for i, t in enumerate(tensors):
            self.ids[id(t)] = ("input", i)
            self.alive.append(t)

    def call(self, func, args, kwargs, out) -> None:
        name = getattr(func, "__name__", None)
        if not name or name in _SKIP:
            return
        outs = _tensors(self.torch, out)
        if not outs:
            return
        index = len(self.labels)
        self.labels.append((self.stack[-1], name))
        if self.track:
            found = _tensors(self.torch, list(args) + list(kwargs.values()))
            reads = tuple(dict.fromkeys(self.ids[id(t)] for t in found if id(t) in self.ids))
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            self.events.append(Event(index, self.stack[-1], name, reads, tuple(tuple(t.shape) for t in outs),
                                     bias=name in _BIASED and isinstance(bias, self.torch.Tensor)
                                     and bool(bias.detach().abs().max() > 0)))  # a zero bias is folded away
            self.alive += outs
        for j, t in enumerate(outs):
            self.ids[id(t)] = ("event", index, j)
            if self.keep is not None and ("event", index, j) in self.keep:
                self.values[("event", index, j)] = _numpy(self.torch, t)

    def enter(self, path: str, module, args) -> None:
        self.stack.append(path)

    def leave(self, path: str, module, args, output) -> None:
        self.stack.pop()
        call = self.calls
        self.calls += 1
        for pos, t in enumerate(_tensors(self.torch, output)):
            ref = self.ids.get(id(t), ("module", call, pos))
            if self.track:
                self.modules.append(ModuleOutput(call, path, pos, ref, tuple(t.shape)))
            if self.keep is not None and ("module", call, pos) in self.keep:
                self.values[("module", call, pos)] = _numpy(self.torch, t)


def _mode(torch, recorder: _Recorder):
    class Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            recorder.call(func, args, kwargs, out)
            return out

    return Mode()


class Torch(FrameworkSide):
    """PyTorch eager as the ``ref=``, ``target=`` or ``truth=`` of `bisect()` (see the module docstring).

    Parameters
    ----------
    module
        The `torch.nn.Module` the OpenVINO model was converted from (on the CPU, in eval mode), or the
        `torch.export.ExportedProgram` it was converted from.
    dtype
        ``"f32"`` (eager as the user runs it) or ``"f64"`` (a float64 copy: the exact side).

    Examples
    --------
    >>> bisect(ov_model, ref=Torch(module), target="CPU:f32", inputs=example)          # doctest: +SKIP
    >>> bisect(ov_model, ref=module, target="CPU:f32", inputs=example, truth="f64")   # doctest: +SKIP
    """

    framework = "torch"

    def __init__(self, module: Any, dtype: str = "f32", *, name: str | None = None):
        torch = import_torch()
        self.program = None
        if isinstance(module, torch.export.ExportedProgram):
            self.program = module
            module = module.module()
        elif not isinstance(module, torch.nn.Module):
            raise InputError(f"Torch() takes a torch.nn.Module or a torch.export.ExportedProgram; got {type(module).__name__}.")
        elsewhere = sorted({str(p.device) for p in [*module.parameters(), *module.buffers()] if p.device.type != "cpu"})
        if elsewhere:
            raise InputError(
                f"The module's parameters are on {', '.join(elsewhere)}; the PyTorch side runs on the CPU, like the "
                "OpenVINO model it is compared with. Pass a CPU copy: copy.deepcopy(module).cpu() (or module.cpu()).")
        changing = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._NormBase)
        if self.program is None and any(m.training and isinstance(m, changing) for m in module.modules()):
            raise InputError(
                f"The module ({type(module).__name__}) is in training mode: dropout and batch-norm statistics would "
                "change every run, unlike the converted model. Call module.eval() first.")
        self.module = module
        super().__init__(dtype, name=name)
        self._runnable = module if self.dtype == "f32" else None
        self._exported: Any = None
        self._converted: Any = None  # the graph module as the conversion read it (`_as_converted`)
        self._names: list[str] = []

    def with_dtype(self, dtype: str) -> "Torch":
        return Torch(self.program if self.program is not None else self.module, dtype)

    def describe(self) -> str:
        torch = import_torch()
        kind = "torch.export graph" if self.program is not None or self._exported is not None else "eager"
        return f"PyTorch {torch.__version__.split('+')[0]} {kind}, {type(self.module).__name__}, {self.dtype}"

    # ----- running ---------------------------------------------------------------------------------------
    def _module(self):
        torch = import_torch()
        if self._runnable is None:  # float64: a copy, so the user's module is never changed
            self._runnable = copy.deepcopy(self.module).to(torch.float64)
        return self._runnable

    def _tensors_of(self, arrays: Sequence[np.ndarray]) -> list:
        torch = import_torch()
        out = []
        for a in arrays:
            a = np.array(a)  # a writable copy: torch refuses read-only memory
            t = torch.from_numpy(a)
            if t.is_floating_point():
                t = t.to(torch.float64 if self.dtype == "f64" else torch.float32)
            out.append(t)
        return out

    def _call(self, module, tensors: list, names: Sequence[str]):
        """Call `module` with the inputs by name when the forward takes those names, else in order."""
        try:
            params: Any = inspect.signature(module.forward).parameters
        except (TypeError, ValueError):
            params = {}
        by_name = names and all(n in params for n in names)
        try:
            if by_name:
                return module(**dict(zip(names, tensors)))
            return module(*tensors)
        except Exception as err:  # noqa: BLE001 - whatever the module raises is the user's to see
            given = ", ".join(f"{n} {list(t.shape)} {str(t.dtype).replace('torch.', '')}" for n, t in zip(names, tensors))
            raise InputError(f"The module ({type(self.module).__name__}) rejected the inputs ({given}): "
                             f"{type(err).__name__}: {first_line(err)}") from err

    def _eager(self, arrays: Sequence[np.ndarray], names: Sequence[str], keep: set | None, track: bool) -> tuple[_Recorder, list]:
        torch = import_torch()
        module = self._module()
        tensors = self._tensors_of(arrays)
        recorder = _Recorder(torch, keep, track)
        recorder.inputs(tensors)
        with _RUNNING:
            handles = []
            for path, sub in module.named_modules():
                handles.append(sub.register_forward_pre_hook(partial(recorder.enter, path)))
                handles.append(sub.register_forward_hook(partial(recorder.leave, path)))
            try:
                with torch.no_grad(), _mode(torch, recorder):
                    result = self._call(module, tensors, names)
            finally:
                for h in handles:
                    h.remove()
        return recorder, _tensors(torch, result)

    def _graph_run(self, gm, arrays: Sequence[np.ndarray], keep: set | None) -> tuple[dict, list, dict]:
        """The exported graph node by node: (node name -> output shapes, outputs, kept values)."""
        torch = import_torch()
        shapes: dict[str, tuple] = {}
        values: dict[Hashable, np.ndarray] = {}

        class Interpreter(torch.fx.Interpreter):  # type: ignore[name-defined]
            def run_node(self, n):
                out = super().run_node(n)
                if n.op == "call_function":
                    outs = _tensors(torch, out)
                    shapes[n.name] = tuple(tuple(t.shape) for t in outs)
                    for j, t in enumerate(outs):
                        if keep is not None and ("fx", n.name, j) in keep:
                            values[("fx", n.name, j)] = _numpy(torch, t)
                return out

        tensors = self._tensors_of(arrays)
        try:
            with _RUNNING, torch.no_grad():
                result = Interpreter(gm).run(*tensors)
        except Exception as err:  # noqa: BLE001
            raise InputError(f"The exported graph rejected the inputs: {type(err).__name__}: {first_line(err)}") from err
        return shapes, _tensors(torch, result), values

    def _graph_module(self, arrays: Sequence[np.ndarray]):
        torch = import_torch()
        if self._converted is None:
            program = self.program
            if program is None:
                if self._exported is None:
                    try:
                        self._exported = torch.export.export(self.module, tuple(self._tensors_of(arrays)))
                    except Exception as err:  # noqa: BLE001 - export fails in many ways; the names cannot match
                        raise InputError(f"The OpenVINO model was converted from a torch.export graph (its names say "
                                         f"so) and exporting the module again failed ({type(err).__name__}: "
                                         f"{first_line(err)}): pass the ExportedProgram itself, Torch(program).") from err
                program = self._exported
            self._converted = _as_converted(program)
        gm = self._converted
        return gm.to(torch.float64) if self.dtype == "f64" else gm

    # ----- matching ----------------------------------------------------------------------------------------
    def _unrepeatable_hint(self) -> str:
        training = sorted(p or type(self.module).__name__ for p, m in self.module.named_modules() if m.training)
        if training and self.program is None:
            return (f"The module is in training mode ({', '.join(training[:3])}{' ...' if len(training) > 3 else ''}): "
                    "a functional dropout (F.dropout(x, p, self.training)) changes every run. Call module.eval() first.")
        return ("It is in eval mode, so a random op (torch.rand, a dropout with training=True) changes every run: "
                "seed it or remove it, then compare again.")

    def _bind(self, graph: ModelGraph, arrays: list[np.ndarray]) -> tuple[Binding, list[np.ndarray]]:
        torch = import_torch()
        self._names = names = _input_names(graph)
        shapes = static_shapes(graph, arrays)
        candidates = graph.candidates()
        exported = sum(exported_label(n.name) is not None for n in candidates)
        if self.program is not None or exported > len(candidates) // 2:
            return self._bind_graph(graph, arrays, shapes)
        recorder, outputs = self._eager(arrays, names, None, True)
        check_outputs(graph, "PyTorch", [tuple(t.shape) for t in outputs], shapes, f"module's forward ({type(self.module).__name__})")
        taps, covered = match_events(graph, recorder.events, shapes)
        modules = match_modules(graph, recorder.modules, taps, shapes, recorder.events)
        neighbours = match_neighbours(graph, recorder.events, {**taps, **modules}, covered, shapes)
        sources: dict[Tap, Hashable] = {**taps, **modules, **neighbours}
        kinds = {**{t: "aten" for t in taps}, **{t: "module" for t in modules}, **{t: "aten" for t in neighbours}}
        self._outputs_as_sources(graph, sources, kinds)
        return Binding(sources, kinds, frozenset(covered), tuple(("output", j) for j in range(len(outputs))),
                       note=f"PyTorch eager; {len(recorder.events)} torch calls, {recorder.calls} module calls",
                       order=tuple(recorder.labels)), [_numpy(torch, t) for t in outputs]

    def _bind_graph(self, graph: ModelGraph, arrays: list[np.ndarray], shapes) -> tuple[Binding, list[np.ndarray]]:
        torch = import_torch()
        gm = self._graph_module(arrays)
        node_shapes, outputs, _ = self._graph_run(gm, arrays, None)
        check_outputs(graph, "PyTorch", [tuple(t.shape) for t in outputs], shapes, "exported graph")
        sources: dict[Tap, Hashable] = {}
        covered: set[str] = set()
        by_call: dict[str, list[str]] = {}
        for n in graph.candidates():
            call = exported_label(n.name)
            if call is not None:
                by_call.setdefault(call, []).append(n.key)
        for name, outs in node_shapes.items():
            for j, shape in enumerate(outs):
                hit = graph.lookup_tensor(f"{name}:{j}")
                if hit is not None and graph[hit[0]].is_candidate and shapes.get(Tap(*hit), shape) == shape:
                    sources.setdefault(Tap(*hit), ("fx", name, j))
            if name in by_call:
                covered.update(by_call[name])
        kinds = {t: "export" for t in sources}
        self._outputs_as_sources(graph, sources, kinds)
        return Binding(sources, kinds, frozenset(covered), tuple(("output", j) for j in range(len(outputs))),
                       note=f"the torch.export graph run node by node; {len(node_shapes)} graph nodes",
                       order=("fx",)), [_numpy(torch, t) for t in outputs]

    @staticmethod
    def _outputs_as_sources(graph: ModelGraph, sources: dict, kinds: dict) -> None:
        """The model outputs' producers are the module's outputs, whatever else matched."""
        for j, result in enumerate(graph.results()):
            tap = Tap(*result.inputs[0])
            if graph[tap.key].is_candidate and tap not in sources:
                sources[tap] = ("output", j)
                kinds[tap] = "output"

    def _run(self, arrays: list[np.ndarray], addresses: Sequence[Hashable], binding: Binding) -> dict[Hashable, np.ndarray]:
        torch = import_torch()
        keep = set(addresses)
        if binding.order == ("fx",):
            _, outputs, values = self._graph_run(self._graph_module(arrays), arrays, keep)
        else:
            recorder, outputs = self._eager(arrays, self._names, keep, False)
            if tuple(recorder.labels) != binding.order:
                raise DeviceError(
                    f"The module ({type(self.module).__name__}) made other calls for these inputs than for the inputs it "
                    f"was matched with ({len(recorder.labels)} torch calls, not {len(binding.order)}): its control "
                    "flow follows its inputs, so its values cannot be matched to the same nodes. Compare one input at "
                    "a time.")
            values = recorder.values
        for j, t in enumerate(outputs):
            if ("output", j) in keep:
                values[("output", j)] = _numpy(torch, t)
        return values


def _input_names(graph: ModelGraph) -> list[str]:
    """The model inputs' names as a forward takes them: a Parameter's tensor name, else its friendly name."""
    names = []
    for op in graph.model.get_parameters():
        tensor_names = sorted(op.output(0).get_names())
        names.append(op.get_friendly_name() if op.get_friendly_name() in tensor_names or not tensor_names
                     else tensor_names[0])
    return names

