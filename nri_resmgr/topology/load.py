"""Load a topology from whatever the user points at.

Theory of operation: `load_topology(source)` looks at `source` and picks one way in:

* a `Topology` is returned as is; a mapping is a synthetic spec (`synthetic.TopologySpec`),
  or, with ``cpu_records``, a record of every CPU and node (`record`: what
  `nri-resmgr dump` writes);
* an existing directory is a sysfs root (it holds ``sys/``; a directory that *is* a
  ``sys`` tree is accepted too) and goes through `discover()`;
* an existing ``.tar``, ``.tar.xz``, ``.tar.gz``, ``.tgz``, ``.tar.bz2`` or ``.tbz2`` file
  is a snapshot: it is unpacked into a temporary directory and discovered there.
  Extraction is refused for members with absolute paths or ``..`` components, links that
  point outside the archive, device or FIFO members, and archives beyond
  `MAX_ARCHIVE_MEMBERS` members or `MAX_ARCHIVE_BYTES` bytes;
* an existing ``.yaml``, ``.yml`` or ``.json`` file holds a spec mapping;
* a bare name like ``two-socket`` names a shipped machine,
  ``nri_resmgr/topology/machines/<name>.yaml`` (package data; ``examples/topologies`` in
  the source tree points there); the topology's ``source`` is then that name;
* any other string is an inline spec, either a YAML flow mapping
  (``{packages: 2, nodes: 2}``) or ``key=value`` pairs (``packages=2,nodes=2,cores=4``;
  CPU lists may contain commas: ``isolated=2-3,8,cores=4`` works).

Spec files and inline specs are parsed through `nri_resmgr.documents` (a regular file of
bounded size, depth and numbers).  Errors are `LoadError` (a `TopologyError`) naming the
source, what was expected and what was found; spec errors are `synthetic.SpecError`.
"""

from __future__ import annotations

import posixpath
import re
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nri_resmgr.documents import DocumentError, load_document, parse_document
from nri_resmgr.topology.discover import discover
from nri_resmgr.topology.model import Topology, TopologyError
from nri_resmgr.topology.record import from_record, is_record
from nri_resmgr.topology.synthetic import build_topology, parse_spec

__all__ = [
    "ARCHIVE_SUFFIXES",
    "EXAMPLES_DIR",
    "LoadError",
    "UnsafeArchiveError",
    "extract_archive",
    "load_topology",
    "parse_inline_spec",
    "path_kind",
]

