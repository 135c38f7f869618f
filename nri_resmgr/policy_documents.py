"""Configuration documents in nri-plugins' form: their custom resources and bare specs.

Theory of operation
-------------------
Operators of containers/nri-plugins keep their configuration as custom resources
(``apiVersion: config.nri/v1alpha1``, ``kind: TopologyAwarePolicy``, ``metadata``,
``spec``) or as the bare ``spec`` (their Helm chart's ``config`` value).  Wherever this
daemon takes a configuration document, `normalize_document` turns either form into this
project's own (``policy``, ``policyConfig``, ``control``, ``log``, ``instrumentation``)
before it is validated, so their files load unchanged:

* the kind names the policy: the policies' records (`nri_resmgr.policy.base.PolicyRecord`,
  found by `nri_resmgr.policy_registry`) each name the custom resource kind configuring
  it, if any (`policy_kinds`); a bare spec is
  recognised by its keys: no key of this project's own form that theirs lacks
  (``policy``, ``policyConfig``, ``policyDirs``, ``limits``) and at least one of a
  policy's spec keys;
* the spec's common sections map to ours (``control.rdt``, ``control.blockio``, ``control.cpu``,
  ``log.debug``, ``instrumentation.httpEndpoint``); the keys that have no counterpart here
  (`COMMON_NOT_IMPLEMENTED`) are removed with one warning each;
* every other spec key goes to ``policyConfig``, where the policy's model accepts it;
  keys the policy accepts without effect (its record's ``not_implemented``) give one
  warning each, in either form;
* their memory-policy and memory-qos plugins' own files (top-level ``classes``) become
  ``control.memoryPolicy`` / ``control.memoryQos`` (`nri_resmgr.control.memory_documents`);
* a key set to the value their CRD defaults it to (`SERVER_DEFAULTS`, which the API server
  writes into every custom resource) gives no warning: the operator did not ask for it.

A misspelt key is not a warning: it is left in place, and validation rejects it with the
keys expected there and the closest one.  Warnings are values (`Normalized.warnings`);
the caller logs them (one structured warning per key) or prints them (validate-config).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from nri_resmgr.control.memory_documents import plugin_section
from nri_resmgr.documents import DocumentError
from nri_resmgr.model import ConfigError
from nri_resmgr.policy.base import PolicyRecord
from nri_resmgr.policy_registry import PolicySource, available_policies
from nri_resmgr.validation import unknown_key_message

__all__ = [
    "API_VERSION",
    "COMMON_NOT_IMPLEMENTED",
    "Normalized",
    "PolicyKind",
    "kind_of_policy",
    "normalize_document",
    "policy_kinds",
]

API_GROUP = "config.nri"
API_VERSION = f"{API_GROUP}/v1alpha1"


@dataclass(frozen=True, slots=True)
class PolicyKind:
    """One configuration custom resource kind and the record of the policy it configures."""

    kind: str
    plural: str
    record: PolicyRecord

    @property
    def policy(self) -> str:
        return self.record.name

    def spec_model(self) -> type[BaseModel]:
        """The model of the spec's policy keys."""
        model = self.record.spec_model
        if model is None:  # kinds are made only of records with both (`policy_kinds`)
            raise TypeError(f"policy {self.policy}: its record has no spec model")
        return model

    def not_implemented(self) -> Mapping[str, str]:
        """Dotted key path -> the feature it would control, for keys without effect."""
        return self.record.not_implemented

    def spec_keys(self) -> frozenset[str]:
        return self.record.spec_keys()


#: the policy a bare spec is read for when its keys do not tell (nri-plugins' default)
_DEFAULT_KIND_POLICY = "topology-aware"


def policy_kinds() -> tuple[PolicyKind, ...]:
    """The custom resource kinds of the installed policies: `_DEFAULT_KIND_POLICY`'s first
    (an ambiguous bare spec is read as it), then in the registry's name order.

    Read from each installed policy's record (entry points only: a drop-in is configured
    in this project's form).  A policy whose entry point fails to load has no kind here;
    loading it by name reports why.
    """
    kinds = (_kind(source) for source in available_policies().values())
    found = [k for k in kinds if k is not None]
    return tuple(sorted(found, key=lambda k: k.policy != _DEFAULT_KIND_POLICY))


def _kind(source: PolicySource) -> PolicyKind | None:
    """The kind `source`'s record names (None: none, or its entry point fails to load)."""
    try:
        record = source.load()
    except ConfigError:
        return None
    if record.resource is None or record.spec_model is None:
        return None
    return PolicyKind(record.resource.kind, record.resource.plural, record)


