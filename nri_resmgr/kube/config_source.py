"""Where the configuration comes from, and live reload.

Theory of operation: the effective configuration is the highest-precedence source that
exists, used whole (sources are not merged, so an operator can always tell which document
is in force):

1. nri-plugins' configuration custom resource (``TopologyAwarePolicy``, any kind of
   `nri_resmgr.policy_documents.policy_kinds`) in the daemon's namespace, by their rule:
   `node.<NODE>` if it exists, else `group.<GROUP>` when the node has the label
   `config.nri/group` (no fallback to `default` then, as in nri-plugins), else `default`;
2. the ConfigMap `<prefix>.node.<NODE>` in the daemon's namespace,
3. the ConfigMap `<prefix>.group.<GROUP>`, GROUP being the value of the node label
   `config.nri-resmgr.io/group` (configurable),
4. the ConfigMap `<prefix>.default`,
5. the local file given with `--config`,
6. the string a pre-registered plugin receives in Configure,
7. the built-in defaults.

So a custom resource that applies to the node wins over every ConfigMap.  Each ConfigMap
holds the document under the key `config.yaml`; a custom resource is read whole (its
``spec``).  The status of a custom resource is written the way nri-plugins' operators read
it: `node_status` is the merge patch of ``status.nodes.<NODE>`` (``status`` Success or
Failure, the ``generation`` it is about, ``errors``, ``timestamp``).  `resolve` is pure: given
what exists, it returns the chosen `Config` and a description of its source, or raises a
`ConfigError` naming the source and every problem in it.  `LiveConfig` holds the config in
force and applies a new one through a callback: the new document is validated, applied,
and if applying fails the previous one is re-applied and stays in force.  Each outcome is
reported (a log line, the `nri_resmgr_config_reloads` metric, and a Kubernetes Event on the
ConfigMap when the source is one).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nri_resmgr.config import Config, config_from_mapping, load_config
from nri_resmgr.documents import parse_document
from nri_resmgr.model import ConfigError
from nri_resmgr.ops.logs import log_config_warnings
from nri_resmgr.policy_documents import API_VERSION, policy_kinds

DEFAULT_PREFIX = "nri-resmgr-config"
GROUP_LABEL = "config.nri-resmgr.io/group"
#: nri-plugins' node label choosing a ``group.NAME`` custom resource
RESOURCE_GROUP_LABEL = "config.nri/group"
DATA_KEY = "config.yaml"
STATUS_SUCCESS = "Success"
STATUS_FAILURE = "Failure"


@dataclass(frozen=True, slots=True)
class Source:
    """One configuration document and where it came from."""

    name: str  # e.g. "ConfigMap kube-system/nri-resmgr-config.node.worker-1"
    text: str
    kind: str = "configmap"  # configmap | resource | file | configure | default
    object_name: str = ""  # the ConfigMap's or custom resource's name
    resource_version: str = ""
    generation: int = 0  # a custom resource's metadata.generation
    path: str = ""  # a custom resource's API path (its status is path + "/status")


class SourceError(ConfigError):
    """A configuration document that does not validate, and where it came from."""

    def __init__(self, source: Source, exc: ConfigError) -> None:
        super().__init__(str(exc))
        self.source = source


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


def resource_names(node: str, group: str | None) -> list[str]:
    """Custom resource names in precedence order (nri-plugins' rule, see above)."""
    return [f"node.{node}", f"group.{group}" if group else "default"]


def resource_path(namespace: str, plural: str, name: str = "") -> str:
    path = f"/apis/{API_VERSION}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


def node_status(node: str, *, generation: int | None, error: str = "") -> dict[str, Any]:
    """The merge patch setting (or, with `generation` None, removing) `node`'s status."""
    if generation is None:
        return {"status": {"nodes": {node: None}}}
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "status": {
            "nodes": {
                node: {
                    "status": STATUS_FAILURE if error else STATUS_SUCCESS,
                    "generation": generation,
                    "errors": error,
                    "timestamp": now,
                }
            }
        }
    }


