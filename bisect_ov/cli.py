"""The `bisect-ov` command line: argument parsing and printing only; the work is in `bisect_ov.pipeline.api`.

Exit codes (`EXIT_CODES`, shown by ``--help``): 0 nothing diverges, 1 something diverges, 2 an error reported on
one line (a bad flag, file, model, device or option; a device that failed), 130 interrupted, 141 the reader of
the output went away. ``bisect-ov demo`` runs the whole job on a built-in example model and needs nothing else;
it exits 0 when it ran (its model diverges by design).

Output: the report's text on stdout (on stderr when stdout carries the JSON or the HTML page, ``--json -``),
errors on one line on stderr. A reader that goes away (``| head -1``) ends the text, not the job: the files
asked for are still written, and the exit code is 141, what a shell reports for a command SIGPIPE ended
(`bisect_ov.core.console.Console`). Ctrl-C, wherever it lands (in a compile too: OpenVINO hands an interrupted Python callback back as
an error, `bisect_ov.core.errors.interrupted`), ends with "interrupted" and 130; files are only ever written
whole (`bisect_ov.core.fileio`). Diagnostics go through the ``bisect_ov`` logger: warnings on stderr, ``-v``
adds progress (each stage's cost), ``-vv`` every compile, ``--log-file`` appends everything to a file.

Assumes the parsers are built per call (``main`` is re-entrant: tests call it in-process); imports at module
level stay light, so that a Ctrl-C right after start still lands in ``main``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import pathlib
import shlex
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator, NoReturn, Sequence

from bisect_ov.core.console import Console, LogFile, to_null, usable_streams
from bisect_ov.core.errors import BisectError, InputError, interrupted

if TYPE_CHECKING:
    from bisect_ov.pipeline.options import BisectOptions
    from bisect_ov.report.report import Report

__all__ = ["main", "build_parser", "build_demo_parser", "build_capture_parser", "build_repro_parser",
           "build_pipeline_parser", "versions", "EXIT_CODES", "Console"]

EXIT_OK, EXIT_DIVERGES, EXIT_USER_ERROR, EXIT_INTERRUPTED, EXIT_READER_GONE = 0, 1, 2, 130, 141
EXIT_CODES = """exit codes:
  0    nothing diverges (demo and capture: the run completed)
  1    something diverges
  2    an error reported on one line: a bad flag, file, model, device name or option, or a device that
       failed to compile or run
  130  interrupted (Ctrl-C); no file is left half-written
  141  the reader of the output went away (a closed pipe, as with '| head -1'): the rest of the text is
       dropped, the files asked for are still written"""
log = logging.getLogger(__name__)


def printable(text: str, *, keep: str = "") -> str:
    """`bisect_ov.report.text.printable`, imported when first needed (it imports the report's view)."""
    from bisect_ov.report.text import printable as escaped
    return escaped(text, keep=keep)


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

    try:
        import openvino
    except ImportError:
        return f"bisect_ov {__version__}\nOpenVINO: not installed"
    return f"bisect_ov {__version__}\nOpenVINO {openvino.get_version()}"


class _Version(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **keywords) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help="print bisect_ov's version and OpenVINO's, and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace, values, option_string=None) -> NoReturn:
        Console().say(versions())
        parser.exit(EXIT_OK)


def _diagnostics(group: Any) -> None:
    """``-v`` and ``--log-file``, in `group` (every command has them)."""
    group.add_argument("-v", "--verbose", action="count", default=0,
                       help="more diagnostics on stderr: -v each stage's time and cost, -vv every compile")
    group.add_argument("--log-file", type=pathlib.Path, metavar="FILE",
                       help="append every diagnostic (debug level, with timestamps) and the full text of an error to FILE")


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
        devices.add_argument("--target-model", help="a second model (e.g. the int8 twin) run on the target, matched by name")
        samples.add_argument("--input", action="append", type=_key_value, default=[], metavar="NAME=FILE.npy",
                             help="value of one input (repeatable)")
        samples.add_argument("--inputs", type=pathlib.Path, metavar="FILE.npz|FOLDER",
                             help="values of all inputs: an .npz with one array per input name (or an .npy for a "
                                  "single input), or a folder of such files, one sample each")
    output.add_argument("--top", type=int, default=10, help="culprits to print (default 10; the HTML page: at least 25)")
    output.add_argument("--width", type=int, help="text width of the printed report (default: the terminal's, at most 120)")
    output.add_argument("--json", type=pathlib.Path, metavar="FILE",
                        help="write the report as JSON to FILE ('-': to stdout, the text then going to stderr)")
    output.add_argument("--html", type=pathlib.Path, metavar="FILE",
                        help="write a standalone HTML report to FILE ('-': to stdout, the text then going to stderr)")
    output.add_argument("--ignored-scope", type=pathlib.Path, metavar="OUT.json",
                        help='with --fix, write the nodes to keep as JSON {"names": [...]}, the arguments of '
                             "nncf.IgnoredScope (for a twin quantized with NNCF)")
    from bisect_ov.pipeline.flags import option_flags

    option_flags(groups)
    _diagnostics(output)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="bisect-ov",
        description="Find the node where a model's output on a target device starts to differ from a reference.",
        epilog="commands: 'bisect-ov MODEL ...' compares; 'bisect-ov demo' runs a built-in example; "
               "'bisect-ov capture MODEL -o FILE.npz'\nrecords a run to compare on another machine "
               "(--ref capture:FILE.npz); 'bisect-ov repro MODEL -o FOLDER' writes a reproducer.\nA model file named "
               "like a command is given as ./demo.\n\n" + EXIT_CODES,
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
        epilog=EXIT_CODES.replace("  1    something diverges\n", ""),
    )
    parser.add_argument("--version", action=_Version)
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
    parser.add_argument("--max-tap-mb", type=float, default=512.0,
                        help="most MB of exposed tensors per compile, 0 for no limit (default 512)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    _diagnostics(parser)
    return parser


def build_pipeline_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="bisect-ov pipeline", epilog=EXIT_CODES,
                     description="Compare a pipeline of models (an optimum-intel export folder of a seq2seq model, "
                                 "Whisper, LLaVA or Stable Diffusion): each component on the reference's inputs, the "
                                 "pipeline end to end, then the first diverging component node by node.")
    parser.add_argument("--version", action=_Version)
    parser.add_argument("folder", help="the export folder (openvino_encoder_model.xml, openvino_decoder_model.xml, ...)")
    parser.add_argument("--prompt", help="text, tokenized with the folder's tokenizer (default: random token ids)")
    parser.add_argument("--tokens", help="token ids, comma-separated, instead of a prompt")
    parser.add_argument("--inputs", metavar="FILE",
                        help="the pipeline's input from a file: .npy (token ids, or Whisper's input_features) or .npz "
                             "(arrays by name: input_ids, attention_mask, input_features)")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="bound on the generation (default 16)")
    parser.add_argument("--denoising-steps", type=int, default=4,
                        help="a diffusion pipeline's denoising steps, from the same seeded latents (default 4)")
    parser.add_argument("--target-component", action="append", type=_key_value, default=[], metavar="NAME=FILE.xml",
                        help="run FILE on the target in place of component NAME (repeatable)")
    _common(parser, compare=False)
    return parser


