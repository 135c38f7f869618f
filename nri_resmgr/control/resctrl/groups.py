"""The groups this daemon makes: their kinds, shapes and paths, and the ownership record.

A group is named by its path relative to the resctrl root: `<class>`,
`nri-resmgr-pod-<uid>`, or `[<class>/]mon_groups/nri-resmgr-pod-<uid>` (or
`.../mon_groups/<uid>` with ``monitorGroupNames: pod-uid``).  `entry_problem`
checks a record entry against those shapes (no file access), `group_path` turns a
relative path into a directory strictly inside the root, refusing symlinks on the way
(one lstat(2) per component).  Nothing here writes; `controller` keeps the record.
"""

from __future__ import annotations

import enum
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from nri_resmgr.control.classes import POD_GROUP_PREFIX
from nri_resmgr.control.names import validate_name
from nri_resmgr.model import ResmgrError

RECORD_NAME = "resctrl-groups.json"
#: A larger record is not one this daemon wrote (a thousand groups take about 80 KB).
RECORD_MAX_BYTES = 1 << 20


class GroupKind(enum.StrEnum):
    CLASS = "class"
    POD = "pod"
    MON = "mon"


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    removed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    #: directories under root that look like ours (prefix) but are not in the record
    foreign: tuple[str, ...] = ()


_GROUP_SHAPES = {
    GroupKind.CLASS: "<class>",
    GroupKind.POD: f"{POD_GROUP_PREFIX}<pod uid>",
    GroupKind.MON: f"[<class>/]mon_groups/{POD_GROUP_PREFIX}<pod uid> or <pod uid>",
}


def canonical_pod_uid(uid: str) -> str | None:
    """`uid` in the canonical form (36 characters, lower case) when it is a UUID, as
    resctrl-mon's ``uuid.Parse`` reads it (hyphenated, braced, ``urn:uuid:`` or 32 hex
    digits); None when it is not one."""
    if not uid.isascii() or len(uid) > 45:
        return None
    try:
        return str(uuid.UUID(uid))
    except ValueError:
        return None


def group_path(root: Path, rel: str) -> Path:
    """The directory of group `rel` under `root` (resolved): strictly inside it, never
    `root` itself, and reached without a symlink on the way (ResmgrError otherwise).

    Checked with one lstat(2) per component below `root`, cheap enough for every read
    of a scrape (a full `resolve` walks every component from /)."""
    parts = rel.split("/")
    if "\x00" in rel or any(part in ("", ".", "..") for part in parts):
        raise ResmgrError(
            f"resctrl group {rel!r}: expected a relative path of names under "
            f"{root}; found an empty, '.', '..' or NUL component"
        )
    path = str(root)
    for part in parts:
        path = os.path.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            break  # nothing below a missing component can lead elsewhere
        if stat.S_ISLNK(mode):
            raise ResmgrError(
                f"resctrl group {rel!r}: expected a directory strictly inside "
                f"{root}; found {path} is a symlink"
            )
    return root.joinpath(*parts)


def entry_problem(rel: object, meta: object) -> str | None:
    """Why a record entry names no group this daemon makes (None: it does).

    Shape and names only (no file system access: `owned` runs on every change); a
    symlink on the way is caught where a group is read or removed (`group_path`)."""
    if not isinstance(meta, dict) or not isinstance(meta.get("pod_uid", ""), str):
        return f"expected {{kind, pod_uid}}; found {meta!r}"[:200]
    try:
        kind = GroupKind(str(meta.get("kind")))
    except ValueError:
        return f"expected kind class, pod or mon; found {meta.get('kind')!r}"[:200]
    meta.setdefault("pod_uid", "")
    if not isinstance(rel, str):
        return f"expected a group path; found {rel!r}"[:200]
    parts = rel.split("/")
    own = POD_GROUP_PREFIX + meta["pod_uid"]
    if kind is GroupKind.CLASS:
        shaped = len(parts) == 1
    elif kind is GroupKind.POD:
        shaped = parts == [own]
    else:
        named = (own, canonical_pod_uid(meta["pod_uid"]))  # monitorGroupNames
        shaped = parts[-2:-1] == ["mon_groups"] and parts[-1] in named and len(parts) in (2, 3)
    names = [p for p in parts if p != "mon_groups"] if kind is GroupKind.MON else parts
    try:
        for name in names:
            validate_name(name, subject=f"{kind} group {rel!r}", error=ValueError)
        if not shaped or (kind is not GroupKind.CLASS and not meta["pod_uid"]):
            return f"expected {_GROUP_SHAPES[kind]} for a {kind} group of pod {meta['pod_uid']!r}"
    except ValueError as exc:
        return str(exc)[:300]
    return None