#: the common sections of their specs, handled here rather than by the policy
COMMON_SECTIONS = ("control", "log", "instrumentation", "agent")

#: keys of their common sections accepted without effect: dotted path -> why
COMMON_NOT_IMPLEMENTED: dict[str, str] = {
    "agent.nodeResourceTopology": "set with `run --node-resource-topology` here",
    "agent.podResourceAPI": "the pod resources API is not read",
    "control.rdt.force": "RDT control is not forced on here",
    "log.source": "log lines do not carry source locations",
    "log.klog": "there is no klog here",
    "instrumentation.reportPeriod": "metrics are computed when scraped",
    "instrumentation.samplingRatePerMillion": "there is no tracing",
    "instrumentation.tracingCollector": "there is no tracing",
    "instrumentation.metrics": "every metric is exported",
    "instrumentation.prometheusExport": "metrics are served on httpEndpoint",
    "instrumentation.metricsExporter": "metrics are served on httpEndpoint",
    "instrumentation.logExporter": "logs are not exported",
    "instrumentation.logExportPeriod": "logs are not exported",
}

#: the values their CRDs fill in for keys left out (the API server applies them to every
#: custom resource): such a value is what the operator did not write, and gives no warning.
#: One table for every kind: where two kinds have a key, their CRDs default it alike
#: (``turboDomain`` is the balloons kind's only)
SERVER_DEFAULTS: dict[str, Any] = {
    "agent.nodeResourceTopology": True,
    "controllableInterrupts": ["*"],
    "defaultCPUPriority": "none",
    "instrumentation.metrics": {"enabled": ["policy", "buildinfo"]},
    "instrumentation.reportPeriod": "30s",
    "pinCPU": True,
    "pinMemory": True,
    "preferIsolatedCPUs": True,
    "turboDomain": "package",
    "unlimitedBurstable": "package",
}

#: keys of this project's own form that a bare spec never has
_OWN_KEYS = frozenset({"policy", "policyConfig", "policyDirs", "limits"})
_CR_KEYS = ("apiVersion", "kind", "metadata", "spec", "status")


@dataclass(frozen=True, slots=True)
class Normalized:
    """A document in this project's form, and the keys it sets that have no effect."""

    data: Any
    warnings: tuple[str, ...] = ()
    form: str = "own"  # own | resource | spec | plugin
    kind: PolicyKind | None = None
    #: a memory plugin's file: the section it was nested under (``control.memoryQos``)
    section: str = ""

    def where(self, path: str) -> str:
        """A message about `path` of the normalized document, with the path as the user
        wrote it (``policyConfig.x`` -> ``spec.x`` in a custom resource, ``x`` in a bare
        spec, ``control.memoryQos.x`` -> ``x`` in their memory plugin's file)."""
        if self.form == "own":
            return path
        if self.form == "plugin":
            return path.removeprefix(self.section + ".")
        prefix = "spec." if self.form == "resource" else ""
        if path.startswith("policyConfig."):
            return prefix + path.removeprefix("policyConfig.")
        if path.startswith("policyConfig:"):
            return (prefix.rstrip(".") or "(document)") + path.removeprefix("policyConfig")
        if path.split(".")[0].split(":")[0] in COMMON_SECTIONS:
            return prefix + path
        return path


def kind_of_policy(policy: str) -> PolicyKind | None:
    """The custom resource kind configuring `policy` (None for policies without one).

    Only `policy`'s own record is loaded: the daemon's start pays for no other policy.
    """
    source = available_policies().get(policy)
    return _kind(source) if source is not None else None


def _pop_path(data: dict[str, Any], path: str) -> bool:
    """Remove the dotted `path` from nested mappings in `data`; True if it was there.

    A mapping left empty by the removal is removed too.
    """
    parts = path.split(".")
    chain = [data]
    for part in parts[:-1]:
        sub = chain[-1].get(part)
        if not isinstance(sub, dict):
            return False
        chain.append(sub)
    if parts[-1] not in chain[-1]:
        return False
    del chain[-1][parts[-1]]
    for i in range(len(chain) - 1, 0, -1):
        if chain[i]:
            break
        del chain[i - 1][parts[i - 1]]
    return True


_MISSING = object()


def _get_path(data: Mapping[str, Any], path: str) -> Any:
    """The value at the dotted `path`; through a list, the first element's that has it."""
    node: Any = data
    parts = path.split(".")
    for i, part in enumerate(parts):
        if isinstance(node, list | tuple):
            rest = ".".join(parts[i:])
            found = (_get_path(e, rest) for e in node if isinstance(e, Mapping))
            return next((v for v in found if v is not _MISSING), _MISSING)
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _has_path(data: Mapping[str, Any], path: str) -> bool:
    """Whether `path` is set in `data` to something else than its `SERVER_DEFAULTS` value."""
    value = _get_path(data, path)
    return value is not _MISSING and value != SERVER_DEFAULTS.get(path, _MISSING)


