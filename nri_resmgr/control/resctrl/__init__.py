"""Plugin-managed RDT: resctrl class groups, per-pod groups, monitoring (Linux resctrl).

The package re-exports its public names, so `from nri_resmgr.control.resctrl import X`
works for every X below; the modules follow the steps of this docstring:

- `info`: discovery (step 1), the hardware as frozen values; reads only;
- `config`: the configuration models (`RdtConfig`), syntax checked; pure;
- `plan`: planning (step 2), configuration or annotation to schemata text; pure;
- `annotation`: koordinator's pod annotation parsed into a `PodResctrl`; pure;
- `monitor`: monitoring values, the groups /metrics reads, reading counters; no writes;
- `groups`: the kinds and shapes of the groups this daemon makes, their checked paths;
- `controller`: `RdtController` (steps 3 and 4 and the ownership record), the only
  module that writes.

An import-linter contract (pyproject.toml) keeps `config`, `plan` and `annotation` from
importing the controller or any IO machinery.

Imports: the package imports `config` (the configuration models, which every daemon
validates) and nothing else until a name of the other modules is asked for: its
module-level `__getattr__` imports that name's module then (PEP 562).  A daemon whose
configuration enables no RDT never loads the controller, monitoring, discovery, planning
or annotation modules (six modules, before registration too: `control.config` imports
`config` through this package).  `from nri_resmgr.control.resctrl import X` works as
before for every X of `__all__`.

Theory of operation
-------------------
The kernel's resctrl file system (`Documentation/arch/x86/resctrl.rst`) exposes each
allocation class (CLOSID) as a directory with a `schemata` file, for example::

    L3:0=ff0;1=ff0
    MB:0=50;1=50

and describes the hardware under `info/`.  This package works in three steps, and only the
last one touches files:

1. **Discover** (`read_info(root)`): cache resources `info/{L3,L3CODE,L3DATA,L2,L2CODE,L2DATA}`
   (`cbm_mask`, `min_cbm_bits`, `num_closids`, `shareable_bits`, `sparse_masks` when the
   kernel has it), memory bandwidth `info/MB` (`bandwidth_gran`, `min_bandwidth`,
   `num_closids`, `delay_linear`), monitoring `info/L3_MON`, and the cache ids per resource
   from the root group's `schemata`.  Whether MBA takes MBps (`mba_MBps` mount option) is
   read from the mount table (`/proc/mounts` entry whose mount point is `root`), so a
   synthetic tree needs only a mounts file of its own or the `mba_mbps` argument.
   The MB unit is one of: percent (Intel), MBps (software controller, `mba_MBps`), or
   1/8 GB/s (AMD: recognised by a root MB value above 100, its maximum, typically 2048).
   Masks must be contiguous unless `sparse_masks` says 1, or, on kernels without that
   file, `min_cbm_bits` is 0 (AMD, which also accepts empty masks).

2. **Plan** (pure): `plan_classes(info, config)` turns the configuration into the exact
   `schemata` text of every class group, and `plan_pod_group(info, spec)` does the same for
   a pod's koordinator-style annotation.  Every group's text lists every resource the
   machine has (L3 or L3CODE+L3DATA, then L2 or L2CODE+L2DATA, then MB), each cache id in
   ascending order; what the configuration does not restrict gets the full mask or the
   maximum bandwidth, so rewriting a group always yields the same state.

   *Cache allocations* are percentage ranges (`"20-80%"`; `"50%"` means `"0-50%"`) or
   bitmasks (`"0xff0"`), for all cache ids (`all`) with per-id overrides (`"1": "0-25%"`),
   and with CDP as `{unified, code, data}`.  A percentage range over N available bits
   selects bits floor(N*lo/100) .. ceil(N*hi/100)-1 (at least one bit).  Partition
   percentages are of the whole `cbm_mask`, class percentages are of the partition's bits.
   Partitions must not overlap; a class bitmask must lie inside its partition.
   *Memory bandwidth* is `"50%"`, `"2000MBps"`, or a list of alternatives (`["50%",
   "2000MBps"]`) from which the machine's unit picks.  Percentages are rounded **up** to
   the next multiple of `bandwidth_gran`, as the kernel itself does; values below
   `min_bandwidth` or above 100% are refused.  On AMD a percentage is of the maximum
   and MBps are converted to 1/8 GB/s units (125 MBps each), rounded up.  An MBps-only
   value on a machine without `mba_MBps` is refused, as is a percentage-only value with
   `mba_MBps`.  A class's bandwidth is absolute (the kernel's meaning) and must not exceed
   its partition's.

   Refused with `ConfigError` (or `AnnotationError` for annotations), the message naming
   the config path, what the hardware allows and what was asked: more groups than
   `num_closids - 1` (CLOSID 0 is the root group), masks outside `cbm_mask`, masks with fewer
   than `min_cbm_bits` bits, non-contiguous masks where the CPU needs contiguity, unknown
   cache ids, a resource the machine lacks (unless `options.<res>.optional`).

3. **Apply** (`RdtController`): `apply_classes()` makes the class directories and writes
   their `schemata` in a single `write(2)` each; on failure it reports the kernel's
   `info/last_cmd_status`.  `ensure_pod_group(pod)` (RunPodSandbox) creates
   `nri-resmgr-pod-<uid>` for a pod annotated `node.koordinator.sh/resctrl`; its
   containers get that name as their RDT class (see `classes.select_classes`).
   `remove_pod_group(pod)` (RemovePodSandbox) removes it.  The annotation's keys match in
   any letter case, as koordinator's Go decoder matches them (`LLC`, `llc`; `cacheid`,
   `cacheID`); two keys for one field are refused.

4. **Monitor** (with `monitorPods`): `monitor_container` (CreateContainer) decides where a
   container's tasks are counted, at the earliest point the runtime allows: a pod's own
   group counts it from the start; with NRI's `LinuxRdt` (v0.11+) and an RDT class the
   runtime makes `<class>/mon_groups/<container id>` (`MonPlan.clos_id`: the adjustment
   asks for ``enableMonitoring``); otherwise `ensure_mon_group` makes
   `[<class>/]mon_groups/nri-resmgr-pod-<uid>` and `task_started` (PostStartContainer)
   writes the task's PID into its `tasks`, also where a runtime that was asked made no
   group.  `monitoring_samples` reads `mon_data/mon_L3_NN/{llc_occupancy,
   mbm_total_bytes,mbm_local_bytes}` of every group that counts pods, for /metrics.

Ownership: this daemon deletes only what it created.  Before each `mkdir` it records the
group in a JSON file (`<state_dir>/resctrl-groups.json`, replaced atomically), so a crash
between the two leaves a record of a group that may not exist (harmless) rather than a
group nobody knows.  Pod groups also carry the `nri-resmgr-pod-` prefix.
`reconcile(live_pod_uids)` at start removes recorded pod and monitoring groups of pods that
no longer exist, and never touches a directory that is not in the record, even one with our
prefix.  A class directory that already existed is configured (the configuration names it)
but not recorded, so it is never removed.

The record is input like any other: a record that cannot be read or parsed (or is too
large or too deeply nested) counts as empty, and an entry that does not have the shape of
a group this daemon makes (the root itself, a traversal, an absolute path, another tool's
name) is skipped; each with one log line.  A symlink on the way to a group is refused
where the group would be read or removed, and that group alone stays.  A record that
cannot be written (read-only, full) is kept in memory meanwhile, with one log line: the
daemon runs on, and a restart then merely forgets those groups.
"""

