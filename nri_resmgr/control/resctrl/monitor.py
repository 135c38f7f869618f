"""Monitoring: where a container's tasks are counted, and reading the counters.

The values (`MonPlan`, `MonCounters`, `MonSample`) and the parts that need no writing:
`pod_mon_name` names a pod's monitoring group (``nri-resmgr-pod-<uid>``, or with
``monitorGroupNames: pod-uid`` the canonical pod UID alone, the `mon_groups/<pod-uid>`
nri-plugins' resctrl-mon makes and Kepler reads),
`runtime_group` names the group an OCI runtime makes for ``enableMonitoring``,
`sample_groups` lists the groups whose counters /metrics shows, `read_counters` reads a
group's `mon_data` without following symlinks.  Making groups and writing PIDs into
`tasks` is the controller's (`RdtController.monitor_container`, `task_started`).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nri_resmgr.control.classes import POD_GROUP_PREFIX
from nri_resmgr.control.names import validate_name
from nri_resmgr.control.resctrl.groups import GroupKind, canonical_pod_uid

MON_FEATURES = ("llc_occupancy", "mbm_total_bytes", "mbm_local_bytes")
#: The root group's class label in metrics, as goresctrl (and so nri-plugins) names it.
ROOT_CLASS_LABEL = "system/default"


@dataclass(frozen=True, slots=True)
class MonCounters:
    """One cache id's monitoring counters; None when absent or "Unavailable"."""

    llc_occupancy: int | None = None
    mbm_total_bytes: int | None = None
    mbm_local_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class MonSample:
    """One group's counters on one L3 cache id, labelled as nri-plugins labels them: the
    control group (`rdt_class`; the root is ``system/default``) and the monitoring group
    inside it (`rdt_mon_group`; "" for the control group's own counters)."""

    rdt_class: str
    rdt_mon_group: str
    cache_id: int
    llc_occupancy: int | None = None
    mbm_total_bytes: int | None = None
    mbm_local_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class MonPlan:
    """Where a new container's tasks will be counted (`RdtController.monitor_container`).

    `group` is the group's path under the resctrl root.  With `clos_id` set the runtime
    does it: the container's adjustment carries NRI's `LinuxRdt` (v0.11+) with that
    ``closID`` and ``enableMonitoring``, and the OCI runtime makes ``<closID>/mon_groups/
    <container id>`` and starts the task in it.  Otherwise the daemon writes the task's
    PID into `group` at PostStartContainer (`RdtController.task_started`).
    """

    group: str
    clos_id: str | None = None


def _read_counter(path: str) -> int | None:
    """A counter file's value; None when absent, unreadable or not a number
    ("Unavailable"); never follows a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        text = os.read(fd, 64).strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(text) if text.isdigit() else None


def read_counters(group_dir: str | os.PathLike[str]) -> dict[int, MonCounters]:
    """Counters per L3 cache id of the group at `group_dir` (from `mon_data/mon_L3_NN`);
    empty when it has none; never follows a symlink below `group_dir`."""
    mon_data = os.path.join(group_dir, "mon_data")
    out: dict[int, MonCounters] = {}
    try:
        if not stat.S_ISDIR(os.lstat(mon_data).st_mode):
            return out
        domains = sorted(
            (e.name, e.path) for e in os.scandir(mon_data) if e.is_dir(follow_symlinks=False)
        )
    except OSError:
        return out
    for name, path in domains:
        m = re.fullmatch(r"mon_L3_(\d+)", name)
        if m:
            values = {f: _read_counter(os.path.join(path, f)) for f in MON_FEATURES}
            out[int(m.group(1))] = MonCounters(**values)
    return out


def pod_mon_name(uid: str, naming: str) -> str:
    """The name of the monitoring group of the pod with `uid` under ``monitorGroupNames``
    `naming`; ValueError naming the uid when ``pod-uid`` is asked and it is no UUID."""
    if naming != "pod-uid":
        return POD_GROUP_PREFIX + uid
    canonical = canonical_pod_uid(uid)
    if canonical is None:
        raise ValueError(
            f"pod uid {uid[:80]!r}: expected a UUID to name its monitoring group "
            "mon_groups/<pod-uid> (monitorGroupNames: pod-uid); found none"
        )
    return canonical


def runtime_group(container_id: str, rdt_class: str | None) -> str | None:
    """`<class>/mon_groups/<container id>`, the group an OCI runtime makes for
    ``enableMonitoring``; None without a class (the runtime would then make a control
    group per container) or for an id that is no usable name."""
    if rdt_class is None:
        return None
    try:
        cls = validate_name(rdt_class, subject="RDT class", error=ValueError)
        cid = validate_name(container_id, subject="container id", error=ValueError)
    except ValueError:
        return None
    return f"{cls}/mon_groups/{cid}"


def sample_groups(
    classes: Iterable[str],
    owned: Mapping[str, Mapping[str, str]],
    containers: Iterable[tuple[str, str | None]] = (),
) -> list[tuple[str, str, str]]:
    """The groups whose counters /metrics shows, as (class label, monitoring group, path
    under the root), each path once: the root and the configured `classes`, the pod and
    pod monitoring groups in `owned` (the ownership record), and the per-container groups
    runtimes made for `containers` ((id, RDT class) pairs)."""
    groups: list[tuple[str, str, str]] = [(ROOT_CLASS_LABEL, "", "")]
    groups += [(name, "", name) for name in classes]
    for rel, meta in sorted(owned.items()):
        parts = rel.split("/")
        if meta["kind"] == GroupKind.POD:
            groups.append((rel, "", rel))
        elif meta["kind"] == GroupKind.MON:
            cls = parts[0] if len(parts) == 3 else ROOT_CLASS_LABEL
            groups.append((cls, parts[-1], rel))
    for cid, rdt_class in containers:
        rel_or_none = runtime_group(cid, rdt_class)
        if rel_or_none is not None and rdt_class is not None:
            groups.append((rdt_class, cid, rel_or_none))
    out: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    for cls, mon, rel in groups:
        if rel not in seen:
            seen.add(rel)
            out.append((cls, mon, rel))
    return out
