"""The controller: the one module of the package that writes under the resctrl root.

`RdtController` makes and removes the groups (class groups from the configuration, pod
groups from the annotation, monitoring groups), writes their `schemata` and `tasks` in
one write(2) each, and keeps the ownership record (`<state_dir>/resctrl-groups.json`),
all as the package docstring (`nri_resmgr.control.resctrl`) describes.  What to write
comes from `plan` (pure), where the hardware is from `info`, which group counts a task
from `monitor`, and the record's shapes from `groups`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from nri_resmgr.control.classes import POD_GROUP_PREFIX, RESCTRL_POD_ANNOTATION, pod_group_name
from nri_resmgr.control.names import RESERVED_NAMES, safe_join, validate_name
from nri_resmgr.control.resctrl.annotation import parse_pod_resctrl
from nri_resmgr.control.resctrl.config import RdtConfig
from nri_resmgr.control.resctrl.groups import (
    RECORD_MAX_BYTES,
    RECORD_NAME,
    GroupKind,
    ReconcileReport,
    entry_problem,
    group_path,
)
from nri_resmgr.control.resctrl.info import DEFAULT_ROOT, ResctrlInfo, read_info
from nri_resmgr.control.resctrl.monitor import (
    MonCounters,
    MonPlan,
    MonSample,
    pod_mon_name,
    read_counters,
    runtime_group,
    sample_groups,
)
from nri_resmgr.control.resctrl.plan import plan_classes, plan_pod_group
from nri_resmgr.model import AnnotationError, Pod, ResmgrError
from nri_resmgr.ops.logs import EventLog, get_logger


def _write_once(path: Path, content: str, *, root: Path, append: bool = False) -> None:
    """Write `content` with a single write(2), as resctrl needs; report last_cmd_status.

    `append` for `tasks`: the kernel moves the task whatever the offset, and a synthetic
    tree then keeps every PID written, as the kernel's file would list them."""
    data = content.encode("ascii")
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o644)
        try:
            written = os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        status = root / "info" / "last_cmd_status"
        detail = ""
        with contextlib.suppress(OSError):
            detail = f" (info/last_cmd_status: {status.read_text().strip()})"
        raise ResmgrError(
            f"{path}: expected the kernel to accept {content!r}; found {exc}{detail}"
        ) from exc
    if written != len(data):
        raise ResmgrError(f"{path}: expected to write {len(data)} bytes; wrote {written}")


