"""The `nri-resmgr` command line: one subcommand per module in nri_resmgr.commands.

Each command module exposes `NAME: str`, `HELP: str`, `add_arguments(parser)` and
`run(args) -> int`.  A command module that is not present is simply not offered.

Only the command being run is imported: a command named ``a-b`` lives in the module
``a_b``, so `main` can import that one module when the first argument names it (the
pre-registered daemon, ``run``, starts inside the runtime's registration timeout and
must not pay for the imports of the other commands).  Anything else (no command, an
option first, an unknown name) builds the parser of every command, so help and errors
list them all as before.  The cyclic collector is off while the command is imported and
built (`nri_resmgr.ops.collector`): the daemon settles it before it connects, and any
command that ends turns it back on.

``--version`` prints ``nri-resmgr VERSION`` (`nri_resmgr.__version__`, which is also the
package's version).  A reader that closes the pipe early (``nri-resmgr topology | head``)
ends the command quietly with status 1, not a BrokenPipeError traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from nri_resmgr import __version__
from nri_resmgr.ops import collector

COMMAND_MODULES = (
    "run",
    "simulate",
    "show",
    "dump",
    "explain",
    "topology",
    "validate_config",
    "install",
    "enable_nri",
    "uninstall",
    "reset",
    "report",
    "scheduler_extender",
)


def _load_commands(names: Sequence[str] = COMMAND_MODULES) -> list[ModuleType]:
    mods = []
    for name in names:
        qual = f"nri_resmgr.commands.{name}"
        if importlib.util.find_spec(qual) is not None:
            mods.append(importlib.import_module(qual))
    return mods


def _named_command(argv: Sequence[str]) -> str | None:
    """The command module the first argument names, if it names one exactly."""
    if not argv or argv[0].startswith("-"):
        return None
    module = argv[0].replace("-", "_")
    if module not in COMMAND_MODULES:
        return None
    mods = _load_commands((module,))
    if not mods or argv[0] != mods[0].NAME:
        return None
    return module


def build_parser(
    commands: Sequence[str] = COMMAND_MODULES,
) -> tuple[argparse.ArgumentParser, dict[str, ModuleType]]:
    """The parser offering `commands` (module names; default: every command)."""
    parser = argparse.ArgumentParser(
        prog="nri-resmgr",
        description="Node resource manager for Kubernetes over NRI.",
    )
    parser.add_argument("--version", action="version", version=f"nri-resmgr {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    table: dict[str, ModuleType] = {}
    for mod in _load_commands(commands):
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        table[mod.NAME] = mod
    return parser, table


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    # the collector is off while the command is imported and built (`ops.collector`):
    # the daemon settles it before connecting, a command that ends resumes it
    collector.pause()
    try:
        return _main(argv)
    finally:
        collector.resume()


def _main(argv: Sequence[str]) -> int:
    named = _named_command(argv)
    parser, table = build_parser((named,) if named else COMMAND_MODULES)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        result: int = table[args.command].run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (`nri-resmgr topology | head`): stop quietly, as cat does;
        # stdout goes to /dev/null so the interpreter's last flush cannot fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1
    return result


if __name__ == "__main__":
    sys.exit(main())
