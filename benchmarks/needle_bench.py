"""Needle in noise: how often `bisect()` names an injected fault as the origin on a real low-precision target.

For each model, a fault is planted at N random float compute nodes of the target's copy (by default a 20%
multiplicative one, ``inject_fault(model, site, "scale", 0.2)``; with ``--faults``, each site gets each of the
shapes in `FAULTS`: elementwise noise, a constant scale, an offset relative to the tensor's rms, a sparse fault,
sign flips), and `bisect(model, "CPU:f32", target, inputs, target_model=faulty)`
runs with the target in a real low precision (``CPU:bf16`` by default), where every node carries rounding error
and the fault is only a little more than rounding. Per site it records:

* **hit**: the faulty node is named as the origin: it is `report.first_divergence`, or inside that node's
  fusion group (`NodeResult.group`), or, when the report has several first divergences, one of them (or in
  one of their groups);
* **top-3**: the weaker "named anywhere among the first three culprits (or their groups)";
* on a miss, what was named instead: the first divergence (name, op type, role) or, when there is none, the
  verdict's kind (``absorbed``, ``no_divergence``, ``accumulates``) with the node it points to;
* the **regime**: ``over`` when the faulty run's final outputs are over their tolerance
  (``any(o.diverged for o in report.outputs)``), ``within`` otherwise. Within tolerance is where users live:
  the fault is real, but the outputs' rounding allowance hides it.

Each model also runs once without a fault (**benign**): a correct tool reports no first divergence there;
a first divergence is a false alarm.

Sites are drawn (seeded by ``--seed`` and the model's name) among the float compute nodes that do arithmetic
(ops that only move or select values, such as Reshape, Transpose, Gather or Concat, are left out unless
``--all-ops``), and only nodes whose fault changes the final outputs at all count: a site whose faulty model
gives the clean model's outputs on ``CPU:f32`` (relative L2 change below 1e-6, f32 rounding: a fault feeding
only a masked path) is skipped, counted, and another is drawn.

Models: the zoo's real architectures at small size (`bisect_ov.zoo.cache`; by default every one that is
neither an NNCF twin nor stateful), and with ``--outside`` architectures that are not in the zoo, built here
from the libraries' configs with seeded random weights, as the zoo builds its own (transformers DistilBERT,
RoBERTa, ALBERT, Qwen2, T5's encoder; timm RegNetX, DenseNet, MobileViT; torchvision SqueezeNet,
ShuffleNetV2). They are built once into a cache folder (``--cache``; by default next to the zoo's cache, keyed
by the same library versions) and read from there afterwards. Nothing is downloaded.

Usage::

    python benchmarks/needle_bench.py                          # the zoo, 10 sites each, CPU:bf16
    python benchmarks/needle_bench.py --outside --json needle.json --markdown
    python benchmarks/needle_bench.py --models bert resnet50 --sites 3 --target EMU:f16 --budget fast

Assumptions: building models needs the ``zoo`` extra (torch, torchvision, transformers, timm); ``CPU:bf16``
needs a CPU whose OpenVINO plugin runs bf16 (AVX512_BF16 or AMX): elsewhere the script says so and stops.
``CPU:f16`` on a CPU without f16 runs bf16 (the plugin's fallback; the reports say so). The bisect options
are the defaults (``impact=3``) unless ``--budget fast``. This is a measuring script, not a test: nothing
here passes or fails, and nothing is tuned to the figure it prints.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import shlex
import sys
import tempfile
import time
import warnings
import zlib
from collections import Counter
from typing import Any, Callable

import numpy as np

TARGETS = ("CPU:bf16", "EMU:bf16", "EMU:f16", "CPU:f16")
REFERENCE = "CPU:f32"
FAULT = {"kind": "scale", "magnitude": 0.2}  # how sites are checked to change the outputs at all
# The fault shapes (`--faults`), each as `inject_fault`'s kind and magnitude: elementwise multiplicative noise, a
# constant scale, an offset of a fifth of the tensor's rms, a sparse fault (one element in a thousand doubled), and
# sign flips of 5% of the elements.
FAULTS = {"mnoise": {"kind": "mnoise", "magnitude": 0.2}, "scale": {"kind": "scale", "magnitude": 0.2},
          "roffset": {"kind": "roffset", "magnitude": 0.2}, "sparse": {"kind": "sparse", "magnitude": 1.0},
          "signflip": {"kind": "signflip", "magnitude": 0.05}}
# The held-out sets: option and source name -> (module in benchmarks/, its table of entries, its loader).
HELD_OUT = {"holdout": ("holdout", "HOLDOUT", "load_holdout"), "holdout2": ("holdout2", "HOLDOUT2", "load_holdout2"),
            "holdout3": ("holdout3", "HOLDOUT3", "load_holdout3"), "holdout4": ("holdout4", "HOLDOUT4", "load_holdout4"),
            "holdout5": ("holdout5", "HOLDOUT5", "load_holdout5"), "holdout6": ("holdout6", "HOLDOUT6", "load_holdout6"),
            "holdout7": ("holdout7", "HOLDOUT7", "load_holdout7"), "holdout8": ("holdout8", "HOLDOUT8", "load_holdout8"),
            "holdout9": ("holdout9", "HOLDOUT9", "load_holdout9"),
            "holdout10": ("holdout10", "HOLDOUT10", "load_holdout10"),
            "holdout11": ("holdout11", "HOLDOUT11", "load_holdout11"),
            "holdout12": ("holdout12", "HOLDOUT12", "load_holdout12"),
            "holdout13": ("holdout13", "HOLDOUT13", "load_holdout13"),
            "holdout14": ("holdout14", "HOLDOUT14", "load_holdout14")}
# Each held-out set's ordinal, in `HELD_OUT`'s order (the flags' help and the summary name them so).
NTH = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "eleventh", "twelfth",
       "thirteenth", "fourteenth")
# A fault "changes the final outputs" when some output moves by more than this (relative L2): f32 rounding.
UNCHANGED = 1e-6
# Ops that only move or select values (and the masks built from them); faults go on arithmetic by default.
VIEWS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Concat", "Broadcast", "Gather", "Select",
                   "Convert", "Slice", "StridedSlice", "Split", "VariadicSplit", "ShapeOf", "Tile"})
# Bump when an outside builder changes what it builds: older builds in the cache are then ignored.
OUTSIDE_BUILD = 1
SEQ_LEN = 16
IMAGE = 64
CLASSES = 10


# ------------------------------------------------------------------------------------------------------------
# Architectures outside the zoo, built from library configs with seeded random weights
# ------------------------------------------------------------------------------------------------------------

def _token_meta(vocab: int, converter: str, mask: bool = True) -> dict:
    inputs: dict[str, dict] = {"input_ids": {"shape": [1, SEQ_LEN], "vocab": vocab}}
    if mask:
        inputs["attention_mask"] = {"shape": [1, SEQ_LEN]}
    return {"inputs": inputs, "converter": converter}


def _convert_tokens(model, key: str, vocab: int) -> tuple[Any, dict]:
    """Trace with ``ov.convert_model(example_input=...)``; where tracing fails, ``torch.export`` a wrapper that
    returns the plain `key` tensor, then ``ov.convert_model`` (as the zoo converts its decoders)."""
    import openvino as ov
    import torch

    ids = torch.randint(0, vocab, (1, SEQ_LEN), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, SEQ_LEN, dtype=torch.int64)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return (ov.convert_model(model, example_input={"input_ids": ids, "attention_mask": mask}),
                    _token_meta(vocab, "ov.convert_model(example_input=...)"))
    except Exception:  # noqa: BLE001 - tracing fails in ways that depend on the transformers version
        pass

    from bisect_ov.zoo.hf import export_plain

    return export_plain(model, key, (ids, mask), max_length=256), _token_meta(vocab, "torch.export.export + ov.convert_model")


def _distilbert():
    import transformers

    config = transformers.DistilBertConfig(n_layers=2, dim=64, n_heads=4, hidden_dim=128, vocab_size=1000,
                                           max_position_embeddings=256)
    return _convert_tokens(transformers.DistilBertModel(config).eval(), "last_hidden_state", 1000)


def _roberta():
    import transformers

    config = transformers.RobertaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                        intermediate_size=128, vocab_size=1000, max_position_embeddings=256)
    return _convert_tokens(transformers.RobertaModel(config, add_pooling_layer=False).eval(), "last_hidden_state",
                           1000)


def _albert():
    import transformers

    config = transformers.AlbertConfig(num_hidden_layers=2, embedding_size=32, hidden_size=64, num_attention_heads=4,
                                       intermediate_size=128, vocab_size=1000, max_position_embeddings=256)
    return _convert_tokens(transformers.AlbertModel(config, add_pooling_layer=False).eval(), "last_hidden_state", 1000)


def _qwen2():
    import transformers

    config = transformers.Qwen2Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=128, vocab_size=1000,
                                      max_position_embeddings=256, use_cache=False)
    return _convert_tokens(transformers.Qwen2ForCausalLM(config).eval(), "logits", 1000)


def _t5_encoder():
    import transformers

    config = transformers.T5Config(num_layers=2, d_model=64, d_kv=16, num_heads=4, d_ff=128, vocab_size=1000,
                                   use_cache=False)
    return _convert_tokens(transformers.T5EncoderModel(config).eval(), "last_hidden_state", 1000)


def _calibrate_batchnorm(model) -> None:
    """BatchNorm running statistics from seeded images, as training sets them (the zoo does the same)."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    if norms:
        generator = torch.Generator().manual_seed(1)
        model.train()
        with torch.no_grad():
            for _ in range(4):
                model(torch.randn(4, 3, IMAGE, IMAGE, generator=generator))
    model.eval()


