"""The ``squall`` command line. Each subcommand lives in its own module with ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import os
import sys

from squall import contract
from squall.contract import EVERY_PROCESS
from squall.errors import SquallError

# Modules under squall.cli that each register subcommands, in the order --help lists them.
MODULES = ["run", "top", "process", "validate", "state", "log", "k8s", "manage", "logs", "executor"]


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="squall", description="Storm's guaranteed-processing stream engine, "
                                  "in Python, for Kubernetes.")
    top.add_argument("--log-level", default=None, type=str.upper, choices=LOG_LEVELS,
                     help=f"DEBUG, INFO, WARNING or ERROR (default ${contract.LOG_LEVEL}, else INFO); the processes "
                          "squall run starts log at the same level")
    top.add_argument("--version", action="version", version=f"squall {version()}")
    subparsers = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in MODULES:
        importlib.import_module(f"squall.cli.{name}").register(subparsers)
    _log_level_after(subparsers)  # also after the command: `squall run FILE --log-level DEBUG`
    return top


def _log_level_after(subparsers: argparse._SubParsersAction) -> None:
    """``--log-level`` after each command, and after each command of a command (``squall log produce``)."""
    for sub in subparsers.choices.values():
        for inner in [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]:
            _log_level_after(inner)
        sub.add_argument("--log-level", default=argparse.SUPPRESS, type=str.upper, choices=LOG_LEVELS,
                         help="as before the command")


def version() -> str:
    """The installed distribution's version (the image's, the chart's appVersion)."""
    try:
        return importlib.metadata.version("squall")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree without installing
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    # Before the subcommands import gRPC, which reads it then: `squall run --in-process` runs user code
    # here, and `squall worker` started by hand is a pod's process (see contract.role_env).
    for name, value in EVERY_PROCESS.items():
        os.environ.setdefault(name, value)
    # Components are named 'module:Class'; like `python -m`, resolve modules from the current directory.
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    cli = parser()
    args = cli.parse_args(argv)
    if args.log_level is None:  # squall run gives its processes its level this way; a pod's env may too
        args.log_level = os.environ.get(contract.LOG_LEVEL, "INFO").upper()
        if args.log_level not in LOG_LEVELS:
            cli.error(f"{contract.LOG_LEVEL} must be one of {', '.join(LOG_LEVELS)}, not {args.log_level!r}")
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except SquallError as exc:
        print(f"squall {args.command}: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)  # the cluster verbs say why they failed (cli.cluster.EXIT_CODES)
    except KeyboardInterrupt:
        return 130
