"""`nri-resmgr validate-config FILE`: every error, one per line, with its path in the document.

Theory of operation: the file is read and parsed through `nri_resmgr.documents` (a regular
file only, bounded in size, depth and numbers), so a hostile file ends in error lines, never
a traceback or a hang.  The document is then checked in three passes, each of which goes on
past its first error:

1. the daemon's `Config` model: every problem pydantic finds, in this project's wording
   (`nri_resmgr.validation.validation_messages`); a top-level key that is wrong is set aside
   and the rest is validated again, so an unknown key never hides the policy's errors;
2. the ``control`` section's class definitions (memory policy node lists against the
   machine, below);
3. the policy's own configuration, built against the machine (``--topology``, default this
   machine's sysfs).  A policy reports its problems as values, each at its path
   (`nri_resmgr.validation.InvalidConfig`), often one at a time, so a key found wrong is
   set aside and the policy is built again; every problem is printed with its
   ``policyConfig.`` path, and a CPU list gives one line per bad element.

The document may be in nri-plugins' form (a ``TopologyAwarePolicy`` custom resource or
its bare spec): it is first put in this project's form (`nri_resmgr.policy_documents`),
and every error line names the path as the user wrote it (``spec.pinCPU``).  Keys accepted
without effect are printed as ``warning:`` lines; they do not make the file invalid.

A built-in policy is built without importing ``policyDirs``: the directories are checked
to exist, but their code runs only when the configuration names a drop-in.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nri_resmgr.model import ConfigError, ResmgrError

if TYPE_CHECKING:
    from nri_resmgr.config import Config
    from nri_resmgr.topology.model import Topology

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


def _validate_root(data: dict[Any, Any], errors: list[str]) -> tuple[Config, set[str]]:
    """The `Config` of `data` with every wrong top-level key set aside (and reported)."""
    from pydantic import ValidationError

    from nri_resmgr.config import Config
    from nri_resmgr.validation import validation_messages

    doc = dict(data)
    wrong: set[str] = set()
    while True:
        try:
            return Config.model_validate(doc), wrong
        except ValidationError as exc:
            errors.extend(validation_messages(exc, model=Config))
            keys = {str(e["loc"][0]) for e in exc.errors() if e["loc"]} & set(map(str, doc))
            if not keys:  # a problem of the document as a whole: nothing left to check
                keys = set(map(str, doc))
            for key in [k for k in doc if str(k) in keys]:
                del doc[key]
            wrong |= keys


def _policy_errors(config: Config, topology: Topology, *, dirs_valid: bool) -> list[str]:
    """Every problem the policy finds in ``policyConfig`` (see the module docstring)."""
    from importlib.metadata import entry_points

    from nri_resmgr.config import policy_config_problems
    from nri_resmgr.policy_registry import ENTRY_POINT_GROUP, load_policy

    errors: list[str] = []
    dirs: tuple[str, ...] = config.policy_dirs
    if config.policy in {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}:
        for i, directory in enumerate(dirs):
            if not Path(directory).is_dir():
                errors.append(f"policyDirs[{i}]: expected a directory, found {directory!r}")
        dirs = ()
    elif not dirs_valid:
        return errors
    doc = dict(config.policy_config)
    for _ in range(len(doc) + 1):
        try:
            load_policy(config.policy, topology=topology, config=doc, plugin_dirs=dirs)
            break
        except ConfigError as exc:
            lines, keys = policy_config_problems(exc)
            errors.extend(lines)
            if not keys & doc.keys():
                break
            for key in keys:
                doc.pop(key, None)
    return errors


def collect_errors(data: Any, *, topology_source: str | None, sysfs_root: str) -> list[str]:
    """All problems in an already parsed document (empty when it is valid)."""
    return collect_problems(data, topology_source=topology_source, sysfs_root=sysfs_root)[0]


def collect_problems(
    data: Any, *, topology_source: str | None, sysfs_root: str
) -> tuple[list[str], list[str]]:
    """(errors, warnings) of an already parsed document, in either form."""
    from nri_resmgr.config import DEFAULT_POLICY
    from nri_resmgr.documents import DocumentError
    from nri_resmgr.policy_documents import normalize_document

    if data is None:
        data = {}
    if not isinstance(data, dict):
        return [f"(document): expected a mapping, found {type(data).__name__}"], []
    try:
        norm = normalize_document(data, source="(document)", default_policy=DEFAULT_POLICY)
    except DocumentError as exc:
        return list(exc.problems), []
    errors = _collect_errors(norm.data, topology_source=topology_source, sysfs_root=sysfs_root)
    return [norm.where(line) for line in errors], list(norm.warnings)


def _collect_errors(
    data: dict[Any, Any], *, topology_source: str | None, sysfs_root: str
) -> list[str]:
    from nri_resmgr.control.wiring import class_control_from_config

    errors: list[str] = []
    config, wrong = _validate_root(data, errors)
    if "control" not in wrong:
        try:
            class_control_from_config(config.control)
        except ConfigError as exc:
            errors.append(str(exc))
    if wrong & {"policy", "policyConfig"}:
        return errors
    try:
        if topology_source:
            from nri_resmgr.topology.load import load_topology

            topology = load_topology(topology_source)
        else:
            from nri_resmgr.topology.discover import discover

            topology = discover(Path(sysfs_root))
    except (ResmgrError, OSError, ValueError) as exc:
        return [*errors, f"(topology): cannot load the machine to check against: {exc}"]
    if "control" not in wrong and config.control.memory_policy is not None:
        from nri_resmgr.control.mempolicy import check_classes

        try:
            check_classes(config.control.memory_policy, topology)
        except ConfigError as exc:
            errors.append(str(exc))
    return errors + _policy_errors(config, topology, dirs_valid="policyDirs" not in wrong)


def _one_line(message: str) -> str:
    return " ".join(message.split())


def run(args: argparse.Namespace) -> int:
    from nri_resmgr.documents import DocumentError, load_document

    path = Path(args.file)
    warnings: list[str] = []
    try:
        data = load_document(path)
    except DocumentError as exc:
        errors = list(exc.problems)
    else:
        errors, warnings = collect_problems(
            data, topology_source=args.topology, sysfs_root=args.sysfs_root
        )
    for warning in warnings:
        print(f"{path}: warning: {_one_line(warning)}", file=sys.stderr)
    lines = [_one_line(err) for err in errors]
    for line in lines:
        print(f"{path}: {line}", file=sys.stderr)
    if lines:
        print(f"{path}: {len(lines)} error(s)", file=sys.stderr)
        return 1
    print(f"{path}: valid")
    return 0
