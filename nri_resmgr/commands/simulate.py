"""`nri-resmgr simulate`: run a scenario through the real adapter, pipeline and policy."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nri_resmgr.model import ResmgrError

if TYPE_CHECKING:
    from nri_resmgr.simulator.results import SimulationResult
    from nri_resmgr.simulator.scenario import Scenario

NAME = "simulate"
HELP = "play a scenario of pod creations and deletions and show every placement"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", required=True, help="scenario file (YAML or JSON)")
    parser.add_argument("--topology", help="override the scenario's topology (spec, file, dir)")
    parser.add_argument("--policy", help="override the scenario's policy")
    parser.add_argument(
        "--config", help="daemon configuration file (replaces the scenario's config/control)"
    )
    parser.add_argument("--output", choices=("table", "json"), default="table")
    parser.add_argument(
        "--html", metavar="FILE", help="also write a page of every step's node (step selector)"
    )
    parser.add_argument("--resctrl-root", help="drive the RDT controller under this directory")
    parser.add_argument("--cgroup-root", help="drive the block I/O controller under this root")
    parser.add_argument(
        "--log", action="store_true", help="print the pipeline's decision log lines to stderr"
    )


def run(args: argparse.Namespace) -> int:
    from nri_resmgr.config import LogConfig, LogFormat, load_config
    from nri_resmgr.ops.logs import configure_logging, log_config_warnings
    from nri_resmgr.simulator.results import render_json, render_table
    from nri_resmgr.simulator.run import quiet_log, run_scenario
    from nri_resmgr.simulator.scenario import load_scenario

    if args.log:
        configure_logging(LogConfig(format=LogFormat.CONSOLE), stream=sys.stderr)
        log = None
    else:
        log = quiet_log()
    try:
        scenario = load_scenario(Path(args.scenario))
        config = load_config(Path(args.config)) if args.config else None
        if config is not None:
            log_config_warnings(config.warnings, source=args.config)
        options: dict[str, Any] = {
            "topology": args.topology,
            "policy": args.policy,
            "config": config,
            "resctrl_root": args.resctrl_root,
            "cgroup_root": args.cgroup_root,
            "log": log,
        }
        if args.html:
            result = _write_page(scenario, Path(args.html), options)
        else:
            result = run_scenario(scenario, **options)
    except ResmgrError as exc:
        # one line whatever the message holds (a policy may quote a multi-line error)
        print(f"nri-resmgr simulate: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(render_json(result) if args.output == "json" else render_table(result))
    return 0


def _write_page(scenario: Scenario, path: Path, options: dict[str, Any]) -> SimulationResult:
    """Run `scenario` and write the page of every step's node to `path`."""
    from nri_resmgr.simulator.views import run_views
    from nri_resmgr.view.html import render_page

    result, views = run_views(scenario, **options)
    page = render_page(views, title=f"nri-resmgr simulate {scenario.description or path.stem}")
    try:
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ResmgrError(f"--html {path}: expected a file to write, found {exc}") from exc
    return result
