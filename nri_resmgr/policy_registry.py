"""Finding policies by name: built-ins through entry points, drop-ins from directories.

Theory of operation: a policy is anything that satisfies `nri_resmgr.policy.base.Policy`
and is built as ``Factory(topology=..., config=...)``.  Finding one imports code (entry
points, files from the configured directories), so this lives outside the pure
`nri_resmgr.policy` package: a policy is only its placement logic, and the package
imports nothing that loads code.  Two sources are searched:

1. the ``nri_resmgr.policies`` entry-point group (this package's ``none``, ``static``
   and ``topology-aware``, and any installed distribution that adds to the group);
2. drop-in modules: every ``*.py`` file (not starting with ``_``) in the configured
   plugin directories, in directory order and then file-name order.  A module
   contributes each class *defined in it* that has a string class attribute ``name`` and
   the protocol's methods (``initial_state``, ``allocate``, ``release``, ``update``,
   ``rebuild``).  ``plugins.d/`` in the repository is the example directory.

A name defined twice is a configuration error naming both origins: a drop-in cannot
silently replace a built-in.  An unknown name is an error listing the known ones.
Importing a drop-in runs its code; the directories are configuration the operator owns.
Entry points are imported only when their policy is loaded, so one broken distribution
does not hide the others.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from nri_resmgr.model import ConfigError
from nri_resmgr.policy.base import Policy, PolicyFactory
from nri_resmgr.topology.model import Topology

__all__ = ["ENTRY_POINT_GROUP", "PolicySource", "available_policies", "load_policy"]

ENTRY_POINT_GROUP = "nri_resmgr.policies"
#: this package's own policies, also found when the installed metadata predates them
#: (an editable install made before the entry point was added to pyproject.toml)
_PACKAGED = {"balloons": "nri_resmgr.policy.balloons:BalloonsPolicy"}
_PROTOCOL_METHODS = ("initial_state", "allocate", "release", "update", "rebuild")


@dataclass(frozen=True, slots=True)
class PolicySource:
    """Where a policy name comes from (for listings and error messages)."""

    name: str
    origin: str  # "entry point nri_resmgr.policy.none:NonePolicy" or a file path
    loader: Callable[[], PolicyFactory]

    def load(self) -> PolicyFactory:
        """The factory (imports an entry point's module only now)."""
        return self.loader()


def _is_policy_class(obj: object, module: ModuleType) -> bool:
    return (
        inspect.isclass(obj)
        and obj.__module__ == module.__name__
        and isinstance(getattr(obj, "name", None), str)
        and all(callable(getattr(obj, m, None)) for m in _PROTOCOL_METHODS)
    )


def _import_file(path: Path) -> ModuleType:
    mod_name = "nri_resmgr_dropin_" + re.sub(r"\W", "_", str(path.resolve()))
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"policy drop-in {path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    # dataclasses and pickling look the module up by name while it executes
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[mod_name]
        raise ConfigError(f"policy drop-in {path}: import failed: {exc!r}") from exc
    return module


def _drop_ins(plugin_dirs: Iterable[str | Path]) -> list[PolicySource]:
    out: list[PolicySource] = []
    for d in plugin_dirs:
        directory = Path(d)
        if not directory.is_dir():
            raise ConfigError(f"policy plugin directory {directory}: not a directory")
        for path in sorted(directory.glob("*.py")):
            if path.name.startswith("_"):
                continue
            module = _import_file(path)
            for _, cls in sorted(vars(module).items()):
                if _is_policy_class(cls, module):
                    load = partial(_same, cast(PolicyFactory, cls))
                    out.append(PolicySource(name=cls.name, origin=str(path), loader=load))
    return out


def _same(factory: PolicyFactory) -> PolicyFactory:
    return factory


def _built_ins() -> list[PolicySource]:
    found = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
    names = {ep.name for ep in found}
    found += [
        EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)
        for name, value in sorted(_PACKAGED.items())
        if name not in names
    ]
    return [
        PolicySource(name=ep.name, origin=f"entry point {ep.value}", loader=partial(_load, ep))
        for ep in found
    ]


def _load(ep: EntryPoint) -> PolicyFactory:
    try:
        return cast(PolicyFactory, ep.load())
    except Exception as exc:
        raise ConfigError(
            f"policy {ep.name}: entry point {ep.value} failed to load: {exc!r}"
        ) from exc


def available_policies(plugin_dirs: Iterable[str | Path] = ()) -> dict[str, PolicySource]:
    """Every policy name that can be loaded, with its origin."""
    found: dict[str, PolicySource] = {}
    for src in [*_built_ins(), *_drop_ins(plugin_dirs)]:
        if src.name in found:
            raise ConfigError(
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
        raise ConfigError(
            f"unknown policy {name!r}; expected one of {', '.join(known) or 'none installed'}"
        )
    return src.load()(topology=topology, config=config)