class RdtController:
    """resctrl groups under `root`: classes from config, pod groups, monitoring groups.

    Construct with an `info` (from `read_info`) or let it be read from `root`.  The
    ownership record lives in `state_dir` (see the package docstring).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] = DEFAULT_ROOT,
        config: RdtConfig | None = None,
        *,
        state_dir: str | os.PathLike[str],
        info: ResctrlInfo | None = None,
        log: EventLog | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.config = config if config is not None else RdtConfig()
        self.info = info if info is not None else read_info(self.root)
        self.record_path = Path(state_dir) / RECORD_NAME
        if log is None:
            log = get_logger("resctrl")
        self.log: EventLog = log
        #: the groups, while the record cannot be written (None: the record is current)
        self._unsaved: dict[str, dict[str, str]] | None = None
        #: problems with the record already logged (each is logged once, not per read)
        self._reported: set[str] = set()
        self._plans = plan_classes(self.info, self.config)

    # -- ownership record ---------------------------------------------------------------

    @property
    def persisted(self) -> bool:
        """False while the record cannot be written and the groups live in memory only."""
        return self._unsaved is None

    def _warn_once(self, event: str, **details: str) -> None:
        key = f"{event} {sorted(details.items())}"
        if key not in self._reported:
            self._reported.add(key)
            self.log.warning(event, record=str(self.record_path), **details)

    def owned(self) -> dict[str, dict[str, str]]:
        """Recorded groups: relative path -> {"kind": ..., "pod_uid": ...}.

        A record that cannot be read, is not JSON, is too large or too deeply nested counts
        as empty, and an entry that does not name a group this daemon makes (a traversal,
        an absolute path, the root itself, a name of the wrong shape) is skipped; each
        problem is logged once.  Nothing is deleted on the strength of such a record.
        """
        if self._unsaved is not None:
            return {rel: dict(meta) for rel, meta in self._unsaved.items()}
        try:
            with self.record_path.open("rb") as f:
                data = f.read(RECORD_MAX_BYTES + 1)
        except (FileNotFoundError, NotADirectoryError):
            return {}  # never written (the state directory may not be one: see `_save`)
        except OSError as exc:
            self._warn_once("resctrl ownership record unreadable, taken as empty", error=str(exc))
            return {}
        if len(data) > RECORD_MAX_BYTES:
            self._warn_once(
                "resctrl ownership record too large, taken as empty",
                error=f"expected at most {RECORD_MAX_BYTES} bytes",
            )
            return {}
        try:
            doc = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            self._warn_once(
                "resctrl ownership record corrupt, taken as empty",
                error=f"expected the JSON ownership record; found {reason}",
            )
            return {}
        if not isinstance(doc, dict) or not isinstance(doc.get("groups"), dict):
            self._warn_once(
                "resctrl ownership record corrupt, taken as empty",
                error="expected an object with root and groups",
            )
            return {}
        if doc.get("root") != str(self.root):
            return {}  # another resctrl mount's record
        groups: dict[str, dict[str, str]] = {}
        for rel, meta in doc["groups"].items():
            problem = entry_problem(rel, meta)
            if problem is not None:
                self._warn_once(
                    "resctrl ownership record entry skipped", entry=repr(rel)[:120], error=problem
                )
                continue
            groups[rel] = {"kind": meta["kind"], "pod_uid": meta["pod_uid"]}
        return groups

    def _save(self, groups: Mapping[str, Mapping[str, str]]) -> None:
        """Replace the record atomically; if that fails (read-only, full, not a directory),
        keep the groups in memory and say so once: the daemon runs on, and a restart only
        forgets the groups (they stay in place, never deleted unrecorded)."""
        tmp = self.record_path.with_suffix(".tmp")
        text = json.dumps(
            {"version": 1, "root": str(self.root), "groups": dict(sorted(groups.items()))}, indent=1
        )
        try:
            self.record_path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text)
            os.replace(tmp, self.record_path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()  # a partial file left by ENOSPC
            if self._unsaved is None:
                self.log.warning(
                    "resctrl ownership record not writable: groups kept in memory only",
                    record=str(self.record_path),
                    error=str(exc),
                    consequence="after a restart this daemon's groups are left in place, "
                    "not cleaned up",
                )
            self._unsaved = {rel: dict(meta) for rel, meta in groups.items()}
            return
        if self._unsaved is not None:
            self.log.info("resctrl ownership record writable again", record=str(self.record_path))
            self._unsaved = None

    def _record(self, rel: str, kind: GroupKind, pod_uid: str = "") -> None:
        groups = self.owned()
        groups[rel] = {"kind": str(kind), "pod_uid": pod_uid}
        self._save(groups)

    def _forget(self, rel: str) -> None:
        groups = self.owned()
        if groups.pop(rel, None) is not None:
            self._save(groups)

    # -- directories --------------------------------------------------------------------

    def _make(self, rel: str, kind: GroupKind, pod_uid: str = "", *, limit: bool = False) -> bool:
        """mkdir root/rel, recording it first; False when it already existed.

        With `limit`, refuse a new control group when every CLOSID is taken (the kernel
        would say ENOSPC; checking first gives the same answer on synthetic trees).
        """
        path = safe_join(self.root, *rel.split("/"))
        if path.is_dir():
            return False
        if limit:
            groups = list(self.live_groups())
            if len(groups) + 1 >= self.info.num_closids:
                raise ResmgrError(
                    f"resctrl group {rel}: expected a free CLOSID (num_closids="
                    f"{self.info.num_closids}, CLOSID 0 is the root group); found all taken "
                    f"by {', '.join(groups)}"
                )
        self._record(rel, kind, pod_uid)
        if kind is GroupKind.MON:
            path.parent.mkdir(exist_ok=True)  # present on a real resctrl, made in a synthetic one
        try:
            path.mkdir()
        except OSError as exc:
            self._forget(rel)
            if exc.errno == errno.ENOSPC:
                raise ResmgrError(
                    f"resctrl group {rel}: expected a free CLOSID/RMID "
                    f"(num_closids={self.info.num_closids}); found none left ({exc})"
                ) from exc
            raise ResmgrError(
                f"resctrl group {rel}: expected mkdir to succeed; found {exc}"
            ) from exc
        return True

    def _remove(self, rel: str) -> bool:
        path = group_path(self.root, rel)
        if not path.is_dir():
            self._forget(rel)
            return False
        try:
            path.rmdir()  # a real resctrl group goes with its pseudo-files
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise ResmgrError(
                    f"resctrl group {rel}: expected rmdir to succeed; found {exc}"
                ) from exc
            self._clear_synthetic(path)
            path.rmdir()
        self._forget(rel)
        return True

    def _clear_synthetic(self, path: Path) -> None:
        """In a synthetic tree, drop the files resctrl would own so rmdir can proceed."""
        for sub in ("mon_groups", "mon_data"):
            d = path / sub
            if d.is_dir() and not d.is_symlink():
                for child in sorted(d.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                    if child.is_dir() and not child.is_symlink():
                        child.rmdir()
                    else:
                        child.unlink()
                d.rmdir()
        for name in RESERVED_NAMES:
            f = path / name
            if f.is_file() or f.is_symlink():
                f.unlink()

    # -- classes ------------------------------------------------------------------------

    @property
    def class_names(self) -> tuple[str, ...]:
        return tuple(self._plans)

    def planned(self) -> Mapping[str, str]:
        """Class name -> schemata text that `apply_classes` writes."""
        return dict(self._plans)

    def apply_classes(self) -> list[tuple[Path, str]]:
        """Create/update class groups, drop owned classes no longer configured."""
        writes: list[tuple[Path, str]] = []
        for name, text in self._plans.items():
            self._make(name, GroupKind.CLASS)
            path = safe_join(self.root, name, "schemata")
            _write_once(path, text, root=self.root)
            writes.append((path, text))
        for rel, meta in sorted(self.owned().items()):
            if meta.get("kind") == GroupKind.CLASS and rel not in self._plans:
                self._remove_logged(rel)
        return writes

    # -- pod groups ---------------------------------------------------------------------

    def pod_group_schemata(self, pod: Pod) -> str | None:
        """Schemata text for the pod's own group, None when it has no resctrl annotation."""
        value = pod.annotations.get(RESCTRL_POD_ANNOTATION)
        if value is None:
            return None
        subject = f"pod {pod.namespace}/{pod.name}: annotation {RESCTRL_POD_ANNOTATION}"
        return plan_pod_group(self.info, parse_pod_resctrl(value, subject=subject), subject=subject)

    def ensure_pod_group(self, pod: Pod) -> str | None:
        """At RunPodSandbox: create/update the pod's group; its name, or None if not asked."""
        text = self.pod_group_schemata(pod)
        if text is None:
            return None
        name = pod_group_name(pod)
        if not self._make(name, GroupKind.POD, pod.uid, limit=True) and name not in self.owned():
            self._record(name, GroupKind.POD, pod.uid)  # named for this very pod: adopt it
        _write_once(safe_join(self.root, name, "schemata"), text, root=self.root)
        return name

    def remove_pod_group(self, pod: Pod) -> list[str]:
        """At RemovePodSandbox: remove the pod's owned group and monitoring groups."""
        removed: list[str] = []
        for rel, meta in sorted(self.owned().items(), key=lambda kv: -kv[0].count("/")):
            mine = meta.get("pod_uid") == pod.uid
            if (
                mine
                and meta.get("kind") in (GroupKind.POD, GroupKind.MON)
                and self._remove_logged(rel)
            ):
                removed.append(rel)
        return removed

    def _remove_logged(self, rel: str) -> bool:
        """`_remove`, logging a group that will not go (one must not stop the rest)."""
        try:
            return self._remove(rel)
        except ResmgrError as exc:
            self.log.warning("resctrl group not removed", group=rel, error=str(exc))
            return False

    # -- monitoring ---------------------------------------------------------------------

    def ensure_mon_group(self, pod: Pod, rdt_class: str | None) -> str | None:
        """With monitorPods: `[<class>/]mon_groups/<name>`; its relative path (None: the
        pod is not monitored).

        `<name>` is `monitor.pod_mon_name`'s (``monitorGroupNames``).  Named by the daemon,
        a pod in its own group (`rdt_class` is its group name) is counted by that group;
        named by pod UID, it gets a monitoring group inside it, where Kepler looks.  A
        pod the ``monitorNamespaces``/``monitorLabelSelector`` filters leave out gets none.
        """
        if not self.monitoring or not self.config.monitors(pod.namespace, pod.labels):
            return None
        by_uid = self.config.monitor_group_names == "pod-uid"
        if not by_uid and rdt_class == pod_group_name(pod):
            return rdt_class  # the pod's own control group monitors it already
        subject = f"pod {pod.namespace}/{pod.name}"
        try:
            name = pod_mon_name(pod.uid, self.config.monitor_group_names)
        except ValueError as exc:
            raise AnnotationError(f"{subject}: {exc}") from exc
        parts = (
            []
            if rdt_class is None
            else [
                validate_name(
                    rdt_class, subject="RDT class of a monitoring group", error=AnnotationError
                )
            ]
        )
        if parts and by_uid and not safe_join(self.root, *parts).is_dir():
            # resctrl-mon's createMonGroup: never make a control group by the way
            raise ResmgrError(
                f"{subject}: monitoring group under RDT class {rdt_class!r}: expected its "
                f"control group {self.root / parts[0]} to exist; found none"
            )
        rel = "/".join([*parts, "mon_groups", name])
        self._make(rel, GroupKind.MON, pod.uid)
        return rel

    def read_counters(self, group: str = "") -> dict[int, MonCounters]:
        """Counters per L3 cache id of `group` (relative path; "" is the root group)."""
        return read_counters(self.root if group == "" else group_path(self.root, group))

    @property
    def monitoring(self) -> bool:
        """Pods are monitored: `monitorPods` is on and the machine has L3 monitoring."""
        return self.config.monitor_pods and self.info.mon is not None

    def monitor_container(
        self, pod: Pod, container_id: str, rdt_class: str | None, *, runtime_rdt: bool
    ) -> MonPlan | None:
        """At CreateContainer: where the container's tasks will be counted (None: nowhere).

        The earliest point wins: a pod in its own group is counted there from the start (its
        class puts it there); with `runtime_rdt` (the runtime speaks NRI v0.11+) and an RDT
        class, the runtime makes a monitoring group for the container and starts the task
        in it; otherwise the pod's monitoring group is made now and the PID goes into it
        once the task runs (`task_started`).
        """
        if not self.monitoring or not self.config.monitors(pod.namespace, pod.labels):
            return None
        by_uid = self.config.monitor_group_names == "pod-uid"
        if not by_uid and rdt_class == pod_group_name(pod):
            return MonPlan(group=rdt_class)
        group = runtime_group(container_id, rdt_class)
        if runtime_rdt and group is not None and not by_uid:
            return MonPlan(group=group, clos_id=rdt_class)
        rel = self.ensure_mon_group(pod, rdt_class)
        return None if rel is None else MonPlan(group=rel)

    def task_started(
        self, pod: Pod, container_id: str, rdt_class: str | None, pid: int
    ) -> str | None:
        """At PostStartContainer: see the task counted; the group that counts it.

        A pod in its own group needs nothing.  A task the runtime put in a group of its
        own (`MonPlan.clos_id`) is left there; where the runtime did not (its OCI runtime
        ignores ``enableMonitoring``: runc before 1.4, for one), or without NRI's LinuxRdt,
        `pid` is written into the pod's monitoring group.  The PID must be one of this
        daemon's PID namespace (run with ``hostPID``), else the kernel answers ESRCH.
        """
        if not self.monitoring or not self.config.monitors(pod.namespace, pod.labels):
            return None
        by_uid = self.config.monitor_group_names == "pod-uid"
        if not by_uid and rdt_class == pod_group_name(pod):
            return rdt_class
        group = runtime_group(container_id, rdt_class)
        if group is not None and not by_uid and pid in self._tasks(group):
            return group
        if pid <= 0:
            raise ResmgrError(
                f"pod {pod.namespace}/{pod.name} container {container_id}: expected the "
                f"task's PID at PostStartContainer to monitor it; found {pid}"
            )
        rel = self.ensure_mon_group(pod, rdt_class)
        if rel is None:
            return None
        path = safe_join(self.root, *rel.split("/"), "tasks")
        _write_once(path, f"{pid}\n", root=self.root, append=True)
        return rel

    def _tasks(self, group: str) -> set[int]:
        try:
            text = safe_join(self.root, *group.split("/"), "tasks").read_text()
        except OSError:
            return set()
        return {int(t) for t in text.split() if t.isascii() and t.isdigit()}

    def monitoring_samples(
        self, containers: Iterable[tuple[str, str | None]] = ()
    ) -> list[MonSample]:
        """Counters of every group that counts pods, read now (for /metrics).

        The root and the configured classes (their own counters, which include their
        monitoring groups'), the pod groups and pod monitoring groups this daemon made, and
        the per-container groups runtimes made for `containers` ((id, RDT class) pairs).
        """
        if not self.monitoring:
            return []
        out: list[MonSample] = []
        for cls, mon, rel in sample_groups(self._plans, self.owned(), containers):
            for cache_id, c in self.read_counters(rel).items():
                out.append(
                    MonSample(
                        cls, mon, cache_id, c.llc_occupancy, c.mbm_total_bytes, c.mbm_local_bytes
                    )
                )
        return out

    # -- restart ------------------------------------------------------------------------

    def reconcile(self, live_pod_uids: Collection[str]) -> ReconcileReport:
        """At start: remove owned pod/mon groups of gone pods; leave everything else."""
        live = set(live_pod_uids)
        owned = self.owned()
        removed: list[str] = []
        kept: list[str] = []
        for rel, meta in sorted(owned.items(), key=lambda kv: -kv[0].count("/")):
            if meta.get("kind") not in (GroupKind.POD, GroupKind.MON):
                continue
            if meta.get("pod_uid") in live:
                kept.append(rel)
                continue
            if self._remove_logged(rel):
                removed.append(rel)
        foreign = sorted(
            p.name
            for p in self.root.iterdir()
            if p.is_dir() and p.name.startswith(POD_GROUP_PREFIX) and p.name not in owned
        )
        return ReconcileReport(
            removed=tuple(removed), kept=tuple(sorted(kept)), foreign=tuple(foreign)
        )

    def live_groups(self) -> Iterable[str]:
        """Control groups present under root (for diagnostics)."""
        return sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and p.name not in RESERVED_NAMES
        )
