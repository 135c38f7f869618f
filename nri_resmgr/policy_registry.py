"""Finding policies by name: records through entry points, drop-ins from directories.

Theory of operation: a policy is registered by one `nri_resmgr.policy.base.PolicyRecord`
(its class, which carries the name, and what ``validate-config`` needs: the spec model,
the keys accepted without effect, the custom resource kind).  Finding one imports code
(entry points, files from the configured directories), so this lives outside the pure
`nri_resmgr.policy` package: a policy is only its placement logic, and the package
imports nothing that loads code.  Two sources are searched:

1. the ``nri_resmgr.policies`` entry-point group (this package's ``none``, ``static``,
   ``topology-aware`` and ``balloons``, and any installed distribution that adds to the
   group).  An entry point names a record, or a `Policy` subclass: then the record is
   the one the entry point's module defines for that class, else a bare record (no spec
   form) -- so metadata written before records existed still loads;
2. drop-in modules: every ``*.py`` file (not starting with ``_``) in the configured
   plugin directories, in directory order and then file-name order.  A module
   contributes the records of the policies defined in it, and a bare record for each
   concrete `Policy` subclass defined in it that has none (an imported record or class is
   not the module's).  ``plugins.d/`` in the repository is
   the example directory.

A name defined twice is a configuration error naming both origins: a drop-in cannot
silently replace a built-in.  An unknown name is an error listing the known ones.
Importing a drop-in runs its code; the directories are configuration the operator owns.
Entry points are imported only when their policy is loaded, so one broken distribution
does not hide the others.  The group itself is read once per process: finding it reads
every installed distribution's metadata (139 here: 15-70 ms, a third of building a
pipeline), a pre-registered daemon builds one at start and another for the runtime's
configuration before it synchronizes, and a running daemon's installed distributions do
not change (a newly installed policy is found when the daemon restarts).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache, partial
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Any, TypeGuard

from nri_resmgr.model import ConfigError
from nri_resmgr.policy.base import Policy, PolicyRecord
from nri_resmgr.topology.model import Topology

__all__ = [
    "ENTRY_POINT_GROUP",
    "DropInError",
    "PolicySource",
    "UnknownPolicy",
    "available_policies",
    "load_policy",
    "records_of",
]

ENTRY_POINT_GROUP = "nri_resmgr.policies"


class UnknownPolicy(ConfigError):
    """No policy has the configured name (the message lists the known ones)."""


class DropInError(ConfigError):
    """A plugin directory or a drop-in in it cannot be used, or a name is defined twice."""


@dataclass(frozen=True, slots=True)
class PolicySource:
    """Where a policy name comes from (for listings and error messages)."""

    name: str
    origin: str  # "entry point nri_resmgr.policy.none:RECORD" or a file path
    loader: Callable[[], PolicyRecord]

    def load(self) -> PolicyRecord:
        """The record (imports an entry point's module only now)."""
        return self.loader()


def _is_policy_class(obj: object, module: ModuleType) -> TypeGuard[type[Policy]]:
    return (
        inspect.isclass(obj)
        and obj.__module__ == module.__name__
        and issubclass(obj, Policy)
        and not inspect.isabstract(obj)
    )


def records_of(module: ModuleType) -> list[PolicyRecord]:
    """The policies `module` defines: its records, and a bare record for each concrete
    `Policy` subclass defined in it that no record of the module names."""
    found = [r for _, r in sorted(vars(module).items()) if isinstance(r, PolicyRecord)]
    recorded = {r.policy for r in found}
    for _, obj in sorted(vars(module).items()):
        if _is_policy_class(obj, module) and obj not in recorded:
            found.append(PolicyRecord(obj))
    return found


def _import_file(path: Path) -> ModuleType:
    mod_name = "nri_resmgr_dropin_" + re.sub(r"\W", "_", str(path.resolve()))
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise DropInError(f"policy drop-in {path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    # dataclasses and pickling look the module up by name while it executes
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[mod_name]
        raise DropInError(f"policy drop-in {path}: import failed: {exc!r}") from exc
    return module


def _drop_ins(plugin_dirs: Iterable[str | Path]) -> list[PolicySource]:
    out: list[PolicySource] = []
    for d in plugin_dirs:
        directory = Path(d)
        if not directory.is_dir():
            raise DropInError(f"policy plugin directory {directory}: not a directory")
        for path in sorted(directory.glob("*.py")):
            if path.name.startswith("_"):
                continue
            module = _import_file(path)
            # its own policies: a record imported from elsewhere is not redefined here
            own = [r for r in records_of(module) if r.policy.__module__ == module.__name__]
            for record in own:
                load = partial(_same, record)
                out.append(PolicySource(name=record.name, origin=str(path), loader=load))
    return out


def _same(record: PolicyRecord) -> PolicyRecord:
    return record


@cache
def _entry_points() -> tuple[EntryPoint, ...]:
    """The group's entry points, read once per process (module docstring)."""
    return tuple(sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name))


def _built_ins() -> list[PolicySource]:
    found = _entry_points()
    return [
        PolicySource(name=ep.name, origin=f"entry point {ep.value}", loader=partial(_load, ep))
        for ep in found
    ]


def _load(ep: EntryPoint) -> PolicyRecord:
    try:
        obj = ep.load()
        module = importlib.import_module(ep.module)
    except Exception as exc:
        raise ConfigError(
            f"policy {ep.name}: entry point {ep.value} failed to load: {exc!r}"
        ) from exc
    if isinstance(obj, PolicyRecord):
        return obj
    if inspect.isclass(obj) and issubclass(obj, Policy):
        return next((r for r in records_of(module) if r.policy is obj), PolicyRecord(obj))
    raise ConfigError(
        f"policy {ep.name}: entry point {ep.value} names {type(obj).__name__} {obj!r}; "
        "expected a PolicyRecord or a Policy subclass (nri_resmgr.policy.base)"
    )


def available_policies(plugin_dirs: Iterable[str | Path] = ()) -> dict[str, PolicySource]:
    """Every policy name that can be loaded, with its origin."""
    found: dict[str, PolicySource] = {}
    for src in [*_built_ins(), *_drop_ins(plugin_dirs)]:
        if src.name in found:
            raise DropInError(
                f"policy {src.name!r} is defined twice: by {found[src.name].origin} and by "
                f"{src.origin}; expected each name once"
            )
        found[src.name] = src
    return dict(sorted(found.items()))


def load_policy(
    name: str,
    *,
    topology: Topology,
    config: Mapping[str, Any],
    plugin_dirs: Iterable[str | Path] = (),
) -> Policy:
    """Build the policy called `name` for `topology` with its `config`."""
    known = available_policies(plugin_dirs)
    src = known.get(name)
    if src is None:
        raise UnknownPolicy(
            f"unknown policy {name!r}; expected one of {', '.join(known) or 'none installed'}"
        )
    return src.load().build(topology=topology, config=config)
