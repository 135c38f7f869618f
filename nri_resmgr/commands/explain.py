"""`nri-resmgr explain POD[/CONTAINER]`: one placement decision, explained.

From a scenario (``--scenario``): the full explanation (`view.explain`: every candidate
pool and its sort key).  From the live daemon (``--url``, the default): the last decision
the daemon recorded for the container (`view.record`: event, time, placement, reason,
the containers it updated), then the full explanation of how the policy would place it
now, the other containers as they are (``/explain/<id>``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from nri_resmgr.model import ResmgrError
from nri_resmgr.ops.fetch import DEFAULT_URL, fetch_json

NAME = "explain"
HELP = "explain one container's placement: its request, every candidate pool, the winner"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target", metavar="POD[/CONTAINER]", help="the pod (in a scenario: its first container)"
    )
    parser.add_argument("--scenario", help="explain a simulated decision: the scenario file")
    parser.add_argument(
        "--url",
        default=DEFAULT_URL,
        help=f"the live daemon's HTTP endpoint (default {DEFAULT_URL}); its /decisions.json",
    )
    parser.add_argument(
        "--step", type=int, help="explain the pod as created at or before this step (default: last)"
    )
    parser.add_argument("--topology", help="override the scenario's topology")
    parser.add_argument("--policy", help="override the scenario's policy")
    parser.add_argument("--config", help="daemon configuration file (replaces the scenario's)")


def _fail(message: str) -> int:
    print(f"nri-resmgr explain: {' '.join(message.split())}", file=sys.stderr)
    return 2


def _select(doc: dict[str, Any], target: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The entries of ``/decisions.json`` that `target` (``POD[/CONTAINER]``) names, and
    every live container's name by id; `ResmgrError` when none is live."""
    pod, _, name = target.partition("/")
    entries = doc.get("containers")
    if not isinstance(entries, list):
        raise ResmgrError("decisions: expected a 'containers' list, found none")
    names = {str(e.get("id")): f"{e.get('pod')}/{e.get('name')}" for e in entries}
    found = [e for e in entries if e.get("pod") == pod and (not name or e.get("name") == name)]
    if not found:
        raise ResmgrError(f"{target}: expected a live container of that pod, found none")
    return found, names


def render_recorded(entry: dict[str, Any], names: dict[str, str]) -> list[str]:
    """The lines of one container's recorded decision (`view.record`)."""
    from datetime import UTC, datetime

    from nri_resmgr.view.text import shown

    key = "/".join(str(entry[k]) for k in ("namespace", "pod", "name"))
    lines = [f"container {shown(key)}"]
    d = entry.get("decision")
    if not isinstance(d, dict):
        return [*lines, "  no decision recorded since the daemon started (kept at Synchronize)"]
    at = datetime.fromtimestamp(float(d["at"]), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines.append(f"  {d['event']} at {at}")
    lines.append(
        f"  decision: {d['kind']} in {shown(str(d['pool']))}, cpus {d['cpus'] or '-'}, "
        f"mems {d['mems'] or '-'} ({shown(str(d['reason']))})"
    )
    if d["updates"]:
        shown_ids = ", ".join(shown(names.get(u, u)) for u in d["updated"])
        more = d["updates"] - len(d["updated"])
        lines.append(
            f"  updated {d['updates']} other containers: {shown_ids}"
            + (f" and {more} more" if more > 0 else "")
        )
    else:
        lines.append("  no update to other containers")
    return lines


def _live(url: str, target: str) -> str:
    """Per container `target` names: its recorded decision, then how the policy would
    place it now (``/explain/<id>``: the request as read, every candidate pool)."""
    from urllib.parse import quote

    from nri_resmgr.view.explain import explanation_from_dict, render_explanation

    base = url.rstrip("/")
    doc = fetch_json(base + "/decisions.json", what="the daemon's decisions")
    found, names = _select(doc, target)
    lines: list[str] = []
    for entry in found:
        lines += render_recorded(entry, names)
        now = fetch_json(
            f"{base}/explain/{quote(str(entry['id']), safe='')}", what="an explanation"
        )
        lines.append("  placed now, the others as they are:")
        lines += [
            "  " + ln for ln in render_explanation(explanation_from_dict(now)).splitlines()[1:]
        ]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if not args.scenario:
        try:
            sys.stdout.write(_live(args.url, args.target))
        except (ResmgrError, KeyError, TypeError, ValueError) as exc:
            return _fail(str(exc))
        return 0
    return _simulated(args)


def _simulated(args: argparse.Namespace) -> int:
    from nri_resmgr.config import load_config
    from nri_resmgr.simulator.explain import explain_in_scenario
    from nri_resmgr.simulator.run import quiet_log
    from nri_resmgr.simulator.scenario import load_scenario
    from nri_resmgr.view.explain import render_explanation
    from nri_resmgr.view.text import shown

    try:
        scenario = load_scenario(Path(args.scenario))
        config = load_config(Path(args.config)) if args.config else None
        found = explain_in_scenario(
            scenario,
            args.target,
            step=args.step,
            topology=args.topology,
            policy=args.policy,
            config=config,
            log=quiet_log(),
        )
    except ResmgrError as exc:
        return _fail(str(exc))
    if isinstance(found, str):
        print(f"{shown(args.target)}: refused: {shown(found)}")
        return 0
    sys.stdout.write(render_explanation(found))
    return 0
