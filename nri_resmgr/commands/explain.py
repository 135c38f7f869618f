"""`nri-resmgr explain POD[/CONTAINER]`: one placement decision, explained (a simulator step)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nri_resmgr.model import ResmgrError

NAME = "explain"
HELP = "explain one container's placement: its request, every candidate pool, the winner"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="POD[/CONTAINER]", help="the pod (its first container)")
    parser.add_argument("--scenario", required=True, help="scenario file (YAML or JSON)")
    parser.add_argument(
        "--step", type=int, help="explain the pod as created at or before this step (default: last)"
    )
    parser.add_argument("--topology", help="override the scenario's topology")
    parser.add_argument("--policy", help="override the scenario's policy")
    parser.add_argument("--config", help="daemon configuration file (replaces the scenario's)")


def run(args: argparse.Namespace) -> int:
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
        print(f"nri-resmgr explain: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if isinstance(found, str):
        print(f"{shown(args.target)}: refused: {shown(found)}")
        return 0
    sys.stdout.write(render_explanation(found))
    return 0
