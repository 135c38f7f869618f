"""`nri-resmgr uninstall`: remove what `install` wrote, stop what it started, un-pin.

In order: remove the launcher and its config (exactly the files `install` wrote), stop
the instance the runtime launched from that launcher (SIGTERM, SIGKILL after
``--grace``), then run `nri-resmgr reset` so every container gets all CPUs and memory
nodes back and the daemon's resctrl groups go (``--no-reset`` skips it; ``--reset-arg``
passes options such as ``--socket`` or ``--state-dir`` on).  Stopping comes before the
reset so that no daemon is left to re-pin a container afterwards.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nri_resmgr.model import ConfigError
from nri_resmgr.ops.install import (
    DEFAULT_NAME,
    find_launched,
    launcher_path,
    stop_launched,
    uninstall,
)

NAME = "uninstall"
HELP = (
    "remove the pre-registered launcher and config written by `install`, stop the running "
    "instance, and reset every container's cpuset"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", required=True)
    parser.add_argument("--root", default="/")
    parser.add_argument("--name", default=DEFAULT_NAME)
    parser.add_argument(
        "--no-reset",
        action="store_true",
        help="leave containers pinned (skip `nri-resmgr reset`)",
    )
    parser.add_argument(
        "--reset-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for `nri-resmgr reset` (repeatable), "
        "e.g. --reset-arg=--state-dir=/var/lib/nri-resmgr",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="seconds the running instance gets to exit after SIGTERM (default 10)",
    )


def run(args: argparse.Namespace) -> int:
    root = Path(args.root)
    try:
        removed = uninstall(root=root, index=args.index, name=args.name)
        launcher = launcher_path(root=root, index=args.index, name=args.name)
        stopped = stop_launched(find_launched(launcher), grace=args.grace)
    except (ConfigError, OSError) as exc:
        print(f"uninstall: {exc}", file=sys.stderr)
        return 1
    for path in removed:
        print(f"removed {path}")
    if not removed:
        print("nothing to remove")
    for line in stopped:
        print(f"stopped the running instance, {line}")
    if args.no_reset:
        print("containers left as they are (--no-reset); `nri-resmgr reset` un-pins them")
        return 0
    from nri_resmgr.cli import main

    code = main(["reset", *args.reset_arg])
    if code != 0:
        print(
            "uninstall: the files are removed, but the reset failed (see above); run "
            "`nri-resmgr reset` once the runtime is reachable",
            file=sys.stderr,
        )
    return code