def _convert_image(model) -> tuple[Any, dict]:
    import openvino as ov
    import torch

    _calibrate_batchnorm(model)
    shape = [1, 3, IMAGE, IMAGE]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = ov.convert_model(model.eval(), example_input=torch.randn(*shape))
    return converted, {"inputs": {converted.inputs[0].get_any_name(): {"shape": shape}},
                       "converter": "ov.convert_model(example_input=...)"}


def _regnet():
    import timm

    return _convert_image(timm.create_model("regnetx_002", pretrained=False, num_classes=CLASSES))


def _densenet():
    from timm.models.densenet import DenseNet

    return _convert_image(DenseNet(growth_rate=8, block_config=(2, 2, 2, 2), num_classes=CLASSES))


def _mobilevit():
    import timm

    return _convert_image(timm.create_model("mobilevit_xxs", pretrained=False, num_classes=CLASSES))


def _squeezenet():
    import torchvision

    return _convert_image(torchvision.models.squeezenet1_1(weights=None, num_classes=CLASSES))


def _shufflenet():
    import torchvision

    return _convert_image(torchvision.models.shufflenet_v2_x0_5(weights=None, num_classes=CLASSES))


# name -> (library and class, builder): each builder returns (ov.Model, meta) in the zoo's meta format.
OUTSIDE: dict[str, tuple[str, Callable[[], tuple[Any, dict]]]] = {
    "distilbert": ("transformers DistilBertModel", _distilbert),
    "roberta": ("transformers RobertaModel", _roberta),
    "albert": ("transformers AlbertModel", _albert),
    "qwen2": ("transformers Qwen2ForCausalLM", _qwen2),
    "t5_encoder": ("transformers T5EncoderModel", _t5_encoder),
    "regnet": ("timm RegNetX-200MF", _regnet),
    "densenet": ("timm DenseNet (growth 8, 4x2 layers)", _densenet),
    "mobilevit": ("timm MobileViT-XXS", _mobilevit),
    "squeezenet": ("torchvision SqueezeNet 1.1", _squeezenet),
    "shufflenet": ("torchvision ShuffleNetV2 x0.5", _shufflenet),
}