from types import ModuleType
from typing import TYPE_CHECKING, Any

from nri_resmgr.control.resctrl.config import (
    MAX_CBM_BITS,
    Allocation,
    CacheEntry,
    ClassDef,
    Partition,
    RdtConfig,
    RdtOptions,
    ResourceOption,
)

if TYPE_CHECKING:
    from nri_resmgr.control.resctrl.annotation import PodResctrl, parse_pod_resctrl
    from nri_resmgr.control.resctrl.controller import RdtController
    from nri_resmgr.control.resctrl.groups import (
        RECORD_MAX_BYTES,
        RECORD_NAME,
        GroupKind,
        ReconcileReport,
    )
    from nri_resmgr.control.resctrl.info import (
        DEFAULT_ROOT,
        CacheInfo,
        CacheLevel,
        MBInfo,
        MBUnit,
        MonInfo,
        ResctrlInfo,
        mount_has_mba_mbps,
        parse_schemata,
        read_info,
    )
    from nri_resmgr.control.resctrl.monitor import (
        MON_FEATURES,
        ROOT_CLASS_LABEL,
        MonCounters,
        MonPlan,
        MonSample,
    )
    from nri_resmgr.control.resctrl.plan import (
        AMD_MBPS_PER_UNIT,
        Schemata,
        plan_classes,
        plan_pod_group,
    )

