"""What `nri-resmgr reset` reads and gives back on the host, outside NRI.

Theory of operation: `read_allowed_sets` reads the sets a container is given back (the
online CPUs and the memory nodes under a sysfs root; node 0 on a kernel without NUMA).
`remove_owned_rdt_groups` removes exactly the resctrl groups the daemon's ownership
record lists (pod and monitoring groups, then class groups), and
`restore_cpu_class_files` writes back the CPU class files whose originals the daemon
recorded; without a record neither reads anything.  Each failure is a `ResetError`
naming the path, what was expected and what was found.  The resctrl and CPU class
controllers are imported when a record exists, so that ``nri-resmgr reset --help`` does
not load them (the command line imports every command's module).
"""

from __future__ import annotations

from pathlib import Path

from nri_resmgr.model import ResmgrError
from nri_resmgr.ops.reset import ResetError
from nri_resmgr.topology.cpuset import CPUSet, IDSetError, NodeSet


def _read_list(path: Path, what: str) -> CPUSet:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ResetError(f"{path}: expected the list of {what}; found {exc}") from exc
    try:
        return CPUSet.parse(text)
    except IDSetError as exc:
        raise ResetError(
            f"{path}: expected the list of {what}; found {text.strip()!r} ({exc})"
        ) from exc


def read_allowed_sets(sysfs_root: Path) -> tuple[CPUSet, NodeSet]:
    """The host's online CPUs and memory nodes, from sysfs under `sysfs_root`."""
    system = sysfs_root / "sys" / "devices" / "system"
    cpus = _read_list(system / "cpu" / "online", "online CPUs")
    node = system / "node"
    for name in ("has_memory", "online"):
        if (node / name).exists():
            mems = _read_list(node / name, "memory nodes")
            break
    else:
        # a kernel built without NUMA has no node directory: everything is node 0
        mems = NodeSet([0]) if not node.exists() else NodeSet()
    if not cpus:
        raise ResetError(
            f"{system / 'cpu' / 'online'}: expected at least one online CPU; found none"
        )
    if not mems:
        raise ResetError(
            f"{node}: expected has_memory or online listing the memory nodes; found neither"
        )
    return cpus, mems


def remove_owned_rdt_groups(
    *, resctrl_root: Path, state_dir: Path, dry_run: bool = False
) -> list[str]:
    """Remove the resctrl groups the daemon's ownership record lists; their names.

    Nothing is read from resctrl when there is no record (no RDT was ever managed here).
    """
    from nri_resmgr.control.resctrl import RECORD_NAME, GroupKind, RdtConfig, RdtController

    if not (state_dir / RECORD_NAME).exists():
        return []
    try:
        ctl = RdtController(resctrl_root, RdtConfig(), state_dir=state_dir)
        owned = ctl.owned()
        if dry_run:
            return sorted(owned)
        # pod and monitoring groups of every pod (no pod is "live" for a reset) ...
        removed = list(ctl.reconcile(()).removed)
        # ... then the class groups: none is configured, so every owned one goes
        ctl.apply_classes()
        left = ctl.owned()
    except (ResmgrError, OSError) as exc:
        raise ResetError(
            f"resctrl groups under {resctrl_root} (record {state_dir / RECORD_NAME}): {exc}"
        ) from exc
    removed += [
        rel
        for rel, meta in owned.items()
        if meta.get("kind") == GroupKind.CLASS and rel not in left
    ]
    if left:
        # a group that would not go is logged by the controller and stays in the record
        raise ResetError(
            f"resctrl groups under {resctrl_root}: expected every recorded group removed; "
            f"found {', '.join(sorted(left))} still recorded (removed: "
            f"{', '.join(sorted(removed)) or 'none'})"
        )
    return removed


def restore_cpu_class_files(
    *, sysfs_root: Path, state_dir: Path, dry_run: bool = False
) -> list[str]:
    """Put back the CPU class files the daemon's record lists; the files (relative to
    ``sys/devices/system/cpu``).  Nothing is read without a record."""
    from nri_resmgr.control.cpuclass.files import RECORD_NAME, CPUClassFiles

    record = state_dir / RECORD_NAME
    if not record.exists():
        return []
    files = CPUClassFiles(sysfs_root, record=record)
    if dry_run:
        return sorted(files.originals)
    return sorted(w.path for w in files.restore())