def outside_folder(cache: str | os.PathLike | None) -> pathlib.Path:
    """Where the outside architectures are built: ``<cache>/<zoo version key>/needle-outside``."""
    from bisect_ov.zoo import cache as zoo_cache

    root = pathlib.Path(cache) if cache is not None else zoo_cache.cache_root()
    return root / zoo_cache.version_key() / f"needle-outside-v{OUTSIDE_BUILD}"


def load_outside(name: str, cache: str | os.PathLike | None = None) -> tuple[Any, dict]:
    """An outside architecture as (`ov.Model`, meta), built and saved (f32 weights) the first time.

    Parameters
    ----------
    name
        A key of `OUTSIDE`.
    cache
        The cache root; None for the zoo's (``$BISECT_OV_ZOO_CACHE`` or ``~/.cache/bisect_ov/zoo``).

    Returns
    -------
    tuple
        The model read from its IR, and its description (inputs, converter, library).
    """
    return load_built(name, outside_folder(cache), OUTSIDE)


def load_built(name: str, folder: pathlib.Path, builders: dict[str, tuple[str, Callable[[], tuple[Any, dict]]]]
               ) -> tuple[Any, dict]:
    """Entry `name` of `builders` (description, builder) as (`ov.Model`, meta) from `folder`, built there the first
    time (seeded, on one thread, saved with f32 weights; the JSON written last says the model is complete)."""
    import openvino as ov

    xml, meta_path = folder / f"{name}.xml", folder / f"{name}.json"
    if not meta_path.is_file():
        import torch

        library, build = builders[name]
        folder.mkdir(parents=True, exist_ok=True)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the same bits whatever the machine's load (as the zoo builds)
        try:
            torch.manual_seed(0)
            model, meta = build()
        finally:
            torch.set_num_threads(threads)
        meta = {**meta, "name": name, "library": library}
        with tempfile.TemporaryDirectory(dir=folder, prefix=f".{name}-") as tmp:
            ov.save_model(model, str(pathlib.Path(tmp) / f"{name}.xml"), compress_to_fp16=False)
            (pathlib.Path(tmp) / f"{name}.json").write_text(json.dumps(meta, indent=1))
            for ext in ("bin", "xml", "json"):  # the JSON last: it says the model is complete
                os.replace(pathlib.Path(tmp) / f"{name}.{ext}", folder / f"{name}.{ext}")
    return ov.Core().read_model(xml), json.loads(meta_path.read_text())


