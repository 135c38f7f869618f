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

`load_config` reads a file (YAML or JSON, told apart by content, JSON being YAML) or parses
a document given as a string (the ``ConfigureRequest.config`` of a pre-registered plugin);
`config_from_mapping` validates an already parsed mapping.  Every error is a `ConfigError`
whose message names the source and the path in the document, e.g.
``/etc/nri-resmgr.yaml: log.format: expected one of auto, json, console, found 'xml'``.

The model is open for extension: new sections are new fields with defaults; unknown keys
are rejected so that a typo never passes silently.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from nri_resmgr.control.config import ControlConfig
from nri_resmgr.limits import Limits
from nri_resmgr.model import ConfigError

__all__ = [
    "Config",
    "ControlConfig",
    "InstrumentationConfig",
    "LogConfig",
    "LogFormat",
    "config_from_mapping",
    "format_validation_error",
    "load_config",
    "validation_messages",
]

DEFAULT_POLICY = "topology-aware"
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class LogFormat(enum.StrEnum):
    AUTO = "auto"
    JSON = "json"
    CONSOLE = "console"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class LogConfig(_Section):
    level: str = "info"
    format: LogFormat = LogFormat.AUTO
    file: str | None = None
    debug: tuple[str, ...] = ()

    @field_validator("level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        low = value.lower()
        if low == "warn":
            low = "warning"
        if low not in LOG_LEVELS:
            raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}, found {value!r}")
        return low


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

    @field_validator("policy")
    @classmethod
    def _nonempty_policy(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("expected a policy name, found an empty string")
        return value.strip()


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "(document)"


def format_validation_error(exc: ValidationError, *, prefix: str = "") -> str:
    """All problems on one line, separated by ``; `` (see `validation_messages`)."""
    return "; ".join(validation_messages(exc, prefix=prefix))


def validation_messages(exc: ValidationError, *, prefix: str = "") -> list[str]:
    """One message per problem: ``path.in.document: message, found VALUE``."""
    lines = []
    for err in exc.errors():
        loc = _loc(tuple(err["loc"]))
        if prefix:
            loc = prefix if loc == "(document)" else f"{prefix}.{loc}"
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        found = err.get("input")
        if err["type"] in ("missing", "extra_forbidden") or "found" in msg:
            lines.append(f"{loc}: {msg}")
        else:
            lines.append(f"{loc}: {msg}, found {found!r}")
    return lines


def config_from_mapping(data: Mapping[str, Any] | None, *, source: str = "<config>") -> Config:
    """Validate an already parsed document; None (an empty document) is the default config."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{source}: expected a mapping at the top of the document, found "
            f"{type(data).__name__}"
        )
    try:
        return Config.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(f"{source}: {format_validation_error(exc)}") from exc


def load_config(source: Path | str) -> Config:
    """A `Config` from a file (`Path`) or from document text (`str`), YAML or JSON."""
    if isinstance(source, Path):
        name = str(source)
        try:
            text = source.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{name}: cannot read the configuration file: {exc}") from exc
    else:
        name, text = "<config>", source
    try:
        data = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: not valid YAML or JSON: {exc}") from exc
    return config_from_mapping(data, source=name)
