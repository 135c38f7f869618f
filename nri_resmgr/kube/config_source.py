"""Where the configuration comes from, and live reload.

Theory of operation: the effective configuration is the highest-precedence source that
exists, used whole (sources are not merged, so an operator can always tell which document
is in force):

1. the ConfigMap `<prefix>.node.<NODE>` in the daemon's namespace,
2. the ConfigMap `<prefix>.group.<GROUP>`, GROUP being the value of the node label
   `config.nri-resmgr.io/group` (configurable),
3. the ConfigMap `<prefix>.default`,
4. the local file given with `--config`,
5. the string a pre-registered plugin receives in Configure,
6. the built-in defaults.

Each ConfigMap holds the document under the key `config.yaml`.  `resolve` is pure: given
what exists, it returns the chosen `Config` and a description of its source, or raises a
`ConfigError` naming the source and every problem in it.  `LiveConfig` holds the config in
force and applies a new one through a callback: the new document is validated, applied,
and if applying fails the previous one is re-applied and stays in force.  Each outcome is
reported (a log line, the `nri_resmgr_config_reloads` metric, and a Kubernetes Event on the
ConfigMap when the source is one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from nri_resmgr.config import Config, config_from_mapping, load_config
from nri_resmgr.model import ConfigError

DEFAULT_PREFIX = "nri-resmgr-config"
GROUP_LABEL = "config.nri-resmgr.io/group"
DATA_KEY = "config.yaml"


@dataclass(frozen=True, slots=True)
class Source:
    """One configuration document and where it came from."""

    name: str  # e.g. "ConfigMap kube-system/nri-resmgr-config.node.worker-1"
    text: str
    kind: str = "configmap"  # configmap | file | configure | default
    object_name: str = ""  # the ConfigMap's name, for Events
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class Resolved:
    config: Config
    source: Source


def configmap_names(node: str, group: str | None, prefix: str = DEFAULT_PREFIX) -> list[str]:
    """ConfigMap names in precedence order."""
    names = [f"{prefix}.node.{node}"]
    if group:
        names.append(f"{prefix}.group.{group}")
    names.append(f"{prefix}.default")
    return names


def parse_source(source: Source) -> Config:
    """Validate one document; the error names the source and every path in it."""
    try:
        data = yaml.safe_load(source.text) if source.text.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source.name}: not valid YAML or JSON: {exc}") from exc
    return config_from_mapping(data, source=source.name)


def resolve(
    *,
    configmaps: Mapping[str, Mapping[str, Any]],
    node: str,
    group: str | None,
    namespace: str,
    file_text: tuple[str, str] | None = None,
    configure_text: str = "",
    prefix: str = DEFAULT_PREFIX,
) -> Resolved:
    """Pick the highest-precedence source that exists and validate it.

    `configmaps` maps ConfigMap name -> the object as read from the API server.
    `file_text` is (path, content) of the --config file, if one was given.
    """
    for name in configmap_names(node, group, prefix):
        obj = configmaps.get(name)
        if obj is None:
            continue
        data = obj.get("data") or {}
        if DATA_KEY not in data:
            raise ConfigError(
                f"ConfigMap {namespace}/{name}: no key {DATA_KEY!r}; expected the "
                f"configuration document under data.{DATA_KEY}"
            )
        src = Source(
            name=f"ConfigMap {namespace}/{name}",
            text=str(data[DATA_KEY]),
            object_name=name,
            resource_version=str((obj.get("metadata") or {}).get("resourceVersion") or ""),
        )
        return Resolved(parse_source(src), src)
    if file_text is not None:
        path, text = file_text
        src = Source(name=path, text=text, kind="file")
        return Resolved(parse_source(src), src)
    if configure_text.strip():
        src = Source(name="ConfigureRequest.config", text=configure_text, kind="configure")
        return Resolved(parse_source(src), src)
    src = Source(name="built-in defaults", text="", kind="default")
    return Resolved(load_config(""), src)


@dataclass(frozen=True, slots=True)
class Outcome:
    applied: bool
    source: Source
    message: str


class LiveConfig:
    """The configuration in force, changed only through `offer`."""

    def __init__(
        self,
        initial: Resolved,
        *,
        apply: Callable[[Config], None],
        report: Callable[[Outcome], None],
    ) -> None:
        self.current = initial
        self._apply = apply
        self._report = report

    def offer(self, resolve_next: Callable[[], Resolved]) -> Outcome:
        """Resolve, validate and apply the next configuration, or keep the current one."""
        try:
            nxt = resolve_next()
        except ConfigError as exc:
            out = Outcome(False, self.current.source,
                          f"rejected: {exc}; keeping {self.current.source.name}")
            self._report(out)
            return out
        if nxt.config == self.current.config:
            return Outcome(False, nxt.source, "unchanged")
        try:
            self._apply(nxt.config)
        except Exception as exc:  # any failure to apply must revert
            try:
                self._apply(self.current.config)
                restored = f"previous configuration from {self.current.source.name} restored"
            except Exception as again:
                restored = f"restoring the previous configuration failed too: {again}"
            message = f"applying {nxt.source.name} failed: {exc}; {restored}"
            out = Outcome(False, nxt.source, message)
            self._report(out)
            return out
        self.current = nxt
        out = Outcome(True, nxt.source, f"applied {nxt.source.name}")
        self._report(out)
        return out
