"""`nri-resmgr install`: register nri-resmgr as a pre-registered NRI plugin."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nri_resmgr.model import ConfigError
from nri_resmgr.ops.install import DEFAULT_LOG_FILE, DEFAULT_NAME, install, plan_install

NAME = "install"
HELP = "write the launcher /opt/nri/plugins/NN-resmgr and /etc/nri/conf.d/NN-resmgr.conf"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", required=True, help="two-digit plugin index, e.g. 90")
    parser.add_argument("--root", default="/", help="install below this root (default /)")
    parser.add_argument("--name", default=DEFAULT_NAME)
    parser.add_argument("--policy", default="topology-aware")
    parser.add_argument("--config", help="configuration file to copy into conf.d")
    parser.add_argument("--log-file", default=DEFAULT_LOG_FILE)
    parser.add_argument("--python", help="interpreter for the launcher (default: this one)")
    parser.add_argument(
        "--run-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for `nri-resmgr run` in the launcher (repeatable), "
        "e.g. --run-arg=--sysfs-root=/host",
    )
    parser.add_argument("--dry-run", action="store_true", help="show what would be written")


def run(args: argparse.Namespace) -> int:
    try:
        config_text = Path(args.config).read_text(encoding="utf-8") if args.config else ""
        plan = plan_install(
            root=Path(args.root),
            index=args.index,
            name=args.name,
            policy=args.policy,
            config_text=config_text,
            log_file=args.log_file,
            python=args.python,
            extra_args=tuple(args.run_arg),
        )
        if args.dry_run:
            print(f"--- {plan.launcher}\n{plan.launcher_text}")
            print(f"--- {plan.config}\n{plan.config_text}")
            return 0
        for path in install(plan):
            print(f"wrote {path}")
    except (ConfigError, OSError) as exc:
        print(f"install: {exc}", file=sys.stderr)
        return 1
    print("restart the runtime (or wait for its next start) to launch the plugin")
    return 0
