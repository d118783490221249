"""The `vitkit` command: one module per subcommand, each only parsing arguments and calling the library.

Errors a user can cause (VitkitError) and a full disk end as one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

from vitkit import __version__
from vitkit.errors import VitkitError

# subcommand -> module under vitkit.cli (imported lazily, so `vitkit models` never loads training code)
COMMANDS = {
    "models": "models",
    "benchmark": "benchmark",
    "export": "export",
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vitkit", description="Vision Transformers (Dosovitskiy et al., 2021) in PyTorch.")
    parser.add_argument("--version", action="version", version=f"vitkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in COMMANDS.items():
        importlib.import_module(f"vitkit.cli.{module}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # KEY=VALUE overrides may come before, between or after options
        if not hasattr(args, "overrides") or any(e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    try:
        code = int(args.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in Python's own flush at exit
        return code
    except BrokenPipeError:  # `vitkit info ... | head` closed the pipe: stop quietly, as cat would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes stdout at exit
        return 141
    except VitkitError as err:
        print(f"vitkit {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"vitkit {args.command}: interrupted", file=sys.stderr)
        return 130
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        print(f"vitkit {args.command}: error: {err.filename or 'a file'}: {err.strerror}; free some space and run again"
              + (f" (vitkit train --resume {args.resume or args.out})" if args.command == "train" else ""), file=sys.stderr)
        return 2
