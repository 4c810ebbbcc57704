"""Saved reports of older schema versions, brought to the current one before they are decoded.

Each step takes the JSON dict of one version to the next; `upgrade` runs the steps from a file's version up
to `SCHEMA_VERSION`. The input is never changed (the steps copy what they rewrite).

* 1 -> 2: experiments that did not run were ``{}`` (now null); the samples summary named its top-k fields
  after k (``top5_misses``); the fix carried its derived ``solved`` (still written, ignored on reading).
* 2 -> 3: a node's causes were sentences only; they become `Cause` records (``diagnosis``) whose kind is read
  from how the sentence starts (`bisect_ov.analysis.diagnosis.kind_of_text`) and whose numbers are unknown
  (``{}``): the sentences hold them as they were written. The pipeline stage ``capture`` is now ``measure``
  in the costs; options never recorded (``{}``) are null. A batch of samples (the work sent to a worker) was
  called a unit: ``samples_per_unit``, ``unit_retries``, ``unit_seconds`` and ``spread_unit_seconds`` are now
  ``samples_per_batch``, ``batch_retries``, ``batch_seconds`` and ``spread_batch_seconds``. The fix's nodes
  (``keep``, which read like the ``keep=`` option) are ``on_reference``.

* 3 -> 4: non-finite numbers are written ``"Infinity"``, ``"-Infinity"``, ``"NaN"`` (were ``"inf"``, ``"-inf"``,
  ``"nan"``); the codec reads both spellings, so nothing is rewritten: the version tells an older bisect_ov that
  it cannot read the new spelling.

Fields added since with a default need no step and no new version: a node's ``inside_kernel`` (the target's
fused kernel its tensor exists only inside) is absent from reports saved before it, and reads as null
(unknown, taken as stored); the role ``internal`` is a new value of a string field; each side's
``openvino_version`` (`DeviceInfo`) reads as empty (unknown) in reports saved before the sides recorded it.
A side's ``recorded`` (replayed from a capture) is read, in reports saved before it, from the device name a
recorded side had (``capture:<file>``).

Assumes the dict came from JSON (plain dicts, lists, strings and numbers); what is not the shape a step
expects is left alone for the codec to refuse with the field's name.
"""

from __future__ import annotations

from typing import Any, Mapping

from bisect_ov.analysis.diagnosis import kind_of_text

__all__ = ["SCHEMA_VERSION", "upgrade"]

# 2: typed records (fix, delegation, curve, fidelity, noise, samples), null when not run.
# 3: causes as records, and typed tolerance, options, inputs and costs (stage "capture" renamed "measure").
# 4: non-finite numbers spelled as the protobuf JSON mapping spells them ("Infinity", "NaN").
SCHEMA_VERSION = 4

RENAMED_STAGES = {"capture": "measure"}
RENAMED_OPTIONS = {"samples_per_unit": "samples_per_batch", "unit_retries": "batch_retries"}
RENAMED_FIX = {"keep": "on_reference"}
RENAMED_SAMPLES = {"unit_seconds": "batch_seconds", "spread_unit_seconds": "spread_batch_seconds"}


def upgrade(d: Mapping[str, Any], version: int) -> dict[str, Any]:
    """`d`, a report of schema `version`, as a report of `SCHEMA_VERSION` (a new dict)."""
    data = dict(d)
    if version < 2:
        data = _v1_to_v2(data)
    if version < 3:
        data = _v2_to_v3(data)
    for role in ("ref", "target"):
        side = data.get(role)
        if isinstance(side, dict) and "recorded" not in side:
            data[role] = {**side, "recorded": str(side.get("name", "")).startswith("capture:")}
    data["schema_version"] = SCHEMA_VERSION
    return data


def _v1_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    for key in ("fidelity", "noise", "fix", "delegation", "samples"):
        if d.get(key) == {}:
            d[key] = None
    samples = d.get("samples")
    if isinstance(samples, dict):
        samples = dict(samples)
        for name in list(samples):
            if name.startswith("top") and name.endswith("_misses") and name != "top1_misses":
                k = name[3:-len("_misses")]
                if k.isdigit():
                    samples["k"] = int(k)
                    samples["topk_misses"] = samples.pop(name)
                    samples["topk_missed"] = samples.pop(f"top{k}_missed", [])
        d["samples"] = samples
    return d


def _v2_to_v3(d: dict[str, Any]) -> dict[str, Any]:
    nodes = d.get("nodes")
    if isinstance(nodes, list):
        d["nodes"] = [_node_v3(n) for n in nodes]
    costs = d.get("costs")
    if isinstance(costs, dict):
        # Keep the stages' order: it is the order they ran in.
        d["costs"] = {RENAMED_STAGES.get(k, k): v for k, v in costs.items()}
    if d.get("options") == {}:
        d["options"] = None
    for key, renamed in (("options", RENAMED_OPTIONS), ("samples", RENAMED_SAMPLES), ("fix", RENAMED_FIX)):
        if isinstance(d.get(key), dict):
            d[key] = {renamed.get(k, k): v for k, v in d[key].items()}
    return d


def _node_v3(node: Any) -> Any:
    if not isinstance(node, dict) or "diagnosis" in node:
        return node
    causes = node.get("causes", [])
    out = {k: v for k, v in node.items() if k != "causes"}
    # What is not a list of sentences goes through as it is, for the codec to refuse with the field's name.
    out["diagnosis"] = ([{"kind": kind_of_text(c), "text": c, "numbers": {}} if isinstance(c, str) else c
                         for c in causes] if isinstance(causes, list) else causes)
    return out
