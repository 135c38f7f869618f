"""`nri-resmgr uninstall`: remove what `install` wrote, and only that."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nri_resmgr.install import DEFAULT_NAME, uninstall
from nri_resmgr.model import ConfigError

NAME = "uninstall"
HELP = "remove the pre-registered launcher and config written by `install`"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", required=True)
    parser.add_argument("--root", default="/")
    parser.add_argument("--name", default=DEFAULT_NAME)


def run(args: argparse.Namespace) -> int:
    try:
        removed = uninstall(root=Path(args.root), index=args.index, name=args.name)
    except ConfigError as exc:
        print(f"uninstall: {exc}", file=sys.stderr)
        return 1
    for path in removed:
        print(f"removed {path}")
    if not removed:
        print("nothing to remove")
    return 0