ARCHIVE_SUFFIXES = (".tar", ".tar.xz", ".txz", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2")
SPEC_SUFFIXES = (".yaml", ".yml", ".json")
MAX_ARCHIVE_MEMBERS = 500_000
MAX_ARCHIVE_BYTES = 2 << 30
#: the machines shipped with the package (installed as package data)
EXAMPLES_DIR = Path(__file__).resolve().parent / "machines"


class LoadError(TopologyError):
    """A topology source that cannot be read."""


class UnsafeArchiveError(LoadError):
    """An archive member that would land outside the extraction directory."""


# ---- archives ------------------------------------------------------------------------


def _inside(path: str) -> bool:
    """Whether a relative POSIX path stays inside its root after normalisation."""
    if path.startswith("/") or not path:
        return False
    norm = posixpath.normpath(path)
    return norm != ".." and not norm.startswith("../")


def _check_member(archive: Path, member: tarfile.TarInfo) -> None:
    name = member.name
    parts = name.split("/")

    def refuse(why: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(
            f"{archive}: member {name!r} {why}; expected relative paths and links that stay "
            f"inside the archive"
        )

    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise refuse("has an absolute path")
    if ".." in parts:
        raise refuse("has a '..' component")
    if member.issym():
        target = member.linkname
        if target.startswith("/"):
            raise refuse(f"is a symbolic link to the absolute path {target!r}")
        if not _inside(posixpath.join(posixpath.dirname(name), target)):
            raise refuse(f"is a symbolic link to {target!r}, outside the archive")
    elif member.islnk():
        if not _inside(member.linkname):
            raise refuse(f"is a hard link to {member.linkname!r}, outside the archive")
    elif not (member.isfile() or member.isdir()):
        raise refuse("is a device, FIFO or other special file")


#: the sysfs files discovery reads; other members of a snapshot are not unpacked
_WANTED = tuple(
    re.compile(p)
    for p in (
        r"sys/devices/system/cpu/(online|offline|possible|present|isolated|kernel_max)",
        r"sys/devices/system/cpu/cpu\d+/(online|node\d+|topology/[^/]+)",
        r"sys/devices/system/cpu/cpu\d+/cache/index\d+/(level|type|id|shared_cpu_list)",
        r"sys/devices/system/node/(online|possible|has_\w+)",
        r"sys/devices/system/node/node\d+/(cpulist|distance|meminfo|hugepages/.*|access\d+/.*)",
        r"sys/devices/cpu_(core|atom)/cpus",
        r"sys/devices/pci[^/]*/.*",
        r"sys/bus/(nd|cxl|dax)/.*",
        r"sys/class/net/.*",
    )
)


def _wanted(name: str) -> bool:
    name = name.removeprefix("./")
    candidates = [name]
    if "/" in name:
        candidates.append(name.split("/", 1)[1])  # one top-level directory around sys/
    return any(p.fullmatch(c) for p in _WANTED for c in candidates)


def extract_archive(archive: Path | str, dest: Path | str, *, everything: bool = False) -> Path:
    """Unpack a sysfs snapshot archive into `dest` safely; return the sysfs root in it.

    Every member is checked; only the files discovery reads are unpacked unless
    `everything` is set (snapshots hold ten thousands of files discovery never opens).
    """
    archive, dest = Path(archive), Path(dest)
    try:
        tar = tarfile.open(archive, mode="r:*")  # noqa: SIM115 - closed by the with below
    except (tarfile.TarError, OSError) as exc:
        raise LoadError(f"{archive}: expected a readable tar archive, found {exc}") from exc
    with tar:
        members = []
        count = total = 0
        for member in tar:
            _check_member(archive, member)
            count += 1
            total += member.size
            if member.isdir() or not (everything or _wanted(member.name)):
                continue
            members.append(member)
            if count > MAX_ARCHIVE_MEMBERS or total > MAX_ARCHIVE_BYTES:
                raise UnsafeArchiveError(
                    f"{archive}: expected at most {MAX_ARCHIVE_MEMBERS} members and "
                    f"{MAX_ARCHIVE_BYTES} bytes, found more"
                )
        try:
            tar.extractall(dest, members=members, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise LoadError(f"{archive}: extraction failed: {exc}") from exc
    return _sysfs_root(dest, origin=str(archive))


def _sysfs_root(directory: Path, *, origin: str) -> Path:
    """The directory holding ``sys/`` at `directory` or one level below it."""
    if (directory / "sys").is_dir():
        return directory
    if directory.name == "sys" and (directory / "devices" / "system").is_dir():
        return directory.parent
    subdirs = [d for d in directory.iterdir() if d.is_dir()]
    if len(subdirs) == 1 and (subdirs[0] / "sys").is_dir():
        return subdirs[0]
    raise LoadError(
        f"{origin}: expected a sysfs snapshot with a top-level 'sys/' directory, found "
        f"{sorted(p.name for p in directory.iterdir())[:8]}"
    )


def _load_archive(path: Path) -> Topology:
    with tempfile.TemporaryDirectory(prefix="nri-resmgr-topology-") as tmp:
        root = extract_archive(path, tmp)
        topo = discover(root)
    return Topology(
        cpus=topo.cpus,
        nodes=topo.nodes,
        netdevs=topo.netdevs,
        pci_devices=topo.pci_devices,
        source=str(path),
    )


# ---- specs ---------------------------------------------------------------------------


def parse_inline_spec(text: str) -> dict[str, Any]:
    """A spec mapping from ``{yaml: flow}`` or ``key=value,key=value`` text."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = parse_document(stripped, source="inline topology spec")
        except DocumentError as exc:
            raise LoadError(
                f"inline topology spec {text!r}: expected a YAML mapping: {'; '.join(exc.problems)}"
            ) from exc
        if not isinstance(data, dict):
            raise LoadError(f"inline topology spec {text!r}: expected a mapping, found {data!r}")
        return data
    out: dict[str, Any] = {}
    last: str | None = None
    for piece in stripped.replace(" ", ",").split(","):
        if not piece:
            continue
        key, sep, value = piece.partition("=")
        if sep:
            key = key.strip()
            if not key:
                raise LoadError(f"inline topology spec {text!r}: element {piece!r} has no key")
            out[key] = value.strip()
            last = key
        elif last is not None and isinstance(out[last], str):
            out[last] = f"{out[last]},{piece}"  # the rest of a CPU list like 2-3,8
        else:
            raise LoadError(
                f"inline topology spec {text!r}: expected key=value pairs, found {piece!r}"
            )
    if not out:
        raise LoadError(f"inline topology spec {text!r}: expected key=value pairs, found none")
    return out


def _load_spec_file(path: Path, *, name: str | None = None) -> Topology:
    """A spec file, read through `nri_resmgr.documents` (bounded); `name` is its source."""
    try:
        data = load_document(path)
    except DocumentError as exc:
        raise LoadError(
            f"{path}: expected a {path.suffix[1:].upper()} mapping: {'; '.join(exc.problems)}"
        ) from exc
    if not isinstance(data, dict):
        raise LoadError(f"{path}: expected a mapping of spec fields, found {type(data).__name__}")
    return build_topology(parse_spec(data, origin=str(path)), source=name or str(path))


# ---- entry point ---------------------------------------------------------------------


def path_kind(path: Path) -> str | None:
    """``"dir"``, ``"file"`` or None: what `path` is, None also when it cannot be a path
    (a name longer than the system allows, say: a long inline spec is not a path)."""
    try:
        if path.is_dir():
            return "dir"
        return "file" if path.is_file() else None
    except OSError:
        return None


def load_topology(source: str | Path | Mapping[str, Any] | Topology) -> Topology:
    """A topology from a sysfs root, snapshot archive, spec file, inline spec or mapping."""
    if isinstance(source, Topology):
        return source
    if isinstance(source, Mapping):
        if is_record(source):
            return from_record(source)
        return build_topology(parse_spec(source))
    text = str(source)
    if not text.strip():
        raise LoadError("topology source: expected a path or a spec, found an empty string")
    path = Path(text).expanduser()
    kind = path_kind(path)
    if kind == "dir":
        return discover(_sysfs_root(path, origin=text))
    if kind == "file":
        name = path.name.lower()
        if name.endswith(ARCHIVE_SUFFIXES):
            return _load_archive(path)
        if name.endswith(SPEC_SUFFIXES):
            return _load_spec_file(path)
        raise LoadError(
            f"{path}: expected a sysfs directory, an archive ({', '.join(ARCHIVE_SUFFIXES)}) "
            f"or a spec file ({', '.join(SPEC_SUFFIXES)}), found a file of another kind"
        )
    if isinstance(source, str) and ("=" in text or text.lstrip().startswith("{")):
        spec = parse_inline_spec(text)
        return build_topology(
            parse_spec(spec, origin=f"inline spec {text!r}"), source=f"spec:{text}"
        )
    example = EXAMPLES_DIR / f"{text}.yaml"
    if "/" not in text and path_kind(example) == "file":
        return _load_spec_file(example, name=text)
    raise LoadError(
        f"topology source {text!r}: expected a sysfs directory, an archive, a spec file, an "
        f"example name or an inline spec like 'packages=2,cores=4', found no such file"
    )
