"""Validation messages: one wording for every configuration model, problems as values.

Theory of operation
-------------------
Every configuration model (the daemon's `Config`, the control sections, each policy's
own model, the simulator's scenarios) is a pydantic model; this module turns what
pydantic finds into this project's wording, ``path.in.document: expected ..., found
VALUE``, and is the only place that does.  A problem is a value, `Problem` (a path and a
message); `InvalidConfig` is the `ConfigError` that carries them, so a caller that needs
the path of each problem (``validate-config`` reports ``policyConfig.KEY`` and sets the
key aside) reads `InvalidConfig.problems` and never parses a message back.

* `validate(model, data, subject=...)` validates a mapping and raises `InvalidConfig`
  with one problem per pydantic error;
* `invalid(subject, path, message)` is the error for one problem a model's own rule
  finds (``reservedResources.cpu``, ``expected ..., found ...``);
* `problems_of` / `validation_messages` reword a `ValidationError`: an unknown key is
  reported at the mapping that holds it with the keys the model accepts there and the
  closest one (`unknown_key_message`); a missing value says so; pydantic's ``Input
  should be`` becomes ``expected``, and the value found is shown bounded (`short_repr`).

This module imports nothing of the project but `model` (for `ConfigError`): the
configuration root, the policy documents and every policy's model use it, and it uses
none of them.
"""

from __future__ import annotations

import difflib
import reprlib
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from nri_resmgr.model import ConfigError

__all__ = [
    "InvalidConfig",
    "Problem",
    "format_validation_error",
    "invalid",
    "join_path",
    "model_keys",
    "problems_of",
    "short_repr",
    "unknown_key_message",
    "validate",
    "validation_messages",
]

M = TypeVar("M", bound=BaseModel)

Loc = tuple[int | str, ...]


def join_path(prefix: str, path: str) -> str:
    """`path` under `prefix` (``prefix.path``, ``prefix[0]``); "" is the mapping itself."""
    if not prefix:
        return path
    if not path:
        return prefix
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


def _loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem: where in the validated mapping ("": the mapping itself) and what."""

    path: str
    message: str
    #: the value at fault, where it is not at `path` (an unknown key is reported at the
    #: mapping holding it: `path` is the mapping's, `at` the key's)
    at: str | None = None

    @property
    def key(self) -> str:
        """The top-level key at fault ("" for the mapping itself)."""
        at = self.path if self.at is None else self.at
        return at.split(".")[0].split("[")[0]

    def under(self, prefix: str) -> str:
        """The problem as a line, its path under `prefix` (``(document)`` for none)."""
        return f"{join_path(prefix, self.path) or '(document)'}: {self.message}"


class InvalidConfig(ConfigError):
    """A configuration `subject` (``policy static``) with its problems, each at its path.

    ``str()`` is ``subject: path: message; path: message``.
    """

    def __init__(self, subject: str, problems: Iterable[Problem]) -> None:
        self.subject = subject
        self.problems: tuple[Problem, ...] = tuple(problems)
        lines = "; ".join(p.under("") if p.path else p.message for p in self.problems)
        super().__init__(f"{subject}: {lines}")


def invalid(subject: str, path: str, message: str) -> InvalidConfig:
    """The error for one problem of `subject` at `path`."""
    return InvalidConfig(subject, [Problem(path, message)])


def validate(model: type[M], data: Mapping[str, Any], *, subject: str) -> M:
    """`data` validated by `model`; `InvalidConfig` naming `subject` and every problem."""
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise InvalidConfig(subject, problems_of(exc, model=model)) from exc


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


def model_keys(model: type[BaseModel] | None, loc: Loc) -> list[str]:
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


def problems_of(exc: ValidationError, *, model: type[BaseModel] | None = None) -> list[Problem]:
    """One `Problem` per error pydantic found (see the module docstring)."""
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden" and loc:
            known = model_keys(model, loc[:-1])
            message = unknown_key_message(loc[-1], known)
            out.append(Problem(_loc(loc[:-1]), message, at=_loc(loc)))
            continue
        if err["type"] == "missing":
            out.append(Problem(_loc(loc), "expected a value, found none"))
            continue
        if msg.startswith("Input should be "):
            msg = "expected " + msg.removeprefix("Input should be ")
            msg = msg.removesuffix(", unable to interpret input")
        if "found" not in msg:
            msg = f"{msg}, found {short_repr(err.get('input'))}"
        out.append(Problem(_loc(loc), msg))
    return out


def validation_messages(
    exc: ValidationError, *, prefix: str = "", model: type[BaseModel] | None = None
) -> list[str]:
    """One message per problem, ``path.in.document: expected ..., found VALUE``.

    An unknown key is reported at the mapping that holds it, with the keys `model` accepts
    there and the closest one: ``policyConfig: unknown key pinCPUs; expected one of ...;
    did you mean pinCPU?``.  `prefix` is put before every path (``policyConfig``).
    """
    return [p.under(prefix) for p in problems_of(exc, model=model)]


def format_validation_error(
    exc: ValidationError, *, prefix: str = "", model: type[BaseModel] | None = None
) -> str:
    """All problems on one line, separated by ``; `` (see `validation_messages`)."""
    return "; ".join(validation_messages(exc, prefix=prefix, model=model))
