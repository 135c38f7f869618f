"""`nri-resmgr simulate`: run a scenario through the real adapter, pipeline and policy."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from nri_resmgr.model import ResmgrError

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
    parser.add_argument("--resctrl-root", help="drive the RDT controller under this directory")
    parser.add_argument("--cgroup-root", help="drive the block I/O controller under this root")
    parser.add_argument(
        "--log", action="store_true", help="print the pipeline's decision log lines to stderr"
    )


def run(args: argparse.Namespace) -> int:
    import structlog

    from nri_resmgr.config import LogConfig, LogFormat, load_config
    from nri_resmgr.ops.logs import configure_logging, log_config_warnings
    from nri_resmgr.simulator.results import render_json, render_table
    from nri_resmgr.simulator.run import run_scenario
    from nri_resmgr.simulator.scenario import load_scenario

    if args.log:
        configure_logging(LogConfig(format=LogFormat.CONSOLE), stream=sys.stderr)
        log = None
    else:
        log = structlog.wrap_logger(structlog.PrintLogger(), processors=[_drop])
    try:
        scenario = load_scenario(Path(args.scenario))
        config = load_config(Path(args.config)) if args.config else None
        if config is not None:
            log_config_warnings(config.warnings, source=args.config)
        result = run_scenario(
            scenario,
            topology=args.topology,
            policy=args.policy,
            config=config,
            resctrl_root=args.resctrl_root,
            cgroup_root=args.cgroup_root,
            log=log,
        )
    except ResmgrError as exc:
        # one line whatever the message holds (a policy may quote a multi-line error)
        print(f"nri-resmgr simulate: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(render_json(result) if args.output == "json" else render_table(result))
    return 0


def _drop(_logger: Any, _method: str, _event: MutableMapping[str, Any]) -> Mapping[str, Any]:
    """A processor that silences the decision log (the result is the output)."""
    import structlog

    raise structlog.DropEvent
