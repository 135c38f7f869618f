"""The daemon's root configuration.

Theory of operation
-------------------
One pydantic model, `Config`, describes everything the daemon reads at start-up; the
document uses camelCase keys (``policyConfig``), the Python attributes snake_case.  Its
sections are:

* ``policy``: the name of the active policy (``none``, ``static``, ``topology-aware``,
  or a drop-in), and ``policyConfig``, a plain mapping handed to that policy, which
  validates it with its own model (errors come back as `ConfigError` and are reported
  under ``policyConfig.``); ``policyDirs``: extra directories searched for drop-in
  policy modules.
* ``control``: RDT and block I/O class control, `nri_resmgr.control.config.ControlConfig`:
  ``rdt`` and ``blockio`` each hold the class selection (``enable``,
  ``usePodQoSAsDefaultClass``, ``defaultClass``) next to the class definitions
  (``partitions``/``options``/``monitorPods``; ``classes``), see docs/rdt-blockio.md.
* ``log``: ``level``, ``format`` (``auto`` = JSON unless stderr is a terminal, ``json``,
  ``console``), ``file`` (pre-registered plugins have stdout discarded) and ``debug``, a
  list of components logged at debug level whatever the global level.
* ``instrumentation``: ``httpEndpoint`` (``:8891``-style address for metrics and health;
  empty to disable).
* ``events``: Kubernetes Events on the pods (`nri_resmgr.view.events.EventsConfig`):
  ``enabled``, ``rate`` (per second), ``burst``, ``maxPending``, ``coalesceSeconds``.

`load_config` reads a file (YAML or JSON, told apart by content, JSON being YAML) or parses
a document given as a string (the ``ConfigureRequest.config`` of a pre-registered plugin);
`config_from_mapping` validates an already parsed mapping.  Every error is a `ConfigError`
whose message names the source and the path in the document, e.g.
``/etc/nri-resmgr.yaml: log.format: expected one of auto, json, console, found 'xml'``.

The model is open for extension: new sections are new fields with defaults; unknown keys
are rejected so that a typo never passes silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from nri_resmgr.control.config import ControlConfig
from nri_resmgr.documents import load_document, parse_document
from nri_resmgr.limits import Limits
from nri_resmgr.model import ConfigError
from nri_resmgr.ops.log_config import LogConfig, LogFormat
from nri_resmgr.policy_documents import normalize_document
from nri_resmgr.policy_registry import DropInError, UnknownPolicy
from nri_resmgr.validation import InvalidConfig, validation_messages
from nri_resmgr.view.events import EventsConfig

__all__ = [
    "Config",
    "ControlConfig",
    "EventsConfig",
    "InstrumentationConfig",
    "LogConfig",
    "LogFormat",
    "config_from_mapping",
    "load_config",
    "policy_config_problems",
]

DEFAULT_POLICY = "topology-aware"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class InstrumentationConfig(_Section):
    http_endpoint: str = Field(default="", alias="httpEndpoint")


class Config(_Section):
    policy: str = DEFAULT_POLICY
    policy_config: dict[str, Any] = Field(default_factory=dict, alias="policyConfig")
    policy_dirs: tuple[str, ...] = Field(default=(), alias="policyDirs")
    control: ControlConfig = Field(default_factory=ControlConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    instrumentation: InstrumentationConfig = Field(default_factory=InstrumentationConfig)
    limits: Limits = Field(default_factory=Limits)
    events: EventsConfig = Field(default_factory=EventsConfig)
    #: keys the document set that have no effect here (`nri_resmgr.policy_documents`)
    _warnings: tuple[str, ...] = PrivateAttr(default=())

    @property
    def warnings(self) -> tuple[str, ...]:
        """One message per key of the document accepted without effect."""
        return self._warnings

    @field_validator("policy")
    @classmethod
    def _nonempty_policy(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("expected a policy name, found an empty string")
        return value.strip()


def policy_config_problems(exc: ConfigError) -> tuple[list[str], set[str]]:
    """One line per problem in the error of loading a policy, and the policyConfig keys
    at fault.

    A policy reports the problems of its configuration as `InvalidConfig` (each at its
    path in ``policyConfig``); the registry reports an unknown name (`UnknownPolicy`, at
    ``policy``) and a broken drop-in (`DropInError`, at ``policyDirs``).  Any other
    `ConfigError` (a drop-in's own) is one line at ``policyConfig``.
    """
    if isinstance(exc, InvalidConfig):
        lines = [p.under("policyConfig") for p in exc.problems]
        return lines, {p.key for p in exc.problems if p.key}
    if isinstance(exc, UnknownPolicy):
        return [f"policy: {exc}"], set()
    if isinstance(exc, DropInError):
        return [f"policyDirs: {exc}"], set()
    return [f"policyConfig: {exc}"], set()


def config_from_mapping(data: Mapping[str, Any] | None, *, source: str = "<config>") -> Config:
    """Validate an already parsed document; None (an empty document) is the default config.

    The document may be in this project's form or in nri-plugins' (a custom resource or a
    bare spec, `nri_resmgr.policy_documents`).  Keys accepted without effect are kept in
    `Config.warnings`; the shell that takes the configuration into use logs them
    (`nri_resmgr.ops.logs.log_config_warnings`), as this module logs nothing.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{source}: expected a mapping at the top of the document, found {type(data).__name__}"
        )
    norm = normalize_document(data, source=source, default_policy=DEFAULT_POLICY)
    try:
        config = Config.model_validate(dict(norm.data))
    except ValidationError as exc:
        lines = [norm.where(line) for line in validation_messages(exc, model=Config)]
        raise ConfigError(f"{source}: {'; '.join(lines)}") from exc
    if norm.kind is not None:  # their form: the spec's policy keys are checked here too
        model = norm.kind.spec_model()
        try:
            model.model_validate(config.policy_config)
        except ValidationError as exc:
            messages = validation_messages(exc, prefix="policyConfig", model=model)
            lines = [norm.where(line) for line in messages]
            raise ConfigError(f"{source}: {'; '.join(lines)}") from exc
    if norm.warnings:
        config._warnings = norm.warnings
    return config


def load_config(source: Path | str) -> Config:
    """A `Config` from a file (`Path`) or from document text (`str`), YAML or JSON.

    Both are read and parsed through `nri_resmgr.documents` (regular files only, bounded
    size, depth and numbers); every problem is a `ConfigError`.
    """
    if isinstance(source, Path):
        name = str(source)
        data = load_document(source)
    else:
        name = "<config>"
        data = parse_document(source, source=name)
    return config_from_mapping(data, source=name)