#: the module of each name re-exported on first use (`__getattr__`)
_HOMES = {
    "PodResctrl": "annotation",
    "parse_pod_resctrl": "annotation",
    "RdtController": "controller",
    "RECORD_MAX_BYTES": "groups",
    "RECORD_NAME": "groups",
    "GroupKind": "groups",
    "ReconcileReport": "groups",
    "DEFAULT_ROOT": "info",
    "CacheInfo": "info",
    "CacheLevel": "info",
    "MBInfo": "info",
    "MBUnit": "info",
    "MonInfo": "info",
    "ResctrlInfo": "info",
    "mount_has_mba_mbps": "info",
    "parse_schemata": "info",
    "read_info": "info",
    "MON_FEATURES": "monitor",
    "ROOT_CLASS_LABEL": "monitor",
    "MonCounters": "monitor",
    "MonPlan": "monitor",
    "MonSample": "monitor",
    "AMD_MBPS_PER_UNIT": "plan",
    "Schemata": "plan",
    "plan_classes": "plan",
    "plan_pod_group": "plan",
}


def __getattr__(name: str) -> Any:
    """A re-exported name of the modules past `config`, imported on first use (module
    docstring, "Imports")."""
    home = _HOMES.get(name)
    if home == "annotation":
        from nri_resmgr.control.resctrl import annotation

        return _keep(name, annotation)
    if home == "controller":
        from nri_resmgr.control.resctrl import controller

        return _keep(name, controller)
    if home == "groups":
        from nri_resmgr.control.resctrl import groups

        return _keep(name, groups)
    if home == "info":
        from nri_resmgr.control.resctrl import info

        return _keep(name, info)
    if home == "monitor":
        from nri_resmgr.control.resctrl import monitor

        return _keep(name, monitor)
    if home == "plan":
        from nri_resmgr.control.resctrl import plan

        return _keep(name, plan)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _keep(name: str, module: ModuleType) -> Any:
    """`name` of `module`, kept in this package's namespace (asked for once)."""
    value = getattr(module, name)
    globals()[name] = value
    return value


__all__ = [
    "AMD_MBPS_PER_UNIT",
    "DEFAULT_ROOT",
    "MAX_CBM_BITS",
    "MON_FEATURES",
    "RECORD_MAX_BYTES",
    "RECORD_NAME",
    "ROOT_CLASS_LABEL",
    "Allocation",
    "CacheEntry",
    "CacheInfo",
    "CacheLevel",
    "ClassDef",
    "GroupKind",
    "MBInfo",
    "MBUnit",
    "MonCounters",
    "MonInfo",
    "MonPlan",
    "MonSample",
    "Partition",
    "PodResctrl",
    "RdtConfig",
    "RdtController",
    "RdtOptions",
    "ReconcileReport",
    "ResctrlInfo",
    "ResourceOption",
    "Schemata",
    "mount_has_mba_mbps",
    "parse_pod_resctrl",
    "parse_schemata",
    "plan_classes",
    "plan_pod_group",
    "read_info",
]