def build_repro_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="bisect-ov repro",
        description="Compare, then write a reproducer of the first divergence (or --node) into a folder: the smallest "
                    "piece of the model that still shows it, as IR with its input values, a run.py that needs only "
                    "OpenVINO and numpy, and a README. Verified before it is written.",
        epilog="exit codes: 0 the reproducer was written; 2 an error reported on one line (nothing diverges, a "
               "non-empty folder without --overwrite, no piece that reproduces, ...); 130 interrupted; 141 the reader of "
               "the output went away",
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument("model", help="model file: OpenVINO IR .xml, .onnx, or another format OpenVINO reads")
    parser.add_argument("-o", "--out", required=True, metavar="FOLDER",
                        help="folder to write (new or empty, or any with --overwrite)")
    parser.add_argument("--node", help="the node to reproduce (default: the first divergence)")
    parser.add_argument("--anonymize", action="store_true",
                        help="replace the piece's weights (same shape, dtype, statistics) and names; kept only if it "
                             "still reproduces")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier reproducer (a folder holding its repro.json; other files in it are kept)")
    parser.add_argument("--max-nodes", type=int, default=48, help="largest piece to grow to (default 48)")
    _common(parser, compare=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    with usable_streams():
        console = Console()
        try:
            code = _main(argv, console)
        except KeyboardInterrupt:
            code = _interrupted(console)
        except BrokenPipeError:  # a write outside the console (a library printing): the reader is gone all the same
            to_null(sys.stdout)
            console.reader_gone = True
            code = EXIT_READER_GONE
        return console.exit_code(code, lost=EXIT_USER_ERROR, gone=EXIT_READER_GONE, ran=(EXIT_OK, EXIT_DIVERGES))


def _main(argv: list[str], console: Console) -> int:
    if argv[:1] == ["--version"]:  # answered before any parser is built: it needs no OpenVINO
        console.say(versions())
        return EXIT_OK
    names = ("demo", "capture", "repro", "pipeline")
    # A command word is the command even where a file or folder has its name (report.repro("repro/") makes one):
    # such a model is named ./demo.
    command = argv[0] if argv and argv[0] in names else None
    parsers = {"demo": build_demo_parser, "capture": build_capture_parser, "repro": build_repro_parser,
               "pipeline": build_pipeline_parser}
    try:
        args = parsers[command]().parse_args(argv[1:]) if command else build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, or a usage error already printed on one line
        return int(stop.code or 0)
    commands: dict[str | None, Callable[[argparse.Namespace, Console], int]] = {
        "demo": _demo, "capture": _capture, "repro": _repro, "pipeline": _pipeline}
    try:
        from bisect_ov.pipeline.flags import check_paths

        check_paths(args, command)  # before the log file is opened: it may be one of them
        with _diagnostics_to(args, argv):
            try:
                return commands.get(command, _compare)(args, console)
            except Exception as err:
                if interrupted(err):  # a Ctrl-C that crossed OpenVINO's C++ as an error
                    raise KeyboardInterrupt from err
                if not isinstance(err, BisectError):
                    raise
                log.debug("The error in full:", exc_info=True)
                console.error(f"bisect-ov: error: {printable(str(err), keep=chr(10))}")
                return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return _interrupted(console)
    except BisectError as err:  # the log file cannot be opened
        console.error(f"bisect-ov: error: {printable(str(err), keep=chr(10))}")
        return EXIT_USER_ERROR


def _interrupted(console: Console) -> int:
    console.error("bisect-ov: interrupted")
    return EXIT_INTERRUPTED


class _ConsoleFormat(logging.Formatter):
    """``bisect-ov: warning: ...`` (progress without a level), control characters escaped."""

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno == logging.INFO else record.levelname.lower() + ": "
        return f"bisect-ov: {level}{printable(super().format(record), keep=chr(10))}"


@contextlib.contextmanager
def _diagnostics_to(args: argparse.Namespace, argv: Sequence[str]) -> Iterator[None]:
    """The ``bisect_ov`` logger's records on stderr (warnings; ``-v`` progress, ``-vv`` debug) and, with
    ``--log-file``, all of them appended to that file, while the command runs; the logger as it was after."""
    from bisect_ov.core.fileio import check_writable

    logger = logging.getLogger("bisect_ov")
    handlers: list[logging.Handler] = []
    console = logging.StreamHandler(sys.stderr)
    console.setLevel({0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG))
    console.setFormatter(_ConsoleFormat())
    handlers.append(console)
    if args.log_file is not None:
        check_writable(args.log_file, what="the log file ")
        try:
            file = LogFile(args.log_file, mode="a", encoding="utf-8")
        except OSError as err:
            raise InputError(f"Cannot open the log file '{args.log_file}': {err.strerror or err}.") from err
        file.setLevel(logging.DEBUG)
        file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handlers.append(file)
    saved = logger.level, logger.propagate
    logger.setLevel(min(h.level for h in handlers))
    logger.propagate = False  # the command's own handlers speak for it; nothing twice through the root logger
    for handler in handlers:
        logger.addHandler(handler)
    try:
        log.debug("bisect-ov %s", " ".join(argv))
        log.debug("%s", versions().replace("\n", "; "))
        for handler in handlers:
            if isinstance(handler, LogFile):
                handler.started(args.log_file)
        yield
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


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
            from bisect_ov.run.inputs import numpy_reason

            raise InputError(f"Cannot read '{file}' for input '{name}': {numpy_reason(file, err)}.") from err
    return values


def _options(args) -> "BisectOptions":
    from bisect_ov.pipeline.flags import options_from_args

    return options_from_args(args)


def _check_display(args, console: Console) -> None:
    """Refuse display options that cannot be honoured; with a file on stdout, the text goes to stderr."""
    from bisect_ov.core.fileio import check_writable

    args.width = console.columns() if args.width is None else args.width
    for flag, value, low, what in (("--top", args.top, 0, "0 or more"), ("--width", args.width, 40, "at least 40 columns")):
        if value < low:
            raise InputError(f"{flag} must be {what}; got {value}.")
    if _stdout(args.json) and _stdout(args.html):
        raise InputError("--json - and --html - both ask for stdout: write one of them to a file.")
    for flag, path in (("--json", args.json), ("--html", args.html), ("--patched-model", args.patched_model),
                       ("--ignored-scope", getattr(args, "ignored_scope", None))):
        if path is not None and not _stdout(path):
            check_writable(path, what=f"{flag} ", error=InputError)
    if getattr(args, "ignored_scope", None) is not None and not args.fix:
        raise InputError("--ignored-scope writes the nodes a fix keeps: add --fix (or --fix TOL).")
    if _stdout(args.json) or _stdout(args.html):
        console.text = sys.stderr  # stdout carries the file: the text must not mix with it


def _stdout(path: pathlib.Path | None) -> bool:
    return path is not None and str(path) == "-"


def _run(args, console: Console, model, target_model=None, inputs=None) -> Report:
    """Run the comparison and write what was asked; returns the report."""
    from bisect_ov.pipeline.api import run

    _check_display(args, console)
    report = run(model, args.ref, args.target, inputs, _options(args), target_model=target_model)
    console.say(report.to_text(top=args.top, width=args.width, costs=args.verbose > 0))
    _write(args, console, report, report)
    return report


def _write(args, console: Console, report: Any, examined: Report | None) -> None:
    """Write --json (`report`), --html and --ignored-scope (`examined`'s: a pipeline's component, None if none was)."""
    import json

    from bisect_ov.core.fileio import write_text_atomic
    from bisect_ov.report.blocks import made_up_names
    from bisect_ov.report.html import render_page
    from bisect_ov.report.pipeline import PipelineReport

    try:
        if args.json:
            if _stdout(args.json):
                console.data(report.to_json())
            else:
                report.save(args.json)
                console.say(f"\nReport written to {printable(str(args.json))}")
        if args.html:  # a pipeline's page: its components, then the examined one's node-level page
            if _stdout(args.html):
                console.data(report.page(top=max(args.top, 25)) if isinstance(report, PipelineReport) else
                             render_page(report, top=max(args.top, 25)))
            else:
                report.save_html(args.html, top=max(args.top, 25))
                console.say(f"HTML report written to {printable(str(args.html))}")
        if getattr(args, "ignored_scope", None) is not None:
            if examined is None or examined.fix is None or not examined.fix.solved:
                console.say("No ignored scope written: " + ("no component diverged, so none was examined node by node."
                            if examined is None else "no fix brings the outputs within their tolerance."))
            else:
                write_text_atomic(args.ignored_scope, json.dumps({"names": examined.ignored_scope()}, indent=1) + "\n")
                console.say(f"NNCF ignored scope written to {printable(str(args.ignored_scope))}: "
                            "nncf.IgnoredScope(**json.load(open(path)))")
                if made_up := made_up_names(examined.ignored_scope()):
                    console.say(f"  {', '.join(made_up)}: made up by the converter from a counter: quantize this IR")
    except OSError as err:
        if isinstance(err, BisectError):
            raise
        raise InputError(f"Writing the report failed: {err.strerror or err} ('{err.filename or ''}').") from err


def _compare(args, console: Console) -> int:
    if args.target is None:
        args.target = "GPU"
    report = _run(args, console, args.model, args.target_model, _inputs(args))
    return EXIT_DIVERGES if report.diverges else EXIT_OK


def _capture(args, console: Console) -> int:
    from bisect_ov.capture import load_capture, record
    from bisect_ov.core.checks import tap_bytes_of_mb

    if _stdout(args.out):
        raise InputError("-o - would write the capture to stdout; a capture is an .npz file written whole. Pass a file "
                         "name, such as capture.npz (or ./- for a file of that name).")
    path = record(
        _model(args.model), args.device, _inputs(args), args.out, config=dict(args.config), mode=args.mode,
        sample=args.sample, seed=args.seed, progress=not args.quiet and sys.stderr.isatty(),
        max_tap_bytes=tap_bytes_of_mb("--max-tap-mb", args.max_tap_mb),
    )
    with load_capture(path) as cap:
        info = cap.device_info
        console.say(printable(f"Recorded {len(cap.taps)} tensors of {cap.model_label} on {info.name} "
                              f"({info.full_name or info.device}, {info.precision}) into {path} "
                              f"({path.stat().st_size / 1e6:.1f} MB, {cap.mode} mode)."))
        console.say(printable(f"Compare on another machine: bisect-ov {shlex.quote(str(args.model))} --ref "
                              f"{shlex.quote(f'capture:{path}')} --target {shlex.quote(str(args.device))}"))
    return EXIT_OK


def _repro(args, console: Console) -> int:
    from bisect_ov.capture.device import refuse_recorded_target
    from bisect_ov.repro.folder import check_folder, inside

    if args.target is None:
        args.target = "GPU"
    if args.max_nodes < 1:
        raise InputError(f"--max-nodes must be at least 1; got {args.max_nodes}.")
    folder = check_folder(args.out, args.overwrite)  # refused before the run, not after it
    refuse_recorded_target(args.target)  # a recording runs no piece: said before the run, not after it
    for flag, path in (("--json", args.json), ("--html", args.html), ("--patched-model", args.patched_model),
                       ("--ignored-scope", args.ignored_scope)):
        if path is not None and not _stdout(path) and inside(path, folder):
            raise InputError(f"{flag} {path} would be written inside the reproducer's folder '{args.out}', which is "
                             "replaced as a whole: write it elsewhere.")
    report = _run(args, console, _model(args.model), args.target_model, _inputs(args))
    written = report.repro(args.out, node=args.node, anonymize=args.anonymize, overwrite=args.overwrite,
                           max_nodes=args.max_nodes)
    grown = f", grown {written.grown} step(s) upstream" if written.grown else ""
    anonymized = ("; anonymized" if written.anonymized else
                  "; anonymizing did not reproduce: it holds the model's own weights") if written.anonymize_tried else ""
    console.say("\n" + printable(f"Reproducer of '{written.node}' ({written.op_type}, {len(written.nodes)} node(s){grown}) "
                          f"written to {written.folder}: {report.metric} {written.error:.2e} on the target against the "
                          f"{written.held_to} {written.local_error:.2e} (tolerance {written.tolerance:.2e}){anonymized}. Run: "
                          f"python {shlex.quote(str(pathlib.Path(written.folder) / 'run.py'))}"))
    return EXIT_OK


def _model(name: str):
    """The model argument of capture and repro: ``demo`` is the built-in example (a file of that name: ./demo)."""
    if name == "demo":
        from bisect_ov.zoo.synthetic import demo

        return demo()
    return name


def _side_label(name: str, config, role: str) -> str:
    """`name`, with the precision it will run in when the name has no suffix saying it (``CPU (f32)``, ``EMU:f16``)."""
    import bisect_ov.capture.device  # noqa: F401 -- registers the capture:FILE devices
    from bisect_ov.run.devices import make_device

    device = make_device(name, dict(config), role=role)
    precision = "" if device.emulated or device.recorded or ":" in name else device.activation_precision
    return f"{name} ({precision})" if precision else name


def _demo(args, console: Console) -> int:
    from bisect_ov.zoo.synthetic import demo

    if args.target is None:
        args.target = "EMU:f16"
    _check_display(args, console)
    import textwrap

    # The devices first: an unknown name or precision is the one line printed, not after a header naming it.
    ref, target = _side_label(args.ref, args.ref_config, "ref"), _side_label(args.target, args.target_config, "target")
    header = printable(f"Demo: the built-in example model, {ref} against {target}.")
    console.say("\n".join(textwrap.wrap(header, args.width, subsequent_indent="    ")) + "\n")
    _run(args, console, demo())
    # The demo diverges by design: having shown it, it succeeded (exit codes 1/0 are for real comparisons).
    return EXIT_OK


def _pipeline(args, console: Console) -> int:
    from bisect_ov.components.api import run_pipeline

    _check_display(args, console)
    try:
        tokens: Any = [int(t) for t in args.tokens.split(",")] if args.tokens else None
    except ValueError:
        raise InputError(f"--tokens takes comma-separated integers; got '{args.tokens}'.") from None
    if args.inputs:
        if tokens is not None:
            raise InputError("Give --tokens or --inputs, not both.")
        tokens = pathlib.Path(args.inputs)  # a file: read by the pipeline (a path, never taken for a prompt)
    report = run_pipeline(args.folder, args.ref, args.target or "GPU", tokens, _options(args), prompt=args.prompt,
                          target_models=dict(args.target_component), max_new_tokens=args.max_new_tokens,
                          denoising_steps=args.denoising_steps)
    console.say(report.to_text(top=args.top, width=args.width))
    _write(args, console, report, report.report)
    return EXIT_DIVERGES if report.diverges else EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