def _copy(value: Any) -> Any:
    """A copy of the mappings of a parsed document (leaves shared)."""
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    return value


def _warning(path: str, why: str) -> str:
    return f"{path}: accepted, not implemented here ({why}); it has no effect"


def policy_warnings(
    kind: PolicyKind, policy_config: Mapping[str, Any], *, prefix: str
) -> list[str]:
    """One warning per key of `policy_config` that `kind`'s policy accepts without effect."""
    return [
        _warning(f"{prefix}{path}", why)
        for path, why in kind.not_implemented().items()
        if _has_path(policy_config, path)
    ]


def _from_spec(spec: Mapping[str, Any], kind: PolicyKind, *, form: str, source: str) -> Normalized:
    prefix = "spec." if form == "resource" else ""
    spec = dict(_copy(spec))
    warnings = []
    for path, why in COMMON_NOT_IMPLEMENTED.items():
        warn = _has_path(spec, path)
        if _pop_path(spec, path) and warn:
            warnings.append(_warning(prefix + path, why))
    agent = spec.pop("agent", None)
    if agent:
        # what is left of agent is misspelt (agent has no section here)
        known = [p.partition(".")[2] for p in COMMON_NOT_IMPLEMENTED if p.startswith("agent.")]
        left = agent if isinstance(agent, Mapping) else {agent: None}
        raise DocumentError(
            source, [f"{prefix}agent: {unknown_key_message(key, known)}" for key in left]
        )
    data: dict[str, Any] = {"policy": kind.policy}
    for section in COMMON_SECTIONS:
        if section in spec:
            data[section] = spec.pop(section)
    data["policyConfig"] = spec
    warnings += policy_warnings(kind, spec, prefix=prefix)
    return Normalized(data, tuple(warnings), form, kind)


def _resource(data: Mapping[str, Any], source: str) -> Normalized:
    problems = [
        f"(document): {unknown_key_message(key, list(_CR_KEYS))}"
        for key in data
        if key not in _CR_KEYS
    ]
    if data.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: expected {API_VERSION}, found {data.get('apiVersion')!r}")
    kinds = {k.kind: k for k in policy_kinds()}
    kind = kinds.get(str(data.get("kind")))
    if kind is None:
        problems.append(f"kind: expected one of {', '.join(kinds)}, found {data.get('kind')!r}")
    spec = data.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        problems.append(f"spec: expected a mapping, found {type(spec).__name__}")
    if problems or kind is None or not isinstance(spec, Mapping):
        raise DocumentError(source, problems)
    return _from_spec(spec, kind, form="resource", source=source)


def normalize_document(
    data: Any, *, source: str = "<config>", default_policy: str = "topology-aware"
) -> Normalized:
    """`data` (a parsed document) in this project's form, with its warnings.

    Raises `DocumentError` for a custom resource of another API version or an unknown kind.
    A value that is not a mapping is returned as it is (validation reports it).
    """
    if not isinstance(data, Mapping):
        return Normalized(data)
    if "apiVersion" in data or "kind" in data:
        return _resource(data, source)
    try:
        section = plugin_section(data)
    except ValueError as exc:
        raise DocumentError(source, [f"(document): {exc}"]) from exc
    if section is not None:  # nri-plugins' memory-policy or memory-qos file
        return Normalized(
            {"control": {section: dict(data)}}, (), "plugin", None, f"control.{section}"
        )
    keys = {str(k) for k in data}
    if not keys & _OWN_KEYS:
        # a key only one kind has names that kind; else the first kind with any of its keys
        kinds = policy_kinds()
        for only in (True, False):
            for kind in kinds:
                theirs = kind.spec_keys() - set(COMMON_SECTIONS)
                if only:
                    theirs -= {k for o in kinds if o != kind for k in o.spec_keys()}
                if keys & theirs:
                    return _from_spec(data, kind, form="spec", source=source)
        if "agent" in keys and kinds:  # only their common sections
            return _from_spec(data, kinds[0], form="spec", source=source)
    config = data.get("policyConfig")
    if not isinstance(config, Mapping) or not config:
        return Normalized(data)
    own = kind_of_policy(str(data.get("policy", default_policy)))
    if own is None:
        return Normalized(data)
    return Normalized(data, tuple(policy_warnings(own, config, prefix="policyConfig.")))
