"""The `bisect-ov` command line: argument parsing and printing only; the work is in `bisect_ov.pipeline.api`.

Exit codes (`EXIT_CODES`, shown by ``--help``): 0 nothing diverges, 1 something diverges, 2 an error reported on
one line (a bad flag, file, model, device or option; a device that failed), 130 interrupted.
``bisect-ov demo`` runs the whole job on a built-in example model and needs nothing else; it exits 0 when it
ran (its model diverges by design).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from typing import TYPE_CHECKING, Any, Callable, Mapping, NoReturn, Sequence

from bisect_ov.core.errors import BisectError, InputError
from bisect_ov.report.text import printable

if TYPE_CHECKING:
    from bisect_ov.pipeline.options import BisectOptions
    from bisect_ov.report.report import Report

__all__ = ["main", "build_parser", "build_demo_parser", "build_capture_parser", "build_repro_parser", "option_flags",
           "versions", "EXIT_CODES"]

EXIT_OK, EXIT_DIVERGES, EXIT_USER_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_CODES = """exit codes:
  0    nothing diverges (demo and capture: the run completed)
  1    something diverges
  2    an error reported on one line: a bad flag, file, model, device name or option, or a device that
       failed to compile or run
  130  interrupted (Ctrl-C)"""


class _Parser(argparse.ArgumentParser):
    def __init__(self, **keywords) -> None:
        super().__init__(formatter_class=argparse.RawDescriptionHelpFormatter, **keywords)

    def error(self, message: str) -> NoReturn:  # argparse's own errors: one line, exit code 2
        self.exit(EXIT_USER_ERROR, f"bisect-ov: error: {message} (see bisect-ov --help)\n")


def _key_value(text: str) -> tuple[str, str]:
    from bisect_ov.pipeline.options import key_value  # imported when parsing: `import bisect_ov.cli` stays light

    return key_value(text)


def versions() -> str:
    """``bisect_ov <version>``, and OpenVINO's version on a second line when it can be imported."""
    from bisect_ov import __version__

    lines = [f"bisect_ov {__version__}"]
    try:
        import openvino
    except ImportError:
        lines.append("OpenVINO: not installed")
    else:
        lines.append(f"OpenVINO {openvino.get_version()}")
    return "\n".join(lines)


class _Version(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **keywords) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help="print bisect_ov's version and OpenVINO's, and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace, values, option_string=None) -> NoReturn:
        print(versions())
        parser.exit(EXIT_OK)


def option_flags(groups: Mapping[str, Any]) -> None:
    """One flag per `BisectOptions` field with a `cli` spelling, in its concern's argument group, from the
    field's own metadata: a `Flag` as declared, or (``"auto"``) one made from the name, type and default."""
    from dataclasses import MISSING, fields

    from bisect_ov.pipeline.options import BisectOptions, Flag

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


def _common(parser: argparse.ArgumentParser, *, compare: bool) -> None:
    """The flags of a comparison (``bisect-ov MODEL`` when `compare`, ``bisect-ov demo`` otherwise), grouped by
    concern as `BisectOptions` groups its fields."""
    from bisect_ov.pipeline.options import GROUPS

    groups = {key: parser.add_argument_group(title) for key, title in GROUPS.items()}
    devices, samples, output = groups["devices"], groups["samples"], groups["output"]
    devices.add_argument("--ref", default="CPU", help="reference device (default CPU, run in f32): CPU, GPU, CPU:f32, ...")
    devices.add_argument("--target", default=None,
                         help="target device: GPU (default), NPU, CPU:bf16, EMU:f16 (demo default), ...")
    if compare:
        devices.add_argument("--target-model",
                             help="a second model (e.g. the int8 twin) run on the target, matched by name")
        samples.add_argument("--input", action="append", type=_key_value, default=[], metavar="NAME=FILE.npy",
                             help="value of one input (repeatable)")
        samples.add_argument("--inputs", type=pathlib.Path, metavar="FILE.npz",
                             help="values of all inputs, one array per name")
    output.add_argument("--top", type=int, default=10, help="culprits to print (default 10)")
    output.add_argument("--width", type=int, default=120, help="text width of the printed report (default 120)")
    output.add_argument("--json", type=pathlib.Path, help="write the report as JSON to this path")
    output.add_argument("--html", type=pathlib.Path, help="write a standalone HTML report to this path")
    output.add_argument("--ignored-scope", type=pathlib.Path, metavar="OUT.json",
                        help='with --fix, write the nodes to keep as JSON {"names": [...]}, the arguments of '
                             "nncf.IgnoredScope (for a twin quantized with NNCF)")
    option_flags(groups)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="bisect-ov",
        description="Find the node where a model's output on a target device starts to differ from a reference.",
        epilog="commands: 'bisect-ov MODEL ...' compares; 'bisect-ov demo' runs a built-in example; "
               "'bisect-ov capture MODEL -o FILE.npz'\nrecords a run to compare on another machine "
               "(--ref capture:FILE.npz); 'bisect-ov repro MODEL -o FOLDER' writes a reproducer.\n\n" + EXIT_CODES,
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument("model", help="model file: OpenVINO IR .xml, .onnx, or another format OpenVINO reads")
    _common(parser, compare=True)
    return parser


