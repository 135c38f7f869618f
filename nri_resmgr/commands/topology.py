"""`nri-resmgr topology`: show the machine topology the resource manager sees.

Theory of operation: the topology comes from the host's sysfs (default, or
``--sysfs-root DIR`` for a host sysfs mounted elsewhere or an unpacked snapshot) or from
``--topology SOURCE`` (a snapshot archive, a spec file, an example name or an inline spec;
see `nri_resmgr.topology.load`).  It is printed as a tree, or as JSON with ``--json``.
Errors go to stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import sys

NAME = "topology"
HELP = "show the CPU, cache, NUMA and memory topology (from sysfs, a snapshot or a spec)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--sysfs-root",
        metavar="DIR",
        help="discover from DIR/sys instead of /sys (a host mount or an unpacked snapshot)",
    )
    source.add_argument(
        "--topology",
        metavar="SOURCE",
        help=(
            "load from a sysfs directory, a snapshot archive (.tar.xz, .tar.gz, ...), a spec "
            "file (.yaml, .json), an example name, or an inline spec like "
            "'packages=2,nodes=2,cores=4,threads=2'"
        ),
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a tree")


def run(args: argparse.Namespace) -> int:
    # imported here: the parser of every command is built for `nri-resmgr --help`
    import json

    from nri_resmgr.topology.discover import discover
    from nri_resmgr.topology.load import load_topology
    from nri_resmgr.topology.model import TopologyError
    from nri_resmgr.topology.render import render_tree, to_dict

    try:
        if args.topology is not None:
            topo = load_topology(args.topology)
        else:
            topo = discover(args.sysfs_root or "/")
    except (TopologyError, OSError) as exc:
        print(f"nri-resmgr topology: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(to_dict(topo), indent=2))
    else:
        print(render_tree(topo))
    return 0
