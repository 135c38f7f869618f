"""The `nri-resmgr` command line: one subcommand per module in nri_resmgr.commands.

Each command module exposes `NAME: str`, `HELP: str`, `add_arguments(parser)` and
`run(args) -> int`.  A command module that is not present is simply not offered.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

COMMAND_MODULES = (
    "run",
    "simulate",
    "topology",
    "validate_config",
    "install",
    "enable_nri",
    "uninstall",
    "report",
)


def _load_commands() -> list[ModuleType]:
    mods = []
    for name in COMMAND_MODULES:
        qual = f"nri_resmgr.commands.{name}"
        if importlib.util.find_spec(qual) is not None:
            mods.append(importlib.import_module(qual))
    return mods


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, ModuleType]]:
    parser = argparse.ArgumentParser(
        prog="nri-resmgr",
        description="Node resource manager for Kubernetes over NRI.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    table: dict[str, ModuleType] = {}
    for mod in _load_commands():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        table[mod.NAME] = mod
    return parser, table


def main(argv: Sequence[str] | None = None) -> int:
    parser, table = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    result: int = table[args.command].run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
