"""Validation of RDT and block I/O class and group names, and root-confined paths.

Theory of operation: a class name travels from an annotation (written by whoever may create
pods) or from the configuration into a directory name under `/sys/fs/resctrl` or a cgroup
hierarchy.  Everything that becomes a path component passes `validate_name` first: a short
ASCII word from `[A-Za-z0-9_.-]`, no leading dot (so no `.`/`..`/hidden entries), and not
one of the files resctrl keeps in every group (`tasks`, `schemata`, ...) or in its root
(`info`, `mon_groups`, ...).  The check is by whitelist, so unicode lookalikes, separators,
NUL and newlines fail for the same reason: a character outside the set.

`safe_join` is the second line of defence: it joins validated parts under a root and
resolves the result (symlinks included) to prove it is still inside the root.  Writers in
this package build every path through it, so even a name that slipped past validation
cannot make them write outside the tree they were given.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from nri_resmgr.model import ResmgrError

#: Longest accepted class or group name (resctrl itself has no limit below NAME_MAX; the
#: bound keeps names readable and keeps `nri-resmgr-pod-<uid>` well within NAME_MAX).
MAX_NAME_LENGTH = 64

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")

#: Entries the kernel keeps in the resctrl root and in every resource group.
RESERVED_NAMES = frozenset(
    {
        "info",
        "mon_groups",
        "mon_data",
        "tasks",
        "cpus",
        "cpus_list",
        "schemata",
        "mode",
        "size",
        "mon_hw_id",
        "ctrl_hw_id",
    }
)


class InvalidNameError(ResmgrError):
    """A class or group name that cannot be used as a directory name."""


class PathEscapeError(ResmgrError):
    """A path that would resolve outside the root it must stay in."""


def validate_name(name: object, *, subject: str, error: type[Exception] = InvalidNameError) -> str:
    """Return `name` if it is a usable class/group name, else raise `error`.

    `subject` names where the value came from (an annotation key with the pod, or a
    configuration path) and opens the error message.  Callers pass `AnnotationError` or
    `ConfigError` as `error` so the pipeline sees the kind of mistake it is.
    """
    expected = (
        f"expected 1-{MAX_NAME_LENGTH} characters from [A-Za-z0-9_.-], not starting with a dot, "
        f"and not one of resctrl's own entries ({', '.join(sorted(RESERVED_NAMES))})"
    )
    if not isinstance(name, str):
        raise error(f"{subject}: {expected}; found a {type(name).__name__}")
    shown = ascii(name) if len(name) <= 80 else ascii(name[:80]) + f"... ({len(name)} characters)"
    if not name:
        raise error(f"{subject}: {expected}; found an empty name")
    if len(name) > MAX_NAME_LENGTH:
        raise error(f"{subject}: {expected}; found {len(name)} characters: {shown}")
    bad = sorted({c for c in name if not _NAME_RE.fullmatch(c)})
    if bad:
        chars = ", ".join(ascii(c) for c in bad)
        raise error(f"{subject}: {expected}; found {shown} with {chars}")
    if name.startswith("."):
        raise error(f"{subject}: {expected}; found {shown} starting with a dot")
    if name in RESERVED_NAMES:
        raise error(f"{subject}: {expected}; found the reserved entry {shown}")
    return name


def safe_join(root: str | os.PathLike[str], *parts: str) -> Path:
    """`root/part/...`, refused (PathEscapeError) unless it resolves inside `root`.

    Absolute parts, `..` and symlinks leading out of root are all caught by resolving both
    sides (the path need not exist yet).
    """
    base = Path(root).resolve()
    for part in parts:
        if "\x00" in part:
            raise PathEscapeError(f"path under {base}: expected no NUL byte; found {part!r}")
        if Path(part).is_absolute():
            raise PathEscapeError(
                f"path under {base}: expected a relative component; found absolute {part!r}"
            )
    joined = base.joinpath(*parts)
    resolved = joined.resolve()
    if resolved != base and base not in resolved.parents:
        raise PathEscapeError(
            f"path {joined}: expected to stay inside {base}; found it resolves to {resolved}"
        )
    return resolved
