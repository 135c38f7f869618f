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

import difflib
import enum
import re
import reprlib
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from nri_resmgr.control.config import ControlConfig
from nri_resmgr.documents import load_document, parse_document
from nri_resmgr.limits import Limits
from nri_resmgr.model import ConfigError
from nri_resmgr.policy_documents import normalize_document

__all__ = [
    "Config",
    "ControlConfig",
    "InstrumentationConfig",
    "LogConfig",
    "LogFormat",
    "config_from_mapping",
    "format_validation_error",
    "load_config",
    "log_config_warnings",
    "model_keys",
    "policy_config_problems",
    "short_repr",
    "unknown_key_message",
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


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "(document)"


def _members(tp: Any) -> list[Any]:
    """`tp` with unions, Optional and Annotated taken apart."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return [m for arg in typing.get_args(tp) for m in _members(arg)]
    if origin is typing.Annotated:
        return _members(typing.get_args(tp)[0])
    return [tp]


def _step_into(tp: Any, part: int | str) -> Any:
    """The type found at `part` (a key or an index) inside a value of type `tp`."""
    for member in _members(tp):
        if isinstance(member, type) and issubclass(member, BaseModel) and isinstance(part, str):
            for name, info in member.model_fields.items():
                if part in (name, info.alias):
                    return info.annotation
        origin = typing.get_origin(member)
        args = typing.get_args(member)
        if origin in (dict, Mapping) and isinstance(part, str) and len(args) == 2:
            return args[1]
        if origin in (tuple, list) and isinstance(part, int) and args:
            return args[0]
    return None


def model_keys(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> list[str]:
    """The document keys the mapping at `loc` inside `model` accepts (empty if unknown)."""
    tp: Any = model
    for part in loc:
        if tp is None:
            return []
        tp = _step_into(tp, part)
    for member in _members(tp):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return [info.alias or name for name, info in member.model_fields.items()]
    return []


def unknown_key_message(key: object, known: list[str]) -> str:
    """``unknown key K; expected one of A, B; did you mean B?`` (the parts that are known)."""
    msg = f"unknown key {key}"
    if known:
        msg += f"; expected one of {', '.join(known)}"
        text = str(key)
        close = [k for k in known if k.lower() == text.lower()] or difflib.get_close_matches(
            text, known, n=1, cutoff=0.6
        )
        if close:
            msg += f"; did you mean {close[0]}?"
    return msg


_SHORT = reprlib.Repr()
_SHORT.maxstring = 60
_SHORT.maxother = 60
_SHORT.maxlevel = 2


def short_repr(value: object) -> str:
    """`repr` bounded in length and depth (inputs may be huge or deeply nested)."""
    return _SHORT.repr(value)


def format_validation_error(
    exc: ValidationError, *, prefix: str = "", model: type[BaseModel] | None = None
) -> str:
    """All problems on one line, separated by ``; `` (see `validation_messages`)."""
    return "; ".join(validation_messages(exc, prefix=prefix, model=model))


def validation_messages(
    exc: ValidationError, *, prefix: str = "", model: type[BaseModel] | None = None
) -> list[str]:
    """One message per problem, ``path.in.document: expected ..., found VALUE``.

    An unknown key is reported at the mapping that holds it, with the keys `model` accepts
    there and the closest one: ``policyConfig: unknown key pinCPUs; expected one of ...;
    did you mean pinCPU?``.  `prefix` is put before every path (``policyConfig``).
    """

    def where(loc: tuple[int | str, ...]) -> str:
        path = _loc(loc)
        if prefix:
            path = prefix if path == "(document)" else f"{prefix}.{path}"
        return path

    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden" and loc:
            lines.append(
                f"{where(loc[:-1])}: {unknown_key_message(loc[-1], model_keys(model, loc[:-1]))}"
            )
            continue
        if err["type"] == "missing":
            lines.append(f"{where(loc)}: expected a value, found none")
            continue
        if msg.startswith("Input should be "):
            msg = "expected " + msg.removeprefix("Input should be ")
            msg = msg.removesuffix(", unable to interpret input")
        if "found" in msg:
            lines.append(f"{where(loc)}: {msg}")
        else:
            lines.append(f"{where(loc)}: {msg}, found {short_repr(err.get('input'))}")
    return lines


#: ``reservedResources.cpu`` at the start of a policy's message, and what follows it
_PATH_RE = re.compile(r"(?P<path>[A-Za-z_][\w.\[\]]*)(?::\s*|\s+(?:is\s+)?)(?P<rest>.*)", re.S)


def _policy_model(policy: str, title: str) -> type[BaseModel] | None:
    """The policy's pydantic model called `title` (for the keys an unknown key is not)."""
    from importlib.metadata import entry_points

    from nri_resmgr.policy_registry import ENTRY_POINT_GROUP

    package = "nri_resmgr_dropin_"  # the modules drop-ins are imported as
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == policy:
            package = ep.module.rpartition(".")[0] + "."
    for name, module in list(sys.modules.items()):
        if name.startswith(package):
            found = getattr(module, title, None)
            if isinstance(found, type) and issubclass(found, BaseModel):
                return found
    return None


def policy_config_problems(
    exc: ConfigError, *, policy: str, policy_config: Mapping[str, Any]
) -> tuple[list[str], set[str]]:
    """One line per problem in a policy's `ConfigError`, and the policyConfig keys at fault.

    A policy validates its configuration itself and reports one error at a time, in its
    own words: ``policy static: invalid configuration: <pydantic text>`` or ``policy
    topology-aware: reservedResources.cpu: <problem>``.  Pydantic problems are reworded
    like the daemon's own (`validation_messages`, prefix ``policyConfig``); a message that
    starts with a key of `policy_config` gets the path ``policyConfig.KEY...``; a CPU list
    error gives one line per bad element (`IDSetError.problems`).
    """
    from nri_resmgr.topology.cpuset import IDSetError

    cause = exc.__cause__
    if isinstance(cause, ValidationError):
        model = _policy_model(policy, cause.title)
        lines = validation_messages(cause, prefix="policyConfig", model=model)
        return lines, {str(e["loc"][0]) for e in cause.errors() if e["loc"]}
    message = str(exc)
    if message.startswith("unknown policy"):
        return [f"policy: {message}"], set()
    if message.startswith(("policy drop-in", "policy plugin directory")) or (
        message.startswith("policy '") and "defined twice" in message
    ):
        return [f"policyDirs: {message}"], set()
    rest = message.removeprefix(f"policy {policy}: ")
    m = _PATH_RE.fullmatch(rest)
    key = m.group("path").split(".")[0].split("[")[0] if m else ""
    if m is None or key not in policy_config:
        return [f"policyConfig: {rest}"], set()
    path = f"policyConfig.{m.group('path')}"
    if isinstance(cause, IDSetError) and len(cause.problems) > 1:
        return [f"{path}: {problem}" for problem in cause.problems], {key}
    return [f"{path}: {m.group('rest')}"], {key}


def log_config_warnings(warnings: tuple[str, ...], *, source: str) -> None:
    """One structured warning per key accepted without effect (`Config.warnings`)."""
    from nri_resmgr.ops.logs import get_logger

    log = get_logger("config")
    for warning in warnings:
        log.warning("configuration key has no effect", source=source, problem=warning)


def config_from_mapping(
    data: Mapping[str, Any] | None, *, source: str = "<config>", log_warnings: bool = True
) -> Config:
    """Validate an already parsed document; None (an empty document) is the default config.

    The document may be in this project's form or in nri-plugins' (a custom resource or a
    bare spec, `nri_resmgr.policy_documents`).  Keys accepted without effect are kept in
    `Config.warnings` and logged, one warning each, unless `log_warnings` is false (a
    caller that parses the same document again and again logs them when it takes the
    configuration into use).
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
    if norm.warnings and log_warnings:
        log_config_warnings(norm.warnings, source=source)
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
