"""`nri-resmgr validate-config FILE`: every error, with its path in the document."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from nri_resmgr.model import ConfigError, ResmgrError

NAME = "validate-config"
HELP = "check a configuration file; print every error with its path; exit 1 if any"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the configuration file (YAML or JSON)")
    parser.add_argument(
        "--topology",
        help="machine to validate the policy configuration against (spec, file, archive); "
        "default: this machine (--sysfs-root)",
    )
    parser.add_argument("--sysfs-root", default="/", help="root of the sysfs to discover")


def collect_errors(
    data: Any, *, topology_source: str | None, sysfs_root: str
) -> list[str]:
    """All problems in an already parsed document (empty when it is valid)."""
    from pydantic import ValidationError

    from nri_resmgr.config import Config, validation_messages

    if data is None:
        data = {}
    if not isinstance(data, dict):
        return [f"(document): expected a mapping, found {type(data).__name__}"]
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        return validation_messages(exc)
    errors: list[str] = []
    from nri_resmgr.pipeline import class_control_from_config

    try:
        class_control_from_config(config.control)
    except ConfigError as exc:
        errors.append(str(exc))
    try:
        if topology_source:
            from nri_resmgr.topology.load import load_topology

            topology = load_topology(topology_source)
        else:
            from nri_resmgr.topology.discover import discover

            topology = discover(Path(sysfs_root))
    except (ResmgrError, OSError, ValueError) as exc:
        return [*errors, f"(topology): cannot load the machine to check against: {exc}"]
    from nri_resmgr.policy_registry import load_policy

    try:
        load_policy(config.policy, topology=topology, config=config.policy_config,
                    plugin_dirs=config.policy_dirs)
    except ConfigError as exc:
        message = str(exc)
        if message.startswith("unknown policy"):
            message = f"policy: {message}"
        elif not message.startswith(("policy", "policyConfig")):
            message = f"policyConfig: {message}"
        errors.append(message)
    return errors


def run(args: argparse.Namespace) -> int:
    # imported here: the parser of every command is built for `nri-resmgr --help`
    import yaml

    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"{path}: cannot read: {exc}", file=sys.stderr)
        return 1
    try:
        data = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as exc:
        print(f"{path}: not valid YAML or JSON: {exc}", file=sys.stderr)
        return 1
    errors = collect_errors(data, topology_source=args.topology, sysfs_root=args.sysfs_root)
    for err in errors:
        print(f"{path}: {err}", file=sys.stderr)
    if errors:
        print(f"{path}: {len(errors)} error(s)", file=sys.stderr)
        return 1
    print(f"{path}: valid")
    return 0