def parse_source(source: Source) -> Config:
    """Validate one document; the error (a `SourceError`) names the source and every path."""
    try:
        data = parse_document(source.text, source=source.name)
        # parsed at every change and relist: warnings are logged once, when taken into use
        return config_from_mapping(data, source=source.name)
    except ConfigError as exc:
        raise SourceError(source, exc) from exc


def _resource_source(namespace: str, plural: str, obj: Mapping[str, Any]) -> Source:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    doc = {k: obj[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in obj}
    doc["metadata"] = {"name": name, "namespace": namespace}
    return Source(
        name=f"{obj.get('kind')} {namespace}/{name}",
        text=json.dumps(doc),
        kind="resource",
        object_name=name,
        resource_version=str(meta.get("resourceVersion") or ""),
        generation=int(meta.get("generation") or 0),
        path=resource_path(namespace, plural, name),
    )


def resolve(
    *,
    configmaps: Mapping[str, Mapping[str, Any]],
    node: str,
    group: str | None,
    namespace: str,
    file_text: tuple[str, str] | None = None,
    configure_text: str = "",
    prefix: str = DEFAULT_PREFIX,
    resources: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
    resource_group: str | None = None,
) -> Resolved:
    """Pick the highest-precedence source that exists and validate it.

    `configmaps` maps ConfigMap name -> the object as read from the API server;
    `resources` maps (plural, name) -> a configuration custom resource, and
    `resource_group` is the node's `RESOURCE_GROUP_LABEL`.
    `file_text` is (path, content) of the --config file, if one was given.
    """
    for name in resource_names(node, resource_group) if resources else ():
        for kind in policy_kinds():
            found = resources.get((kind.plural, name)) if resources else None
            if found is not None:
                src = _resource_source(namespace, kind.plural, found)
                return Resolved(parse_source(src), src)
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
    """What came of offering a configuration: `source` is the one in force afterwards,
    `offered` the one that was tried (None when no source could be read), `error` why
    it was not taken into use (empty when it was, or when it was unchanged).  A document
    that failed to apply is not applied again until it changes (``refused before``)."""

    applied: bool
    source: Source
    message: str
    offered: Source | None = None
    error: str = ""


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
        #: the last document that failed to apply, and why: not tried again until it changes
        self._refused: tuple[Resolved, str] | None = None

    def offer(self, resolve_next: Callable[[], Resolved]) -> Outcome:
        """Resolve, validate and apply the next configuration, or keep the current one."""
        try:
            nxt = resolve_next()
        except ConfigError as exc:
            offered = exc.source if isinstance(exc, SourceError) else None
            out = Outcome(
                False,
                self.current.source,
                f"rejected: {exc}; keeping {self.current.source.name}",
                offered,
                str(exc),
            )
            self._report(out)
            return out
        if self._refused is not None and self._refused[0] == nxt:
            return Outcome(
                False, self.current.source, "refused before", nxt.source, self._refused[1]
            )
        if nxt.config == self.current.config:
            if nxt.source != self.current.source:
                self.current = nxt  # the same document, from another source now
            return Outcome(False, nxt.source, "unchanged", nxt.source)
        try:
            self._apply(nxt.config)
        except Exception as exc:  # any failure to apply must revert
            try:
                self._apply(self.current.config)
                restored = f"previous configuration from {self.current.source.name} restored"
            except Exception as again:
                restored = f"restoring the previous configuration failed too: {again}"
            message = f"applying {nxt.source.name} failed: {exc}; {restored}"
            self._refused = (nxt, message)
            out = Outcome(False, self.current.source, message, nxt.source, message)
            self._report(out)
            return out
        self.current = nxt
        log_config_warnings(nxt.config.warnings, source=nxt.source.name)
        out = Outcome(True, nxt.source, f"applied {nxt.source.name}", nxt.source)
        self._report(out)
        return out
