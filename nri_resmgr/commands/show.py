"""`nri-resmgr show`: the picture of the node, from the live daemon or a simulator step."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from nri_resmgr.model import ResmgrError
from nri_resmgr.ops.fetch import DEFAULT_URL, fetch_json

if TYPE_CHECKING:
    from nri_resmgr.view.model import NodeView

NAME = "show"
HELP = "show what holds each CPU, each node's memory and each container's placement"

#: the width of the text written to a file or a pipe
PLAIN_WIDTH = 120


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenario", help="show a simulated node: the scenario file (YAML or JSON)"
    )
    parser.add_argument(
        "--step", type=int, help="the step to show (default: the last; negative from the end)"
    )
    parser.add_argument("--topology", help="override the scenario's topology")
    parser.add_argument("--policy", help="override the scenario's policy")
    parser.add_argument("--config", help="daemon configuration file (replaces the scenario's)")
    parser.add_argument(
        "--url",
        default=DEFAULT_URL,
        help=f"the live daemon's HTTP endpoint (default {DEFAULT_URL}); its /view.json",
    )
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the CPUs (auto: when the output is a terminal)",
    )


def _fail(message: str) -> int:
    print(f"nri-resmgr show: {' '.join(message.split())}", file=sys.stderr)
    return 2


def _simulated(args: argparse.Namespace) -> NodeView:
    from nri_resmgr.config import load_config
    from nri_resmgr.simulator.run import quiet_log
    from nri_resmgr.simulator.scenario import ScenarioError, load_scenario
    from nri_resmgr.simulator.views import run_views

    scenario = load_scenario(Path(args.scenario))
    config = load_config(Path(args.config)) if args.config else None
    _, views = run_views(
        scenario, topology=args.topology, policy=args.policy, config=config, log=quiet_log()
    )
    if not views:
        raise ScenarioError(f"{args.scenario}: expected at least one step, found none")
    step = -1 if args.step is None else args.step
    if not -len(views) <= step < len(views):
        raise ScenarioError(
            f"--step: expected a step 0-{len(views) - 1} (or -1 to -{len(views)}), found {step}"
        )
    return views[step]


def _live(url: str) -> NodeView:
    from nri_resmgr.view.model import view_from_dict

    target = url.rstrip("/") + "/view.json"
    return view_from_dict(fetch_json(target, what="the daemon's node view"))


def run(args: argparse.Namespace) -> int:
    from nri_resmgr.view.model import ViewError
    from nri_resmgr.view.terminal import render_text

    try:
        view = _simulated(args) if args.scenario else _live(args.url)
    except (ResmgrError, ViewError) as exc:
        return _fail(str(exc))
    if args.output == "json":
        print(json.dumps(view.as_dict(), indent=1))
        return 0
    tty = sys.stdout.isatty()
    color = args.color == "always" or (args.color == "auto" and tty)
    # a terminal's own width; a file or pipe gets the same text whatever ran it
    width = max(shutil.get_terminal_size().columns, 80) if tty else PLAIN_WIDTH
    sys.stdout.write(render_text(view, color=color, width=width))
    return 0