def outside_inputs(meta: dict, model, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs for an outside architecture: token ids within the vocabulary, a full attention mask,
    standard-normal images."""
    rng = np.random.default_rng(seed)
    # Every name of each input: a traced model's input can carry a made-up name beside the one the config gives.
    types = {name: p.output(0).get_element_type().to_dtype() for p in model.get_parameters()
             for name in p.output(0).get_names()}
    arrays = {}
    for name, spec in meta["inputs"].items():
        shape = tuple(spec["shape"])
        if "vocab" in spec:
            value = rng.integers(0, spec["vocab"], shape)
        elif name == "attention_mask":
            value = np.ones(shape)
        else:
            value = rng.standard_normal(shape)
        arrays[name] = np.ascontiguousarray(value, dtype=types.get(name, np.float32))
    return arrays


# ------------------------------------------------------------------------------------------------------------
# The measurement
# ------------------------------------------------------------------------------------------------------------

def _plain_outputs(model, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """One plain run on the CPU in f32."""
    import openvino as ov

    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return [np.asarray(v, dtype=np.float64) for v in compiled.create_infer_request().infer(inputs).values()]


def fault_size(model, faulty, site: str, inputs: dict[str, np.ndarray]) -> float:
    """How much the fault changes the site's own output on ``CPU:f32`` (relative L2, the faulty model against the
    clean one): a fault smaller than its node's tolerance is within what the target's rounding there allows."""
    import openvino as ov

    def value(m) -> np.ndarray:
        m = m.clone()
        (op,) = [o for o in m.get_ops() if o.get_friendly_name() == site]
        m.add_outputs([op.output(0)])
        compiled = ov.Core().compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        return np.asarray(list(compiled.create_infer_request().infer(inputs).values())[-1], dtype=np.float64)

    return _change([value(faulty)], [value(model)])


def _change(faulty: list[np.ndarray], clean: list[np.ndarray]) -> float:
    changes = []
    for f, c in zip(faulty, clean):
        if f.shape != c.shape:
            return float("inf")
        if not (np.all(np.isfinite(f)) and np.all(np.isfinite(c))):
            changes.append(0.0 if np.array_equal(f, c, equal_nan=True) else float("inf"))
            continue
        changes.append(float(np.linalg.norm(f - c) / max(np.linalg.norm(c), 1e-30)))
    return max(changes, default=0.0)


def pick_sites(model, inputs: dict[str, np.ndarray], count: int, seed: int, *, all_ops: bool = False,
               key: str = "") -> tuple[list[tuple[str, str, float]], int]:
    """`count` random float compute nodes whose fault changes the final outputs on ``CPU:f32``.

    Parameters
    ----------
    model
        The clean `ov.Model`.
    inputs
        The inputs every run uses.
    count
        How many sites to find.
    seed, key
        Seed the draw (the model's name as `key`, so each model draws its own sites).
    all_ops
        Also draw ops that only move or select values (`VIEWS`).

    Returns
    -------
    tuple
        ``([(site, op type, output change), ...], skipped)``: the sites in drawing order, and how many drawn
        nodes were skipped because their fault left the outputs unchanged.
    """
    from bisect_ov import inject_fault
    from bisect_ov.model.graph import ModelGraph

    nodes = [n for n in ModelGraph(model).candidates()
             if n.outputs and n.outputs[0].is_float and (all_ops or n.op_type not in VIEWS)]
    order = np.random.default_rng([seed, zlib.crc32(key.encode())]).permutation(len(nodes))
    clean = _plain_outputs(model, inputs)
    sites, skipped = [], 0
    for i in order:
        if len(sites) == count:
            break
        node = nodes[int(i)]
        change = _change(_plain_outputs(inject_fault(model, node.name, **FAULT), inputs), clean)
        if change > UNCHANGED:
            sites.append((node.name, node.op_type, change))
        else:
            skipped += 1
    return sites, skipped


def _names(node) -> set[str]:
    return {node.name, node.key, *node.group}


def producers_of(graph, site: str) -> set[str]:
    """For a site that only moves values, the nodes whose values it carries up to the arithmetic node that produced
    them (`bisect_ov.analysis.judge.carried_from`): naming one counts as naming the site. Empty for other sites."""
    from bisect_ov.analysis.judge import carried_from

    return {graph[k].name for k in carried_from(graph, graph.find(site).key)}


def positions(model, target: str) -> dict[str, str]:
    """Each compute node's place relative to the kernels the target fused, from its untouched compile: ``inside``
    (its tensor exists only inside a kernel), ``output`` (a kernel of several ops stores it), ``between`` (a kernel
    of its own); ``n/a`` for every node of an emulated target (its runtime graph is the emulation's)."""
    from bisect_ov.model.fusion import kernel_tensors
    from bisect_ov.model.graph import ModelGraph
    from bisect_ov.run.devices import make_device

    graph = ModelGraph(model)
    device = make_device(target)
    if device.emulated:
        return {n.name: "n/a" for n in graph.candidates()}
    kernels = kernel_tensors(graph, device.compile(model).runtime)
    multi = set(kernels.inside.values())  # kernels with members whose tensors they never store
    fused = {key for layer, keys in kernels.outputs.items() if layer in multi for key in keys}
    return {n.name: "inside" if kernels.kernel_of(n.key) else "output" if n.key in fused else "between"
            for n in graph.candidates()}


def _named_instead(report, site: str | None = None) -> dict:
    """What the report points at: its first divergence, or the node its verdict names when there is none;
    with `site`, whether that node is the faulty one (``named_is_site``)."""
    from bisect_ov.report.view import verdict

    v = verdict(report)
    first = report.first_divergence
    if first is not None:
        node = first
    elif v.kind == "absorbed":
        node = max(v.absorbed, key=lambda n: n.error / n.tolerance if n.tolerance else float("inf"))
    elif v.kind == "accumulates":
        node = report.culprits[0] if report.culprits else None
    else:
        node = v.closest
    return {"verdict": v.kind, "named": node.name if node is not None else None,
            "named_op": node.op_type if node is not None else None,
            "named_role": node.role if node is not None else None,
            "named_is_site": bool(site is not None and node is not None and site in _names(node))}


def judge(report, site: str, also: set[str] = frozenset()) -> dict:
    """Whether `report` names `site` as the origin (`hit`) or among its first three culprits (`top3`); `also`: the
    names that count as the site (a movement op's producer, `producers_of`)."""
    firsts = report.first_divergences
    names = {site, *also}
    hit = any(names & _names(n) for n in firsts)
    top3 = any(names & _names(n) for n in report.culprits[:3])
    return {"hit": hit, "top3": top3, "regime": "over" if any(o.diverged for o in report.outputs) else "within",
            "output_error": max((o.error for o in report.outputs), default=None),
            "output_tolerance": min((o.tolerance for o in report.outputs), default=None),
            "first_divergences": [n.name for n in firsts], **_named_instead(report, site)}


def run_model(name: str, model, inputs: dict[str, np.ndarray], *, target: str = "CPU:bf16", sites: int = 10,
              seed: int = 0, budget: str = "default", source: str = "zoo", all_ops: bool = False,
              faults: tuple[str, ...] = ("scale",), log: Callable[[str], None] | None = None) -> dict:
    """The benchmark on one model: faults at `sites` random nodes, and one benign run.

    Parameters
    ----------
    name
        The model's name in the results.
    model, inputs
        The clean `ov.Model` and its inputs.
    target
        The target device (one of `TARGETS`); the reference is ``CPU:f32``.
    sites, seed, all_ops
        See `pick_sites`.
    faults
        Names of `FAULTS`: each site gets each of these faults, one run each.
    budget
        Passed to `bisect` (``default`` or ``fast``).
    source
        ``zoo`` or ``outside``, copied into the results.
    log
        Called with one line per bisect run; None for silence.

    Returns
    -------
    dict
        ``rows`` (one per site: site, op type, regime, hit, top3, what was named, seconds, ...), ``benign``
        (its verdict, first divergence, seconds) and the summary figures (``sites``, ``skipped``, ``hits``, ...).
    """
    from bisect_ov import bisect, inject_fault
    from bisect_ov.model.graph import ModelGraph

    start = time.perf_counter()
    chosen, skipped = pick_sites(model, inputs, sites, seed, all_ops=all_ops, key=name)
    graph = ModelGraph(model)
    where = positions(model, target)
    rows = []
    noop = 0
    for site, op_type, change in chosen:
        also = producers_of(graph, site)
        for fault in faults:
            row: dict[str, Any] = {"model": name, "source": source, "site": site, "op_type": op_type, "fault": fault,
                                   "movement": op_type in VIEWS, "position": where.get(site, "n/a"),
                                   "clean_change": change}
            t = time.perf_counter()
            try:
                faulty = inject_fault(model, site, seed=zlib.crc32(f"{name}:{site}".encode()), **FAULTS[fault])
                size = fault_size(model, faulty, site, inputs)
                if size <= UNCHANGED:  # the fault changes nothing at its node (a sparse pick on a zero): no fault
                    noop += 1
                    continue
                report = bisect(model, REFERENCE, target, inputs, target_model=faulty, budget=budget, progress=False)
                row.update(judge(report, site, also))
                row["fault_size"] = size
                measured = [n for n in report.nodes if n.name == site]
                row["site_tolerance"] = measured[0].tolerance if measured else None
            except Exception as exc:  # noqa: BLE001 - a failing run is a result (a miss), not the end of the benchmark
                row.update({"hit": False, "top3": False, "regime": "error", "verdict": "error",
                            "named": f"{type(exc).__name__}: {exc}"[:200], "named_op": None, "named_role": None})
            row["seconds"] = time.perf_counter() - t
            rows.append(row)
            if log:
                mark = "hit " if row["hit"] else ("top3" if row["top3"] else "miss")
                log(f"  {name}: {mark} {row['regime']:<6} {fault:<8} {site} ({op_type}, {row['position']})"
                    + ("" if row["hit"] else f" -> {row['verdict']}: {row['named']} ({row['named_role']})")
                    + f" [{row['seconds']:.1f}s]")
    t = time.perf_counter()
    try:
        report = bisect(model, REFERENCE, target, inputs, budget=budget, progress=False)
        first = report.first_divergence
        benign = {"false_alarm": first is not None, "first_divergence": first.name if first else None,
                  "diverges": report.diverges, **_named_instead(report)}
    except Exception as exc:  # noqa: BLE001
        benign = {"false_alarm": None, "first_divergence": None, "diverges": None, "verdict": "error",
                  "named": f"{type(exc).__name__}: {exc}"[:200]}
    benign["seconds"] = time.perf_counter() - t
    if log:
        log(f"  {name}: benign {benign['verdict']}" + (f" (first divergence {benign['first_divergence']})"
                                                       if benign.get("false_alarm") else "")
            + f" [{benign['seconds']:.1f}s]")
    return {"model": name, "source": source, "sites": len(rows), "skipped": skipped, "noop": noop,
            "hits": sum(r["hit"] for r in rows), "top3": sum(r["top3"] for r in rows),
            "over": _count(rows, "over"), "within": _count(rows, "within"), "errors": _count(rows, "error")[1],
            "benign": benign, "bisect_seconds": [r["seconds"] for r in rows] + [benign["seconds"]],
            "seconds": time.perf_counter() - start, "rows": rows}


def _count(rows: list[dict], regime: str) -> tuple[int, int]:
    """(hits, sites) in one regime."""
    these = [r for r in rows if r["regime"] == regime]
    return sum(r["hit"] for r in these), len(these)


# ------------------------------------------------------------------------------------------------------------
# Tables
# ------------------------------------------------------------------------------------------------------------

def _rate(hits: int, total: int) -> str:
    return f"{hits}/{total} ({hits / total:.0%})" if total else "-"


BENIGN = {"no_divergence": "no divergence", "absorbed": "no divergence (absorbed)",
          "accumulates": "DIVERGES, no origin"}


def _benign(b: dict) -> str:
    """The benign run's verdict in a few words; a first divergence is a false alarm."""
    if b.get("false_alarm") is None:
        return "error"
    return f"FALSE ALARM ({b['first_divergence']})" if b["false_alarm"] else BENIGN.get(b["verdict"], b["verdict"])


HEADER = ("model", "from", "sites", "skipped", "hits", "over tol.", "within tol.", "top-3", "benign",
          "s/bisect", "seconds")


def table_rows(results: list[dict]) -> list[tuple[str, ...]]:
    """One row of `HEADER` per model."""
    out = []
    for r in results:
        times = r["bisect_seconds"]
        out.append((r["model"], r["source"], str(r["sites"]), str(r["skipped"]), _rate(r["hits"], r["sites"]),
                    _rate(*r["over"]), _rate(*r["within"]), _rate(r["top3"], r["sites"]), _benign(r["benign"]),
                    f"{np.median(times):.1f}" if times else "-", f"{r['seconds']:.0f}"))
    return out


def summary(results: list[dict]) -> dict:
    """The overall figures: hit rate, by regime, top-3, benign false alarms, zoo and outside-zoo rates."""
    rows = [row for r in results for row in r["rows"]]

    def rate(these: list[dict], key: str = "hit") -> dict:
        return {"hits": sum(x[key] for x in these), "sites": len(these)}

    benign = [r["benign"] for r in results]

    def by(field: str) -> dict:
        return {value: rate([x for x in rows if x.get(field) == value])
                for value in sorted({str(x.get(field)) for x in rows}) if value != "None"}

    # Faults that change their own node's output by more than that node's tolerance: beyond what the target's
    # rounding there allows, so a tool that compares against that tolerance can see them.
    beyond = [x for x in rows if x.get("site_tolerance") is not None and x.get("fault_size", 0.0) > x["site_tolerance"]]
    return {"all": rate(rows), "over": rate([x for x in rows if x["regime"] == "over"]),
            "beyond": rate(beyond), "beyond_by_fault": {k: rate([x for x in beyond if x["fault"] == k])
                                                       for k in sorted({x["fault"] for x in beyond})},
            "by_fault": by("fault"), "by_op": by("op_type"), "by_position": by("position"),
            **{held: rate([x for x in rows if x["source"] == held]) for held in HELD_OUT},
            "within": rate([x for x in rows if x["regime"] == "within"]),
            "errors": sum(x["regime"] == "error" for x in rows), "top3": rate(rows, "top3"),
            "zoo": rate([x for x in rows if x["source"] == "zoo"]),
            "outside": rate([x for x in rows if x["source"] == "outside"]),
            "skipped": sum(r["skipped"] for r in results), "noop": sum(r.get("noop", 0) for r in results),
            "benign_false_alarms": sum(bool(b.get("false_alarm")) for b in benign), "benign_runs": len(benign),
            "misses": Counter(_miss_pattern(x) for x in rows if not x["hit"]).most_common()}


def _miss_pattern(row: dict) -> str:
    """A miss in a few words: the verdict's kind and what it points at."""
    if row["verdict"] == "error":
        return "error"
    if row["verdict"] == "diverges":
        return f"DIVERGES, error starts at another node: {row['named_op']} ({row['named_role']})"
    if row.get("named_is_site"):
        return f"{row['verdict']}: names the faulty node itself, as {row['named_role']}"
    what = {"absorbed": "the largest absorbed node", "no_divergence": "the node closest to its tolerance",
            "accumulates": "the top culprit"}.get(row["verdict"], "the named node")
    return f"{row['verdict']}: {what} is another node: {row['named_op']} ({row['named_role']})"


def summary_lines(s: dict) -> list[str]:
    def r(d: dict) -> str:
        return _rate(d["hits"], d["sites"])

    lines = [f"Overall hit rate (named as the origin): {r(s['all'])}",
             f"  outputs over their tolerance:   {r(s['over'])}",
             f"  outputs within their tolerance: {r(s['within'])}",
             f"  named in the top-3 culprits:    {r(s['top3'])}",
             f"  zoo: {r(s['zoo'])}; outside the zoo: {r(s['outside'])}; held out: {r(s['holdout'])}; "
             + "; ".join(f"{nth}{' held-out set' if nth == 'second' else ''}: {r(s.get(held, {'hits': 0, 'sites': 0}))}"
                         for held, nth in list(zip(HELD_OUT, NTH))[1:]),
             "  by fault shape: " + ", ".join(f"{k} {r(v)}" for k, v in s["by_fault"].items()),
             f"  faults larger than their node's tolerance (fault size on f32 > the measured site's tolerance): "
             f"{r(s['beyond'])}; by shape: " + ", ".join(f"{k} {r(v)}" for k, v in s["beyond_by_fault"].items()),
             "  by position relative to the target's kernels: " + ", ".join(f"{k} {r(v)}" for k, v in s["by_position"].items()),
             "  by op type: " + ", ".join(f"{k} {r(v)}" for k, v in sorted(s["by_op"].items(), key=lambda kv: -kv[1]["sites"])),
             f"  sites skipped (fault leaves the f32 outputs unchanged): {s['skipped']}; faults left out because they "
             f"change nothing at their own node on f32: {s.get('noop', 0)}",
             f"Benign runs (no fault): {s['benign_false_alarms']} false alarm(s) in {s['benign_runs']}"]
    if s["errors"]:
        lines.append(f"Runs that raised (counted as misses): {s['errors']}")
    if s["misses"]:
        lines.append("Misses, by what was named instead:")
        lines += [f"  {n:3d}  {pattern}" for pattern, n in s["misses"]]
    return lines


def format_table(rows: list[tuple[str, ...]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(HEADER)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*HEADER), fmt.format(*("-" * w for w in widths))] + [fmt.format(*row) for row in rows])


# ------------------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------------------

def default_zoo_models() -> list[str]:
    """The zoo's models that are neither NNCF twins (`cache.TWINS`) nor stateful."""
    from bisect_ov.zoo import cache

    return [n for n, e in cache.MODELS.items() if not n.endswith("_stateful") and not e.builder.startswith("optimum:")]


def machine_facts() -> dict:
    import openvino as ov

    from bisect_ov.run.openvino_device import capabilities, cpu_supports_bf16

    return {"cpu": platform.processor() or platform.machine(), "bf16": cpu_supports_bf16(),
            "f16": "FP16" in capabilities("CPU"), "openvino": ov.get_version(), "cores": os.cpu_count()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="*", help="zoo models (default: every non-twin, non-stateful one; none when "
                                                    "given without names); "
                                                    f"outside-zoo names are allowed too: {sorted(OUTSIDE)}")
    parser.add_argument("--outside", nargs="*", default=None,
                        help="also architectures outside the zoo (all of them, or the names given)")
    for held, nth in zip(HELD_OUT, NTH):
        parser.add_argument(f"--{held}", nargs="*", default=None, help=(
            "also the held-out architectures of benchmarks/holdout.py (all of them, or the names given)" if held == "holdout"
            else f"also the {nth} held-out set, benchmarks/{held}.py (all of it, or the names given)"))
    parser.add_argument("--sites", type=int, default=10, help="fault sites per model (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the sites and the inputs (default 0)")
    parser.add_argument("--target", default="CPU:bf16", choices=TARGETS, help="the target (default CPU:bf16)")
    parser.add_argument("--budget", default="default", choices=("default", "fast"), help="bisect's budget")
    parser.add_argument("--all-ops", action="store_true", help="also put faults on ops that only move values")
    parser.add_argument("--faults", nargs="+", default=["scale"], choices=sorted(FAULTS),
                        help="fault shapes, each site gets each (default: scale)")
    parser.add_argument("--cache", help="root of the model cache (default: the zoo's)")
    parser.add_argument("--json", help="write every row and the summary to this file")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("-q", "--quiet", action="store_true", help="no line per bisect run")
    parser.add_argument("--merge", nargs="+", metavar="JSON",
                        help="print the table and summary of runs written with --json (one process per entry, say), "
                             "run nothing")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.markdown)

    command = "python " + shlex.join([sys.argv[0], *(sys.argv[1:] if argv is None else argv)])
    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    facts = machine_facts()
    print(f"$ {command}")
    print(f"{date}; OpenVINO {facts['openvino']}; CPU bf16: {'yes' if facts['bf16'] else 'no'}, "
          f"f16: {'yes' if facts['f16'] else 'no'}; {facts['cores']} cores")
    if args.target == "CPU:bf16" and not facts["bf16"]:
        print("This CPU has no bf16 (the OpenVINO CPU plugin needs AVX512_BF16 or AMX): CPU:bf16 would run f32 "
              "and there would be no rounding to hide a fault in. Use --target EMU:bf16 instead.")
        return 0
    if args.target == "CPU:f16" and not facts["f16"]:
        print("Note: this CPU has no f16; CPU:f16 runs bf16 here (the plugin's fallback).")
    shapes = ", ".join(f"{f} ({FAULTS[f]['kind']} {FAULTS[f]['magnitude']:g})" for f in args.faults)
    print(f"Reference {REFERENCE}, target {args.target}; faults: {shapes}; {args.sites} sites per model"
          f"{' drawn among all float nodes' if args.all_ops else ''}, seed {args.seed}; budget {args.budget}")

    from bisect_ov.zoo import cache

    zoo_names = args.models if args.models is not None else default_zoo_models()
    outside_names = [] if args.outside is None else (args.outside or list(OUTSIDE))
    jobs = [(n, "outside" if n in OUTSIDE else "zoo") for n in zoo_names]
    jobs += [(n, "outside") for n in outside_names if n not in zoo_names]
    loaders: dict[str, str | None] = {"outside": None}
    for held, (module, table, loader) in HELD_OUT.items():
        asked = getattr(args, held)
        if asked is None:
            continue
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
        entries = getattr(__import__(module), table)
        if set(asked) - set(entries):
            parser.error(f"unknown --{held} entries {sorted(set(asked) - set(entries))}; known: {sorted(entries)}")
        jobs += [(n, held) for n in (asked or list(entries))]
        loaders[held] = f"{module}.{loader}"
    zoo_root = pathlib.Path(args.cache) / cache.version_key() if args.cache else None
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    results, failed = [], []
    for name, source in jobs:
        try:
            if source == "zoo":
                model = cache.load(name, "small", root=zoo_root)
                inputs = cache.sample_inputs(name, "small", args.seed, root=zoo_root, model=model)
            else:
                if loaders.get(source):
                    module, function = loaders[source].split(".")
                    model, meta = getattr(__import__(module), function)(name, args.cache)
                else:
                    model, meta = load_outside(name, args.cache)
                inputs = outside_inputs(meta, model, args.seed)
        except Exception as exc:  # noqa: BLE001 - an architecture that does not build or convert is reported
            failed.append((name, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]))
            print(f"  {name}: not built ({failed[-1][1]})", file=sys.stderr, flush=True)
            continue
        results.append(run_model(name, model, inputs, target=args.target, sites=args.sites, seed=args.seed,
                                 faults=tuple(args.faults),
                                 budget=args.budget, source=source, all_ops=args.all_ops, log=log))
        if log:
            r = results[-1]
            log(f"{name}: {r['hits']}/{r['sites']} hits, {r['skipped']} skipped, {r['seconds']:.0f}s")
        if args.json:  # after each model: a run that is stopped (or killed for memory) keeps what it measured
            write_json(args.json, command, date, facts, args, results, failed)

    print()
    print(format_table(table_rows(results), args.markdown))
    print()
    s = summary(results)
    for line in summary_lines(s):
        print(line)
    for name, why in failed:
        print(f"Not measured: {name}: {why}")
    if args.json:
        write_json(args.json, command, date, facts, args, results, failed)
    return 0


def merge(paths: list[str], markdown: bool) -> int:
    """The table and the summary of several ``--json`` files, as one run over all their models would print them."""
    results = []
    for path in paths:
        data = json.loads(pathlib.Path(path).read_text())
        print(f"{path}: {data['command']} ({data['date']}, target {data['target']})")
        for model in data["models"]:
            rows = [r for r in data["rows"] if r["model"] == model["model"]]
            results.append({**model, "rows": rows})
    print()
    print(format_table(table_rows(results), markdown))
    print()
    for line in summary_lines(summary(results)):
        print(line)
    return 0


def write_json(path: str, command: str, date: str, facts: dict, args: argparse.Namespace, results: list[dict],
               failed: list) -> None:
    """Every row, each model's figures and the summary of `results` so far, as JSON at `path`."""
    pathlib.Path(path).write_text(json.dumps(
        {"command": command, "date": date, "machine": facts, "reference": REFERENCE, "target": args.target,
         "faults": {f: FAULTS[f] for f in args.faults}, "sites_per_model": args.sites, "seed": args.seed,
         "budget": args.budget, "summary": summary(results), "failed": failed,
         "models": [{k: v for k, v in r.items() if k != "rows"} for r in results],
         "rows": [row for r in results for row in r["rows"]]}, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
