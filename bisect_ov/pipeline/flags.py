"""The command line's flags for `BisectOptions`, made from the fields' own metadata, and read back.

`option_flags` adds one flag per field that has a ``cli`` spelling to the argument group of its concern;
`options_from_args` turns the parsed flags into the `BisectOptions` they ask for; `check_paths` refuses a command
line whose outputs would be written over what it reads. Every command that compares
(``bisect-ov MODEL``, ``demo``, ``repro``, ``pipeline``) builds its flags here, so a new option reaches all of
them at once.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any, Mapping

from bisect_ov.core.fileio import labelled_files, refuse_overlaps
from bisect_ov.pipeline.options import BisectOptions, Flag

__all__ = ["option_flags", "options_from_args", "check_paths"]


def option_flags(groups: Mapping[str, Any]) -> None:
    """One flag per `BisectOptions` field with a `cli` spelling, in its concern's argument group, from the
    field's own metadata: a `Flag` as declared, or (``"auto"``) one made from the name, type and default."""
    for f in fields(BisectOptions):
        spec, meta = f.metadata["cli"], f.metadata
        if spec is None:
            continue
        group, doc = groups[meta["group"]], meta["help"]
        if isinstance(spec, Flag):
            group.add_argument(*spec.names, dest=f.name, help=doc, **dict(spec.spec))
            continue
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not MISSING else None
        if isinstance(default, bool):
            if default:
                group.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false", help=doc)
            else:
                group.add_argument(flag, dest=f.name, action="store_true", help=doc)
            continue
        kind = meta["kind"] or str
        if isinstance(default, tuple):
            group.add_argument(flag, dest=f.name, action="append", type=kind, default=[], metavar=meta["metavar"],
                               help=f"{doc} (repeatable)")
            continue
        extra = {"choices": list(meta["choices"])} if meta["choices"] else {}
        shown = f" (default {default})" if default is not None and "default" not in doc else ""
        group.add_argument(flag, dest=f.name, type=kind, default=default, metavar=meta["metavar"], help=doc + shown,
                           **extra)


def options_from_args(args: Any) -> BisectOptions:
    """The `BisectOptions` the flags ask for: each field's parsed flag, converted as its `Flag` says."""
    values = {}
    for f in fields(BisectOptions):
        spec = f.metadata["cli"]
        if spec is None:
            continue
        value = getattr(args, f.name)
        if isinstance(spec, Flag) and spec.to_option is not None:
            value = spec.to_option(value)
        values[f.name] = tuple(value) if isinstance(f.default, tuple) else value
    return BisectOptions.from_keywords(**values)


def check_paths(args: Any, command: str | None) -> None:
    """Refuse a command line whose outputs name a file it reads (the model, its weights, an input, a capture)
    or one another, before anything is read or written. `command`: ``capture``, ``repro``, ``demo``,
    ``pipeline``, or None for ``bisect-ov MODEL``."""
    outputs = [("--json", getattr(args, "json", None)), ("--html", getattr(args, "html", None)),
               ("--ignored-scope", getattr(args, "ignored_scope", None)),
               *labelled_files("--patched-model", getattr(args, "patched_model", None)),  # an .xml (the options check)
               ("--log-file", args.log_file), ("-o", getattr(args, "out", None) if command in ("capture", "repro") else None)]
    model = getattr(args, "model", None)
    inputs = [*labelled_files("the model", model if command is None or model != "demo" else None),
              *labelled_files("--target-model", getattr(args, "target_model", None)),
              ("--inputs", getattr(args, "inputs", None)), ("the export folder", getattr(args, "folder", None)),
              *((f"--input {name}", path) for name, path in getattr(args, "input", ())),
              *(pair for name, path in getattr(args, "target_component", ())
                for pair in labelled_files(f"--target-component {name}", path)),
              *((f"the recording {flag} replays", device.split(":", 1)[1])
                for flag, device in (("--ref", getattr(args, "ref", None)), ("--target", getattr(args, "target", None)),
                                     ("--device", getattr(args, "device", None)))
                if isinstance(device, str) and device.startswith("capture:"))]
    refuse_overlaps(outputs, inputs, folders=("-o",) if command == "repro" else ())
