"""The `vitkit` command: one module per subcommand, each only parsing arguments and calling the library.

Errors a user can cause end as one line on stderr and exit code 2: a VitkitError, a bad flag (argparse
converts every number flag; its range is checked once, by the limit on the request or run-config field it
becomes, or here by `Parser` for the commands that make no request), and an operating-system error on a
file vitkit reads or writes (permission denied, a full disk, a folder where a file was expected, ...).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import math
import os
import signal
import sys
import warnings
from pathlib import Path

from vitkit import __version__
from vitkit.errors import VitkitError
from vitkit.limits import DOMAINS, MAX_INT, limit_problem

# subcommand -> module under vitkit.cli (imported lazily, so `vitkit models` never loads training code)
COMMANDS = {
    "models": "models",
    "benchmark": "benchmark",
    "export": "export",
    "push": "push",
    "inspect": "inspect_cmd",
    "convert": "convert",
    "info": "info",
    "train": "train",
    "eval": "eval",
    "predict": "predict",
    "data": "data",
    "finetune": "finetune",
    "fewshot": "fewshot",
    "linear-probe": "linear_probe",
    "knn": "knn",
}


# the commands whose number flags become no typed request nor run-config key: their ranges are checked here, every
# int >= 0 and every float finite and >= 0; other commands' flags are checked by the limits on their request's fields
UNREQUESTED = ("benchmark", "convert", "export", "info", "models", "predict")
# these must be >= 1 too ("--batch-size 0" is no batch)
POSITIVE_FLAGS = {"batch_size", "top", "image_size", "batch", "rounds"}
# --image-size H [W]
NARGS_AT_MOST = {"image_size": 2}


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2), for every subcommand; number flags of the UNREQUESTED commands
    checked."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")

    def add_argument(self, *names, **kwargs):
        kind = kwargs.get("type")
        if kind in (int, float) and self.prog.split()[-1] in UNREQUESTED:
            dest = kwargs.get("dest") or next((n for n in names if n.startswith("--")), names[0]).lstrip("-").replace(
                "-", "_"
            )
            kwargs["type"] = _checked_int(dest) if kind is int else _finite_float
        action = super().add_argument(*names, **kwargs)
        if action.dest in NARGS_AT_MOST and action.nargs == "+":
            action.at_most = NARGS_AT_MOST[action.dest]
        return action

    def parse_known_args(self, args=None, namespace=None):
        namespace, extra = super().parse_known_args(args, namespace)
        for action in self._actions:
            values = getattr(namespace, action.dest, None)
            limit = getattr(action, "at_most", None)
            if limit and isinstance(values, list) and len(values) > limit:
                self.error(
                    f"argument {'/'.join(action.option_strings)}: takes at most {limit} values, got {len(values)}"
                )
        return namespace, extra


def _checked_int(dest: str):
    low = 1 if dest in POSITIVE_FLAGS else 0
    domain = DOMAINS.get(dest)  # --threads, --image-size: their keys' domains

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= MAX_INT:
            raise argparse.ArgumentTypeError(f"expected a whole number from {low} to {MAX_INT}, got {text!r}")
        problem = domain and limit_problem(value, domain, given=text)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__ = "int"
    return parse


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def image_size_arg(values: list[int] | None) -> tuple[int, int] | None:
    """--image-size H [W] as (H, W), by the one parser of sizes (`models.config.size_pair`); None where not given."""
    from vitkit.models.config import size_pair

    return None if values is None else size_pair(values, "--image-size")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="vitkit", description="Vision Transformers (Dosovitskiy et al., 2021) in PyTorch.")
    parser.add_argument("--version", action="version", version=f"vitkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    for name, module in COMMANDS.items():
        importlib.import_module(f"vitkit.cli.{module}").add_parser(sub)
    return parser


# commands that train, whose OpenMP threads sleep when idle (devices.yielding_openmp) unless the user chose otherwise
TRAINING = ("train", "finetune")


def main(argv: list[str] | None = None) -> int:
    openmp_for(sys.argv[1:] if argv is None else argv)
    # the program itself: SIGTERM while it starts
    if argv is None and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        # (before train's own handlers, or after them) exits 130 as Ctrl-C does
        signal.signal(signal.SIGTERM, _interrupted)
    try:
        return _main(argv)
    except KeyboardInterrupt:  # while argparse or an import ran, before _run's own handling
        print("vitkit: interrupted", file=sys.stderr)
        return 130


def openmp_for(argv: list[str]) -> None:
    """A training command's OpenMP threads sleep when idle (`devices.yielding_openmp`), set before any command's
    module loads torch."""
    if next((a for a in argv if not a.startswith("-")), None) in TRAINING:
        from vitkit.devices import yielding_openmp

        yielding_openmp()


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # KEY=VALUE overrides may come before, between or after options
        if not hasattr(args, "overrides") or any(e.startswith("-") for e in extra):
            parser.exit(
                2,
                f"vitkit {args.command}: error: unrecognized arguments: {' '.join(extra)} (see vitkit {args.command} --help)\n",
            )
        args.overrides = [*args.overrides, *extra]
    args.whole_process = argv is None  # the program's own command line, not a caller in a longer-lived process (tests)
    with warnings.catch_warnings():  # put back when the command returns (tests call main() in one process)
        warnings.showwarning = _one_line_warnings(args.command, warnings.showwarning)
        return _run(args)


def _one_line_warnings(command: str, show):
    """A showwarning that prints vitkit's own warnings as its errors are printed, one line each; others as `show` does."""

    def one_line(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UserWarning) and f"{os.sep}vitkit{os.sep}" in str(filename):
            print(f"vitkit {command}: warning: {message}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    return one_line


def _run(args: argparse.Namespace) -> int:
    from vitkit.files import holding_pins

    try:
        with holding_pins():  # a live run read twice by the command: the checkpoint it read first, kept in place
            code = int(args.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in Python's own flush at exit
        return code
    except BrokenPipeError:  # `vitkit info ... | head` closed the pipe: stop quietly, as cat would
        # no second error when Python flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except VitkitError as err:
        print(f"vitkit {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        run = getattr(args, "resume", None) or getattr(args, "out", None) if args.command == "train" else None
        # a second Ctrl-C: what the first one saved
        kept = run is not None and any(Path(run, "checkpoints").glob("step_*"))
        print(
            f"vitkit {args.command}: interrupted"
            + (f"; continue from its last checkpoint with vitkit train --resume {run}" if kept else ""),
            file=sys.stderr,
        )
        return 130
    except OSError as err:  # a file vitkit reads or writes: permission, full disk, a folder for a file, ...
        print(
            f"vitkit {args.command}: error: {os_error_line(err)}"
            + (
                f" (then vitkit train --resume {args.resume or args.out})"
                if args.command == "train" and _disk_full(err)
                else ""
            ),
            file=sys.stderr,
        )
        return 2


def _disk_full(err: OSError) -> bool:
    return err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def os_error_line(err: OSError) -> str:
    """One line for an operating-system error: the file, the reason and what to do."""
    what = err.filename or "a file"
    if err.filename2:
        what = f"{err.filename} -> {err.filename2}"
    reason = err.strerror or type(err).__name__
    if _disk_full(err):
        return f"{what}: {reason}; free some space and run again"
    if isinstance(err, PermissionError):
        return f"{what}: {reason}; give your user access to it (chmod/chown) or use another path"
    return f"{what}: {reason}"
