"""`nri-resmgr dump`: the live node as a scenario `nri-resmgr simulate` replays."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from nri_resmgr.model import ResmgrError

NAME = "dump"
HELP = "write the live node (machine, configuration, containers and placements) as a scenario"

DEFAULT_URL = "http://127.0.0.1:8891"
#: the most a dump may be (a record of 8192 CPUs and a few hundred containers is ~1 MB)
MAX_DUMP_BYTES = 64 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=DEFAULT_URL,
        help=f"the daemon's HTTP endpoint (default {DEFAULT_URL}); its /scenario.json",
    )
    parser.add_argument("--output", "-o", help="write to this file (default: standard output)")


def fetch_scenario(url: str) -> dict[str, Any]:
    """The daemon's ``/scenario.json`` at `url` (`ResmgrError` naming what went wrong)."""
    target = url.rstrip("/") + "/scenario.json"
    try:
        with urllib.request.urlopen(target, timeout=30) as resp:
            body = resp.read(MAX_DUMP_BYTES + 1)
    except (urllib.error.URLError, OSError) as exc:
        raise ResmgrError(f"{target}: expected the daemon's scenario, found {exc}") from exc
    if len(body) > MAX_DUMP_BYTES:
        raise ResmgrError(f"{target}: expected at most {MAX_DUMP_BYTES} bytes, found more")
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise ResmgrError(f"{target}: expected JSON, found {exc}") from exc
    if not isinstance(doc, dict):
        raise ResmgrError(f"{target}: expected a JSON object, found {type(doc).__name__}")
    return doc


def run(args: argparse.Namespace) -> int:
    import yaml

    try:
        doc = fetch_scenario(args.url)
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
