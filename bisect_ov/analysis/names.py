"""Names users know: OpenVINO's PyTorch-frontend op names mapped back to the module path and the operation.

The PyTorch frontend names ops after what produced them:

* traced (``ov.convert_model(module, example_input=...)``):
  ``__module.encoder.layer.11.output.dense/aten::linear/MatMul`` = module ``encoder.layer.11.output.dense``,
  PyTorch op ``aten::linear``, OpenVINO op ``MatMul``;
* exported (``torch.export``, then ``ov.convert_model``): ``linear_6/aten.linear.default/MatMul`` = the
  graph's 7th ``linear`` call (the module path is gone), PyTorch op ``aten.linear``, OpenVINO op ``MatMul``;
* ONNX and IR names (``conv2_1/Add``, tensor names) are left as they are.

`pattern` is the name with its layer numbers wildcarded (``__module.model.layers.*.input_layernorm/aten::pow``,
``pow/aten.pow``): nodes with one pattern play the same role in each of a model's repeated blocks, which the
fix search uses to try "this op in every layer" as one candidate. Pure string functions: no OpenVINO.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["TorchName", "parse_name", "pattern", "layer_of", "module_label", "under"]

_TRACED = re.compile(r"^__module\.(?P<module>[^/]+)/(?P<op>aten::[A-Za-z0-9_]+)(?:/(?P<rest>.*))?$")
_EXPORTED = re.compile(r"^(?P<call>[A-Za-z][A-Za-z0-9_]*?)(?:_(?P<n>\d+))?/"
                       r"(?P<op>aten\.[A-Za-z0-9_]+)(?:\.[A-Za-z0-9_]+)?(?:/(?P<rest>.*))?$")
# Module-path segments that hold a block index in transformers and timm models.
_BLOCKS = ("layers", "layer", "h", "blocks", "block", "stages", "encoder_layers", "decoder_layers")


@dataclass(frozen=True)
class TorchName:
    """What a PyTorch-frontend name says: the module path (traced models only), the PyTorch op, the rest."""

    module: str | None
    op: str
    call: str | None = None  # the torch.export call name (``linear_6``)
    rest: str = ""


def under(name: str, prefix: str) -> bool:
    """Whether node `name` lies under `prefix`: a PyTorch module path of a traced name, or the name's leading part
    up to a ``/`` or ``.`` (ONNX, IR and code-built names; a leading ``/`` is optional on either side).

    Examples
    --------
    >>> under("__module.model.layers.3.self_attn.q_proj/aten::linear/MatMul", "model.layers.3")
    True
    >>> under("inorm/sub", "inorm"), under("/layer1/conv/Conv", "layer1"), under("block10/add", "block1")
    (True, True, False)
    """
    prefix = prefix.strip()
    if not prefix:
        return False
    parsed = parse_name(name)
    if parsed is not None and parsed.module is not None and (
            parsed.module == prefix or parsed.module.startswith(prefix + ".")):
        return True
    bare, plain = prefix.strip("/"), name.lstrip("/")
    return bool(bare) and (plain == bare or plain.startswith(bare + "/") or plain.startswith(bare + "."))


def parse_name(name: str) -> TorchName | None:
    """The parts of a PyTorch-frontend op name; None for any other name.

    Examples
    --------
    >>> parse_name("__module.encoder.layer.11.output.dense/aten::linear/MatMul")
    TorchName(module='encoder.layer.11.output.dense', op='aten::linear', call=None, rest='MatMul')
    >>> parse_name("linear_6/aten.linear.default/MatMul").op
    'aten.linear'
    >>> parse_name("conv2_1/Add") is None
    True
    """
    m = _TRACED.match(name)
    if m:
        return TorchName(m["module"], m["op"], None, m["rest"] or "")
    m = _EXPORTED.match(name)
    if m:
        call = m["call"] + (f"_{m['n']}" if m["n"] else "")
        return TorchName(None, m["op"], call, m["rest"] or "")
    return None


def module_label(name: str, op_type: str = "") -> str:
    """The name as a user reads it: ``encoder.layer.11.output.dense (aten::linear -> MatMul)``; others unchanged.

    >>> module_label("__module.model.layers.3.self_attn/aten::softmax/Softmax")
    'model.layers.3.self_attn (aten::softmax -> Softmax)'
    >>> module_label("linear_6/aten.linear.default/MatMul")
    'linear_6 (aten.linear -> MatMul)'
    """
    parsed = parse_name(name)
    if parsed is None:
        return name
    where = parsed.module if parsed.module is not None else parsed.call
    ov_op = parsed.rest.split("/")[-1] if parsed.rest else op_type
    return f"{where} ({parsed.op}" + (f" -> {ov_op})" if ov_op else ")")


def pattern(name: str) -> str:
    """The name with its block numbers wildcarded: one pattern per role in a repeated block.

    >>> pattern("__module.model.layers.3.input_layernorm/aten::pow/Power")
    '__module.model.layers.*.input_layernorm/aten::pow/Power'
    >>> pattern("pow_3/aten.pow.Tensor_Scalar/Power")
    'pow/aten.pow/Power'
    >>> pattern("block3/conv1/Conv")
    'block*/conv*/Conv'
    """
    parsed = parse_name(name)
    if parsed is not None and parsed.module is None:
        tail = parsed.rest.split("/")[-1] if parsed.rest else ""
        call = parsed.call or ""
        base = call.rsplit("_", 1)[0] if call[-1:].isdigit() else call
        return f"{base}/{parsed.op}" + (f"/{tail}" if tail else "")
    return re.sub(r"\d+", "*", name)


def layer_of(name: str) -> str | None:
    """The repeated block a node belongs to (``model.layers.3``), from its module path; None if unknown.

    >>> layer_of("__module.model.layers.3.mlp.down_proj/aten::linear/MatMul")
    'model.layers.3'
    >>> layer_of("linear_6/aten.linear.default/MatMul") is None
    True
    """
    parsed = parse_name(name)
    if parsed is None or parsed.module is None:
        return None
    parts = parsed.module.split(".")
    for i, part in enumerate(parts[:-1]):
        if part in _BLOCKS and parts[i + 1].isdigit():
            return ".".join(parts[: i + 2])
    return None
