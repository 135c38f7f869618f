"""Readable builders for the two messages a plugin most often returns.

Theory of operation
-------------------
`Adjustment` builds an `api.ContainerAdjustment` (what CreateContainer may change in a
container about to be created) and `Update` builds an `api.ContainerUpdate` (new resources
for an existing container, returned from an event or sent with `Plugin.update_containers`).
Each setter returns the builder, so calls chain; `build()` returns a fresh protobuf copy, so
a builder may be built more than once.

Two protocol rules shape the code:

* **Presence is the signal.** Most numeric resources are optional wrappers
  (`OptionalInt64`, `OptionalUInt64`, `OptionalString`, ...). The runtime applies a field
  when the wrapper is present, whatever its value, so `set_cpu_quota(0)` must still emit
  the wrapper. Every setter marks the wrapper present explicitly (`SetInParent`) rather
  than trusting assignment side effects.
* **One claim per unit.** The runtime rejects a reply that sets the same env key,
  annotation key or mount destination twice, even from one plugin. The builders therefore
  keep one entry per key: a later `add_env("A", ...)` replaces the earlier one, and
  `remove_env("A")` replaces an `add_env("A", ...)` (and vice versa).

CPU and memory-node sets are accepted as `str` or anything whose `str()` is the kernel list
form (``"0-3,8"``), such as a project CPU-set type; they are checked for that form.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Self

from nri_api import api

__all__ = ["Adjustment", "Update"]

_LIST_FORM = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_UINT64_MAX = (1 << 64) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_REMOVAL_PREFIX = "-"


def _list_form(what: str, value: object) -> str:
    text = str(value).replace(" ", "")
    if not _LIST_FORM.match(text):
        raise ValueError(f"{what}: expected a kernel list such as '0-3,8', found {str(value)!r}")
    return text


def _int64(what: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what}: expected an int, found {type(value).__name__} {value!r}")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{what}: expected a value within int64, found {value}")
    return value


def _uint64(what: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what}: expected an int, found {type(value).__name__} {value!r}")
    if not 0 <= value <= _UINT64_MAX:
        raise ValueError(f"{what}: expected a value within 0..2**64-1, found {value}")
    return value


def _key(what: str, key: str) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError(f"{what}: expected a non-empty string key, found {key!r}")
    if key.startswith(_REMOVAL_PREFIX):
        raise ValueError(
            f"{what}: key {key!r} starts with '-', the removal marker; use the remove_* method"
        )
    return key


class _Resources:
    """Setters shared by `Adjustment` and `Update`: they all write one `LinuxResources`."""

    def _resources(self) -> api.LinuxResources:
        raise NotImplementedError

    def set_cpuset(self, cpus: object, mems: object | None = None) -> Self:
        """Pin to the CPUs `cpus` (and, if given, the memory nodes `mems`)."""
        self._resources().cpu.cpus = _list_form("cpuset cpus", cpus)
        if mems is not None:
            self.set_cpuset_mems(mems)
        return self

    def set_cpuset_mems(self, mems: object) -> Self:
        """Restrict memory allocation to the NUMA nodes `mems`."""
        self._resources().cpu.mems = _list_form("cpuset mems", mems)
        return self

    def set_cpu_shares(self, shares: int) -> Self:
        """Set the CFS shares (cgroup v1 `cpu.shares` units)."""
        wrapper = self._resources().cpu.shares
        wrapper.value = _uint64("cpu shares", shares)
        wrapper.SetInParent()
        return self

    def set_cpu_quota(self, quota: int) -> Self:
        """Set the CFS quota in microseconds per period (-1: unlimited)."""
        wrapper = self._resources().cpu.quota
        wrapper.value = _int64("cpu quota", quota)
        wrapper.SetInParent()
        return self

    def set_cpu_period(self, period: int) -> Self:
        """Set the CFS period in microseconds."""
        wrapper = self._resources().cpu.period
        wrapper.value = _uint64("cpu period", period)
        wrapper.SetInParent()
        return self

    def set_memory_limit(self, limit: int) -> Self:
        """Set the memory limit in bytes (-1: unlimited)."""
        wrapper = self._resources().memory.limit
        wrapper.value = _int64("memory limit", limit)
        wrapper.SetInParent()
        return self

    def set_memory_reservation(self, reservation: int) -> Self:
        """Set the memory soft limit in bytes."""
        wrapper = self._resources().memory.reservation
        wrapper.value = _int64("memory reservation", reservation)
        wrapper.SetInParent()
        return self

    def set_memory_swap(self, swap: int) -> Self:
        """Set the memory+swap limit in bytes."""
        wrapper = self._resources().memory.swap
        wrapper.value = _int64("memory swap", swap)
        wrapper.SetInParent()
        return self

    def set_pids_limit(self, limit: int) -> Self:
        """Set the maximum number of tasks (a plain field: 0 means "not set")."""
        pids = self._resources().pids
        pids.limit = _int64("pids limit", limit)
        pids.SetInParent()
        return self

    def add_hugepage_limit(self, page_size: str, limit: int) -> Self:
        """Limit hugepages of `page_size` (e.g. ``"2MB"``) to `limit` bytes."""
        resources = self._resources()
        _key("hugepage page size", page_size)
        for entry in resources.hugepage_limits:
            if entry.page_size == page_size:
                entry.limit = _uint64("hugepage limit", limit)
                return self
        resources.hugepage_limits.add(page_size=page_size, limit=_uint64("hugepage limit", limit))
        return self

    def set_unified(self, key: str, value: str) -> Self:
        """Set a cgroup v2 unified key, e.g. ``("memory.high", "1073741824")``."""
        self._resources().unified[_key("unified key", key)] = value
        return self

    def set_rdt_class(self, rdt_class: str) -> Self:
        """Assign the container to the RDT (resctrl) class `rdt_class`."""
        wrapper = self._resources().rdt_class
        wrapper.value = rdt_class
        wrapper.SetInParent()
        return self

    def set_blockio_class(self, blockio_class: str) -> Self:
        """Assign the container to the block I/O class `blockio_class`."""
        wrapper = self._resources().blockio_class
        wrapper.value = blockio_class
        wrapper.SetInParent()
        return self


class Adjustment(_Resources):
    """Builder of `api.ContainerAdjustment`, the reply to CreateContainer.

    ``Adjustment().set_cpuset("0-3", "0").add_env("POOL", "dedicated").build()``
    """

    def __init__(self) -> None:
        self._msg = api.ContainerAdjustment()

    def _resources(self) -> api.LinuxResources:
        return self._msg.linux.resources

    def _set_env(self, key: str, value: str) -> None:
        name = key.removeprefix(_REMOVAL_PREFIX)
        for entry in self._msg.env:
            if entry.key.removeprefix(_REMOVAL_PREFIX) == name:
                entry.key = key
                entry.value = value
                return
        self._msg.env.add(key=key, value=value)

    def add_env(self, key: str, value: str) -> Self:
        """Set the environment variable `key` to `value` (replacing an earlier setting)."""
        self._set_env(_key("env key", key), value)
        return self

    def remove_env(self, key: str) -> Self:
        """Remove the environment variable `key` from the container."""
        self._set_env(_REMOVAL_PREFIX + _key("env key", key), "")
        return self

    def _set_annotation(self, key: str, value: str) -> None:
        name = key.removeprefix(_REMOVAL_PREFIX)
        self._msg.annotations.pop(name, None)
        self._msg.annotations.pop(_REMOVAL_PREFIX + name, None)
        self._msg.annotations[key] = value

    def add_annotation(self, key: str, value: str) -> Self:
        """Set the annotation `key` to `value`."""
        self._set_annotation(_key("annotation key", key), value)
        return self

    def remove_annotation(self, key: str) -> Self:
        """Remove the annotation `key`."""
        self._set_annotation(_REMOVAL_PREFIX + _key("annotation key", key), "")
        return self

    def _set_mount(self, mount: api.Mount) -> None:
        name = mount.destination.removeprefix(_REMOVAL_PREFIX)
        for index, entry in enumerate(self._msg.mounts):
            if entry.destination.removeprefix(_REMOVAL_PREFIX) == name:
                del self._msg.mounts[index]
                break
        self._msg.mounts.append(mount)

    def add_mount(
        self,
        destination: str,
        source: str,
        *,
        type: str = "bind",
        options: Iterable[str] = ("bind", "ro"),
    ) -> Self:
        """Mount `source` at `destination` (by default a read-only bind mount)."""
        self._set_mount(
            api.Mount(
                destination=_key("mount destination", destination),
                source=source,
                type=type,
                options=list(options),
            )
        )
        return self

    def remove_mount(self, destination: str) -> Self:
        """Remove the mount at `destination`."""
        self._set_mount(
            api.Mount(destination=_REMOVAL_PREFIX + _key("mount destination", destination))
        )
        return self

    def add_rlimit(self, type: str, *, hard: int, soft: int) -> Self:
        """Set the POSIX rlimit `type` (e.g. ``"RLIMIT_NOFILE"``)."""
        for entry in self._msg.rlimits:
            if entry.type == type:
                entry.hard = _uint64("rlimit hard", hard)
                entry.soft = _uint64("rlimit soft", soft)
                return self
        self._msg.rlimits.add(
            type=_key("rlimit type", type),
            hard=_uint64("rlimit hard", hard),
            soft=_uint64("rlimit soft", soft),
        )
        return self

    def add_cdi_device(self, name: str) -> Self:
        """Inject the CDI device `name` (e.g. ``"vendor.com/gpu=0"``)."""
        if all(device.name != name for device in self._msg.CDI_devices):
            self._msg.CDI_devices.add(name=_key("CDI device", name))
        return self

    def set_args(self, args: Iterable[str]) -> Self:
        """Replace the container's command line."""
        del self._msg.args[:]
        self._msg.args.extend(args)
        return self

    def set_oom_score_adj(self, value: int) -> Self:
        """Set the OOM score adjustment (-1000..1000)."""
        if isinstance(value, bool) or not isinstance(value, int) or not -1000 <= value <= 1000:
            raise ValueError(f"oom_score_adj: expected an int in -1000..1000, found {value!r}")
        wrapper = self._msg.linux.oom_score_adj
        wrapper.value = value
        wrapper.SetInParent()
        return self

    def set_cgroups_path(self, path: str) -> Self:
        """Place the container in the cgroup `path`."""
        self._msg.linux.cgroups_path = path
        return self

    def build(self) -> api.ContainerAdjustment:
        """Return the adjustment (a copy: the builder stays usable)."""
        out = api.ContainerAdjustment()
        out.CopyFrom(self._msg)
        return out


class Update(_Resources):
    """Builder of `api.ContainerUpdate`: new resources for an existing container.

    ``Update(ctr.id).set_cpuset("4-7").ignore_failure().build()``
    """

    def __init__(self, container_id: str) -> None:
        if not isinstance(container_id, str) or not container_id:
            raise ValueError(f"container id: expected a non-empty string, found {container_id!r}")
        self._msg = api.ContainerUpdate(container_id=container_id)

    def _resources(self) -> api.LinuxResources:
        return self._msg.linux.resources

    def ignore_failure(self, ignore: bool = True) -> Self:
        """Let the runtime skip this update, rather than fail, if it cannot be applied."""
        self._msg.ignore_failure = ignore
        return self

    def build(self) -> api.ContainerUpdate:
        """Return the update (a copy: the builder stays usable)."""
        out = api.ContainerUpdate()
        out.CopyFrom(self._msg)
        if not out.HasField("linux"):
            out.linux.resources.SetInParent()
        return out
