"""The ownership record (`<state_dir>/resctrl-groups.json`) when the state directory or the
record is not what it should be: unwritable, full, corrupt, or naming paths that are not
groups this daemon makes.  The daemon must run on (one log line, never a traceback) and must
never delete anything outside the groups it created.

Read-only and full state directories are real tmpfs mounts where the tests run as root;
a state directory below a regular file (ENOTDIR) and a writer failing with ENOSPC stand in
for them everywhere.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.config import config_from_mapping
from nri_resmgr.control.resctrl import (
    RECORD_MAX_BYTES,
    RdtConfig,
    RdtController,
    ReconcileReport,
    read_info,
)
from nri_resmgr.control.synthetic import INTEL_SKX, make_resctrl_tree
from nri_resmgr.model import ConfigError, Pod, PodID, QoSClass
from tests.support.requirements import require

UID_A = "aaaaaaaa-0000-0000-0000-000000000001"
UID_B = "bbbbbbbb-0000-0000-0000-000000000002"
KOORD = '{"llc": {"schemata": {"range": [20, 80]}}}'
CLASSES: dict[str, Any] = {
    "partitions": {"p": {"classes": {"gold": {"l3Allocation": "50-100%"}}}},
    "monitorPods": True,
}


class Log:
    """Stands in for the structlog logger: records (level, event, details)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def warning(self, event: str, **details: Any) -> None:
        self.lines.append(("warning", event, details))

    def debug(self, event: str, **details: Any) -> None:
        self.lines.append(("debug", event, details))

    def info(self, event: str, **details: Any) -> None:
        self.lines.append(("info", event, details))

    def exception(self, event: str, **details: Any) -> None:
        self.lines.append(("exception", event, details))

    def events(self, level: str = "warning") -> list[str]:
        return [e for lv, e, _ in self.lines if lv == level]


def pod(uid: str, annotation: str | None = KOORD) -> Pod:
    ann = {} if annotation is None else {"node.koordinator.sh/resctrl": annotation}
    return Pod(
        id=PodID("s-" + uid[:4]),
        uid=uid,
        name="web",
        namespace="default",
        qos_class=QoSClass.BURSTABLE,
        annotations=ann,
    )