def build_demo_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="bisect-ov demo",
        description="Run bisect on the built-in example model (a small conv net with an instance-norm pattern).",
        epilog=EXIT_CODES,
    )
    parser.add_argument("--version", action=_Version)
    _common(parser, compare=False)
    return parser


def build_capture_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="bisect-ov capture",
        description="Record a run (every intermediate tensor, the inputs, what the device ran with) into one .npz "
                    "file, to compare on another machine: bisect-ov MODEL --ref capture:FILE.npz --target CPU.",
    )
    parser.add_argument("model", help="model file: OpenVINO IR .xml, .onnx, or another format OpenVINO reads")
    parser.add_argument("-o", "--out", type=pathlib.Path, default=pathlib.Path("capture.npz"),
                        help="file to write (default capture.npz); replaced only once complete")
    parser.add_argument("--device", default="CPU", help="device, run as asked (CPU is the plugin's default precision; CPU:f32 for f32)")
    parser.add_argument("--config", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                        help="compile property (repeatable)")
    parser.add_argument("--mode", choices=("full", "stats"), default="full",
                        help="full: every tensor; stats: --sample values per tensor and summary statistics")
    parser.add_argument("--sample", type=int, default=4096, help="values kept per tensor in stats mode (default 4096)")
    parser.add_argument("--input", action="append", type=_key_value, default=[], metavar="NAME=FILE.npy",
                        help="value of one input (repeatable)")
    parser.add_argument("--inputs", type=pathlib.Path, metavar="FILE.npz", help="values of all inputs, one array per name")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs and of the sample positions")
    parser.add_argument("--max-tap-mb", type=float, default=512.0, help="most MB of exposed tensors per compile (default 512)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    return parser


def build_repro_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="bisect-ov repro",
        description="Compare, then write a reproducer of the first divergence (or --node) into a folder: the smallest "
                    "piece of the model that still shows it, as IR with its input values, a run.py that needs only "
                    "OpenVINO and numpy, and a README. Verified before it is written.",
        epilog="exit codes: 0 the reproducer was written; 2 an error reported on one line (nothing diverges, a "
               "non-empty folder without --overwrite, no piece that reproduces, ...); 130 interrupted",
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument("model", help="model file: OpenVINO IR .xml, .onnx, or another format OpenVINO reads")
    parser.add_argument("-o", "--out", type=pathlib.Path, required=True, metavar="FOLDER",
                        help="folder to write (new or empty, or any with --overwrite)")
    parser.add_argument("--node", help="the node to reproduce (default: the first divergence)")
    parser.add_argument("--anonymize", action="store_true",
                        help="replace the piece's weights (same shape, dtype, statistics) and names; kept only if it "
                             "still reproduces")
    parser.add_argument("--overwrite", action="store_true", help="replace a reproducer's files in a non-empty folder")
    parser.add_argument("--max-nodes", type=int, default=48, help="largest piece to grow to (default 48)")
    _common(parser, compare=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--version"]:  # answered before any parser is built: it needs no OpenVINO
        print(versions())
        return EXIT_OK
    command = argv[0] if argv and argv[0] in ("demo", "capture", "repro") and not pathlib.Path(argv[0]).exists() else None
    parsers = {"demo": build_demo_parser, "capture": build_capture_parser, "repro": build_repro_parser}
    try:
        args = parsers[command]().parse_args(argv[1:]) if command else build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, or a usage error already printed on one line
        return int(stop.code or 0)
    commands: dict[str | None, Callable[[argparse.Namespace], int]] = {"demo": _demo, "capture": _capture,
                                                                       "repro": _repro}
    try:
        return commands.get(command, _compare)(args)
    except BisectError as err:
        print(f"bisect-ov: error: {printable(str(err), keep=chr(10))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("bisect-ov: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _inputs(args) -> object:
    import numpy as np

    if args.inputs and args.input:
        raise InputError("Use either --inputs FILE.npz or --input NAME=FILE.npy, not both.")
    if args.inputs:
        return args.inputs
    if not args.input:
        return None
    values = {}
    for name, path in args.input:
        file = pathlib.Path(path)
        if not file.is_file():
            raise InputError(f"Input file for '{name}' not found: '{file}'.")
        if file.suffix.lower() == ".npz":
            raise InputError(f"--input {name}=FILE takes one array (.npy); '{file}' is an .npz of arrays: pass it as "
                             f"--inputs {file} (one array per input name).")
        try:
            values[name] = np.load(file, allow_pickle=False)
        except Exception as err:
            raise InputError(f"Cannot read '{file}' for input '{name}': {err}") from err
    return values


def _options(args) -> "BisectOptions":
    """The `BisectOptions` the flags ask for: each field's parsed flag, converted as its `Flag` says."""
    from dataclasses import fields

    from bisect_ov.pipeline.options import BisectOptions, Flag

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


def _check_output_path(flag: str, path: pathlib.Path | None) -> None:
    """Refuse an output path before the run rather than after it: a missing folder, a folder, no write access."""
    if path is None:
        return
    if path.is_dir():
        raise InputError(f"{flag} '{path}' is a directory; give a file path.")
    folder = path.parent if str(path.parent) else pathlib.Path(".")
    if not folder.is_dir():
        raise InputError(f"{flag} '{path}': the folder '{folder}' does not exist; create it first.")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"{flag} '{path}' cannot be written (no write permission); choose another path.")


def _check_display(args) -> None:
    if args.top < 0:
        raise InputError(f"--top must be 0 or more; got {args.top}.")
    if args.width < 40:
        raise InputError(f"--width must be at least 40 columns; got {args.width}.")
    for flag, path in (("--json", args.json), ("--html", args.html), ("--patched-model", args.patched_model),
                       ("--ignored-scope", getattr(args, "ignored_scope", None))):
        _check_output_path(flag, path)
    if getattr(args, "ignored_scope", None) is not None and not args.fix:
        raise InputError("--ignored-scope writes the nodes a fix keeps: add --fix (or --fix TOL).")


def _run(args, model, target_model=None, inputs=None) -> Report:
    """Run the comparison and write what was asked; returns the report."""
    from bisect_ov.pipeline.api import run

    _check_display(args)
    report = run(model, args.ref, args.target, inputs, _options(args), target_model=target_model)
    print(report.to_text(top=args.top, width=args.width))
    try:
        if args.json:
            report.save(args.json)
            print(f"\nReport written to {printable(str(args.json))}")
        if args.html:
            report.save_html(args.html)
            print(f"HTML report written to {printable(str(args.html))}")
        if getattr(args, "ignored_scope", None) is not None:
            import json

            from bisect_ov.core.fileio import write_text_atomic

            write_text_atomic(args.ignored_scope, json.dumps({"names": report.ignored_scope()}, indent=1) + "\n")
            print(f"NNCF ignored scope written to {printable(str(args.ignored_scope))}: "
                  "nncf.IgnoredScope(**json.load(open(path)))")
    except OSError as err:
        raise InputError(f"Writing the report failed: {err.strerror or err} ('{err.filename or ''}').") from err
    return report


def _compare(args) -> int:
    if args.target is None:
        args.target = "GPU"
    report = _run(args, args.model, args.target_model, _inputs(args))
    return EXIT_DIVERGES if report.diverges else EXIT_OK


def _capture(args) -> int:
    from bisect_ov.capture import load_capture, record

    path = record(
        args.model, args.device, _inputs(args), args.out, config=dict(args.config), mode=args.mode,
        sample=args.sample, seed=args.seed, progress=not args.quiet and sys.stderr.isatty(),
        max_tap_bytes=int(args.max_tap_mb * (1 << 20)) if args.max_tap_mb > 0 else None,
    )
    with load_capture(path) as cap:
        info = cap.device_info
        print(printable(f"Recorded {len(cap.taps)} tensors of {cap.model_label} on {info.name} "
                        f"({info.full_name or info.device}, {info.precision}) into {path} "
                        f"({path.stat().st_size / 1e6:.1f} MB, {cap.mode} mode)."))
        print(printable(f"Compare on another machine: bisect-ov {args.model} --ref capture:{path} "
                        f"--target {args.device}"))
    return EXIT_OK


def _repro(args) -> int:
    from bisect_ov.pipeline.api import run
    from bisect_ov.repro.write import check_folder

    if args.target is None:
        args.target = "GPU"
    if args.max_nodes < 1:
        raise InputError(f"--max-nodes must be at least 1; got {args.max_nodes}.")
    _check_display(args)
    check_folder(args.out, args.overwrite)  # refused before the run, not after it
    report = run(args.model, args.ref, args.target, _inputs(args), _options(args), target_model=args.target_model)
    print(report.to_text(top=args.top, width=args.width))
    if args.json:
        report.save(args.json)
    written = report.repro(args.out, node=args.node, anonymize=args.anonymize, overwrite=args.overwrite,
                           max_nodes=args.max_nodes)
    grown = f", grown {written.grown} step(s) upstream" if written.grown else ""
    anonymized = ("; anonymized" if written.anonymized else
                  "; anonymizing did not reproduce: it holds the model's own weights") if written.anonymize_tried else ""
    print(printable(f"\nReproducer of '{written.node}' ({written.op_type}, {len(written.nodes)} node(s){grown}) written "
                    f"to {written.folder}: {report.metric} {written.error:.2e} on the target against the local error "
                    f"{written.local_error:.2e} (tolerance {written.tolerance:.2e}){anonymized}. Run: python "
                    f"{pathlib.Path(written.folder) / 'run.py'}"))
    return EXIT_OK


def _demo(args) -> int:
    from bisect_ov.zoo.synthetic import demo

    if args.target is None:
        args.target = "EMU:f16"
    print(printable(f"Demo: the built-in example model, {args.ref} (f32) against {args.target}.") + "\n")
    _run(args, demo())
    # The demo diverges by design: having shown it, it succeeded (exit codes 1/0 are for real comparisons).
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
