"""`nri-resmgr dump`: the live node as a scenario `nri-resmgr simulate` replays."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nri_resmgr.model import ResmgrError
from nri_resmgr.ops.fetch import DEFAULT_URL, fetch_json

NAME = "dump"
HELP = "write the live node (machine, configuration, containers and placements) as a scenario"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=DEFAULT_URL,
        help=f"the daemon's HTTP endpoint (default {DEFAULT_URL}); its /scenario.json",
    )
    parser.add_argument("--output", "-o", help="write to this file (default: standard output)")


def run(args: argparse.Namespace) -> int:
    import yaml

    try:
        doc = fetch_json(args.url.rstrip("/") + "/scenario.json", what="the daemon's scenario")
    except ResmgrError as exc:
        print(f"nri-resmgr dump: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    text = "# nri-resmgr dump: replay with nri-resmgr simulate --scenario FILE [--config NEW]\n"
    text += yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            print(f"nri-resmgr dump: {args.output}: cannot write: {exc}", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    return 0