def make_root(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "resctrl"
    return root, make_resctrl_tree(root, INTEL_SKX)


def controller(
    tmp_path: Path, state: Path, log: Log, config: dict[str, Any] = CLASSES
) -> RdtController:
    root = tmp_path / "resctrl"
    mounts = tmp_path / "resctrl.mounts"
    if not root.exists():
        mounts = make_resctrl_tree(root, INTEL_SKX)
    return RdtController(
        root,
        RdtConfig.model_validate(config),
        state_dir=state,
        info=read_info(root, mounts=mounts),
        log=log,
    )


def snapshot(top: Path) -> dict[str, str]:
    """Every entry under `top` with a file's content, to compare before and after."""
    return {
        str(p.relative_to(top)): (p.read_text() if p.is_file() else "/")
        for p in sorted(top.rglob("*"))
    }


# ------------------------------------------------------------- unwritable or full state


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (root only)."""
    require(os.geteuid() == 0, "mounting a tmpfs needs root")
    point = tmp_path / "tmpfs"
    point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(point)],
        capture_output=True,
        text=True,
        check=False,
    )
    require(done.returncode == 0, f"mount -t tmpfs failed: {done.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def _readonly(tmp_path: Path, tmpfs: Path) -> Path:
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    return tmpfs / "state"


def _full(tmp_path: Path, tmpfs: Path) -> Path:
    (tmpfs / "state").mkdir()
    with (tmpfs / "filler").open("wb", buffering=0) as f, pytest.raises(OSError) as info:
        while True:
            f.write(b"x" * 4096)
    assert info.value.errno == errno.ENOSPC
    return tmpfs / "state"


def test_readonly_state_dir_keeps_groups_in_memory(tmp_path: Path, tmpfs: Path) -> None:
    _check_degraded(tmp_path, _readonly(tmp_path, tmpfs), "Read-only file system")


def test_full_state_dir_keeps_groups_in_memory_until_space_returns(
    tmp_path: Path, tmpfs: Path
) -> None:
    state = _full(tmp_path, tmpfs)
    ctl = _check_degraded(tmp_path, state, "No space left on device")
    assert not list(state.iterdir())  # no partial record left behind
    (tmpfs / "filler").unlink()
    ctl.ensure_pod_group(pod(UID_B))
    assert ctl.persisted
    record = json.loads((state / "resctrl-groups.json").read_text())
    assert sorted(record["groups"]) == ["gold", f"nri-resmgr-pod-{UID_B}"]
    log = ctl.log
    assert isinstance(log, Log)
    assert log.events("info") == ["resctrl ownership record writable again"]


def test_state_dir_below_a_file_keeps_groups_in_memory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory\n")
    _check_degraded(tmp_path, tmp_path / "file" / "state", "Not a directory")


def test_enospc_from_the_writer_keeps_groups_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Path.write_text

    def full(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        if self.name.startswith("resctrl-groups"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    _check_degraded(tmp_path, tmp_path / "state", "No space left on device")


def _check_degraded(tmp_path: Path, state: Path, error: str) -> RdtController:
    log = Log()
    ctl = controller(tmp_path, state, log)
    root = tmp_path / "resctrl"
    ctl.apply_classes()  # the first write: it fails, and the daemon carries on
    assert (root / "gold" / "schemata").is_file()
    assert not ctl.persisted
    assert ctl.ensure_pod_group(pod(UID_A)) == f"nri-resmgr-pod-{UID_A}"
    assert ctl.ensure_mon_group(pod(UID_B, None), "gold") == (
        f"gold/mon_groups/nri-resmgr-pod-{UID_B}"
    )
    assert sorted(ctl.owned()) == [
        "gold",
        f"gold/mon_groups/nri-resmgr-pod-{UID_B}",
        f"nri-resmgr-pod-{UID_A}",
    ]
    # one line for the whole episode, naming the record and the cause
    assert log.events() == ["resctrl ownership record not writable: groups kept in memory only"]
    details = log.lines[0][2]
    assert details["record"] == str(state / "resctrl-groups.json")
    assert error in details["error"]
    # what it made it can still remove: the memory is the record meanwhile
    assert ctl.remove_pod_group(pod(UID_B)) == [f"gold/mon_groups/nri-resmgr-pod-{UID_B}"]
    assert not (root / "gold" / "mon_groups" / f"nri-resmgr-pod-{UID_B}").exists()
    assert ctl.remove_pod_group(pod(UID_A)) == [f"nri-resmgr-pod-{UID_A}"]
    assert sorted(ctl.owned()) == ["gold"]
    return ctl


# ------------------------------------------------------------------- a corrupt record


def _write_record(state: Path, content: bytes) -> None:
    state.mkdir(exist_ok=True)
    (state / "resctrl-groups.json").write_bytes(content)


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (b"{not json", "expected the JSON ownership record; found Expecting property name"),
        (
            b"[" * 200_000 + b"]" * 200_000,
            "expected the JSON ownership record; found nested too deeply",
        ),
        (b'{"groups": {"\xff": {}}}', "expected the JSON ownership record; found 'utf-8'"),
        (b" " * (RECORD_MAX_BYTES + 1), f"expected at most {RECORD_MAX_BYTES} bytes"),
        (b'{"version": 1, "groups": ["gold"]}', "expected an object with root and groups"),
        (b"[]", "expected an object with root and groups"),
    ],
    ids=["not-json", "deeply-nested", "not-utf8", "too-large", "groups-list", "array"],
)
def test_corrupt_record_is_empty_with_one_log_line(
    tmp_path: Path, content: bytes, error: str
) -> None:
    root, _ = make_root(tmp_path)
    (root / f"nri-resmgr-pod-{UID_A}").mkdir()  # looks like ours, but nothing says so
    _write_record(tmp_path / "state", content)
    log = Log()
    ctl = controller(tmp_path, tmp_path / "state", log)
    before = snapshot(root)
    assert ctl.owned() == {}
    assert ctl.reconcile(set()) == ReconcileReport(foreign=(f"nri-resmgr-pod-{UID_A}",))
    assert ctl.owned() == {}
    assert snapshot(root) == before
    assert len(log.lines) == 1, log.lines
    level, _, details = log.lines[0]
    assert level == "warning"
    assert details["error"].startswith(error), details
    # the next write replaces the corrupt record with a good one
    ctl.apply_classes()
    assert sorted(
        json.loads((tmp_path / "state" / "resctrl-groups.json").read_text())["groups"]
    ) == ["gold"]


# ------------------------------------------------------------------ hostile entries


HOSTILE = {
    "": {"kind": "pod", "pod_uid": "gone"},
    ".": {"kind": "mon", "pod_uid": "gone"},
    "..": {"kind": "class", "pod_uid": ""},
    "../outside": {"kind": "pod", "pod_uid": "gone"},
    "/etc": {"kind": "pod", "pod_uid": "gone"},
    "gold/../..": {"kind": "mon", "pod_uid": "gone"},
    "mon_groups": {"kind": "mon", "pod_uid": "gone"},
    "info": {"kind": "class", "pod_uid": ""},
    "nri-resmgr-pod-x/../../outside": {"kind": "pod", "pod_uid": "x"},
    "someone-elses": {"kind": "pod", "pod_uid": "gone"},
    "nri-resmgr-pod-other": {"kind": "pod", "pod_uid": "gone"},
    "gold/mon_groups/someone": {"kind": "mon", "pod_uid": "gone"},
    "a/b/mon_groups/nri-resmgr-pod-gone": {"kind": "mon", "pod_uid": "gone"},
    "nri-resmgr-pod-": {"kind": "pod", "pod_uid": ""},
    "nri-resmgr-pod-badkind": {"kind": "root", "pod_uid": "badkind"},
    "nri-resmgr-pod-nouid": {"kind": "pod", "pod_uid": 7},
}


def test_hostile_entries_are_skipped_and_the_rest_is_cleaned_up(tmp_path: Path) -> None:
    root, _ = make_root(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x\n")
    for name in ("someone-elses", "nri-resmgr-pod-other", "gold/mon_groups/someone"):
        (root / name).mkdir(parents=True)
    linked = "nri-resmgr-pod-linked"  # of our shape, but a symlink out of the root
    (root / linked).symlink_to(outside)
    stale = f"nri-resmgr-pod-{UID_B}"
    stale_mon = f"mon_groups/nri-resmgr-pod-{UID_B}"
    live = f"nri-resmgr-pod-{UID_A}"
    for name in (stale, stale_mon, live):
        (root / name).mkdir()
        (root / name / "schemata").write_text("L3:0=1\n")  # resctrl files in the group
    groups = dict(HOSTILE)
    groups[stale] = {"kind": "pod", "pod_uid": UID_B}
    groups[stale_mon] = {"kind": "mon", "pod_uid": UID_B}
    groups[live] = {"kind": "pod", "pod_uid": UID_A}
    groups[linked] = {"kind": "pod", "pod_uid": "linked"}
    _write_record(
        tmp_path / "state",
        json.dumps({"version": 1, "root": str(root.resolve()), "groups": groups}).encode(),
    )
    log = Log()
    ctl = controller(tmp_path, tmp_path / "state", log)
    before = {**snapshot(root), **snapshot(outside)}

    report = ctl.reconcile({UID_A})

    assert report.removed == (stale_mon, stale)
    assert report.kept == (live,)
    after = {**snapshot(root), **snapshot(outside)}
    gone = {k for k in before if k not in after}
    assert gone == {stale, f"{stale}/schemata", stale_mon, f"{stale_mon}/schemata"}
    assert after == {k: v for k, v in before.items() if k not in gone}
    # the root's own files are all there
    for name in ("schemata", "tasks", "mon_data", "mon_groups", "info"):
        assert (root / name).exists(), name
    skipped = sorted(
        d["entry"] for lv, e, d in log.lines if e == "resctrl ownership record entry skipped"
    )
    assert skipped == sorted(repr(k) for k in HOSTILE)
    # the symlink is caught where the group would be removed, and only that group stays
    refused = [d for _, e, d in log.lines if e == "resctrl group not removed"]
    assert [d["group"] for d in refused] == [linked]
    assert f"{root.resolve() / linked} is a symlink" in refused[0]["error"]
    assert len(log.lines) == len(HOSTILE) + 1
    # skipped once, logged once: a second look says nothing new
    ctl.owned()
    assert len(log.lines) == len(HOSTILE) + 1
    assert sorted(ctl.owned()) == sorted([linked, live])


def test_entry_for_the_root_never_removes_root_files(tmp_path: Path) -> None:
    root, _ = make_root(tmp_path)
    _write_record(
        tmp_path / "state",
        json.dumps(
            {
                "version": 1,
                "root": str(root.resolve()),
                "groups": {"": {"kind": "pod", "pod_uid": "gone"}},
            }
        ).encode(),
    )
    log = Log()
    ctl = controller(tmp_path, tmp_path / "state", log)
    before = snapshot(root)
    assert ctl.reconcile(set()) == ReconcileReport()
    assert snapshot(root) == before
    assert [d["entry"] for _, _, d in log.lines] == ["''"]


# ----------------------------------------------------------------------- configuration


MB = "control.rdt.partitions.p.classes.c.mbAllocation: memory bandwidth"
MB_SPECS = 'expected "N%", "NMBps" or a list of them; found'
MB_MAP = 'expected "N%", "NMBps", a list of them, or a map from cache ids to those; found'


def _rdt(alloc: dict[str, Any]) -> dict[str, Any]:
    return {"control": {"rdt": {"partitions": {"p": {"classes": {"c": alloc}}}}}}


@pytest.mark.parametrize(
    ("alloc", "message"),
    [
        (
            {"l3Allocation": "0x" + "f" * 25},
            "control.rdt.partitions.p.classes.c.l3Allocation.all.unified: cache "
            "allocation '0xfffffffffffffffffffffffff': expected a bitmask of at most 64 bits "
            "(resctrl's widest); found 100 bits",
        ),
        (
            {"l3Allocation": {"1": {"code": "0x1" + "0" * 30}}},
            "control.rdt.partitions.p.classes.c.l3Allocation.1.code: cache allocation "
            "'0x1000000000000000000000000000000': expected a bitmask of at most 64 bits",
        ),
        (
            {"mbAllocation": {"all": 50}},
            f"{MB} for all: {MB_SPECS} 50",
        ),
        (
            {"mbAllocation": {"all": None}},
            f"{MB} for all: {MB_SPECS} None",
        ),
        (
            {"mbAllocation": {"0": {"percent": 5}}},
            f"{MB} for 0: {MB_SPECS} {{'percent': 5}}",
        ),
        (
            {"mbAllocation": [{"all": "50%"}]},
            f"{MB} for all: {MB_SPECS} [{{'all': '50%'}}]",
        ),
        (
            {"mbAllocation": 50},
            f"{MB}: {MB_MAP} 50",
        ),
    ],
    ids=[
        "l3-100-bits",
        "cdp-124-bits",
        "mb-number",
        "mb-null",
        "mb-object",
        "mb-dicts",
        "mb-scalar",
    ],
)
def test_config_errors_name_the_path(alloc: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping(_rdt(alloc))
    assert message in str(info.value)


def test_mask_wider_than_the_cache_is_refused_at_plan(tmp_path: Path) -> None:
    make_root(tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"l3Allocation '0xffffffffffffffff' on cache id 0: "
        r"expected a mask within 0x7ff; found 0xffffffffffffffff",
    ):
        controller(
            tmp_path,
            tmp_path / "state",
            Log(),
            {"partitions": {"p": {"classes": {"c": {"l3Allocation": "0x" + "f" * 16}}}}},
        )
