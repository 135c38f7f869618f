"""RdtController on synthetic resctrl trees: classes, pod groups, monitoring, restarts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.control.resctrl import (
    MonCounters,
    RdtConfig,
    RdtController,
    ReconcileReport,
    read_info,
)
from nri_resmgr.control.synthetic import INTEL_SKX, ResctrlLayout, make_resctrl_tree, with_
from nri_resmgr.model import AnnotationError, Pod, PodID, QoSClass, ResmgrError

UID_A = "aaaaaaaa-0000-0000-0000-000000000001"
UID_B = "bbbbbbbb-0000-0000-0000-000000000002"
KOORD = (
    '{"llc":{"schemata":{"range":[20,80]},"schemataPerCache":[{"cacheID":0,"range":[20,50]}]},'
    '"mb":{"schemata":{"percent":20}}}'
)
CLASSES = {
    "partitions": {
        "p": {
            "l3Allocation": "100%",
            "classes": {
                "gold": {"l3Allocation": "50-100%", "mbAllocation": "60%"},
                "BestEffort": {"l3Allocation": "0x3", "mbAllocation": "20%"},
            },
        }
    },
    "monitorPods": True,
}


def pod(uid: str, annotation: str | None = KOORD, name: str = "web") -> Pod:
    ann = {} if annotation is None else {"node.koordinator.sh/resctrl": annotation}
    return Pod(id=PodID("s-" + uid[:4]), uid=uid, name=name, namespace="default",
               qos_class=QoSClass.BURSTABLE, annotations=ann)


def listing(top: Path) -> list[str]:
    return sorted(str(p.relative_to(top)) + ("/" if p.is_dir() else "")
                  for p in top.rglob("*"))


def controller(tmp_path: Path, config: dict[str, Any] = CLASSES,
               layout: ResctrlLayout = INTEL_SKX) -> RdtController:
    root = tmp_path / "resctrl"
    mounts = tmp_path / "resctrl.mounts"
    if not root.exists():
        mounts = make_resctrl_tree(root, layout)
    return RdtController(root, RdtConfig.model_validate(config), state_dir=tmp_path / "state",
                         info=read_info(root, mounts=mounts))


def test_apply_classes_writes_exact_schemata(tmp_path: Path) -> None:
    ctl = controller(tmp_path)
    before = set(listing(tmp_path))
    writes = ctl.apply_classes()
    root = tmp_path / "resctrl"
    assert [(str(p.relative_to(root.resolve())), t) for p, t in writes] == [
        ("gold/schemata", "L3:0=7e0;1=7e0\nMB:0=60;1=60\n"),
        ("BestEffort/schemata", "L3:0=3;1=3\nMB:0=20;1=20\n"),
    ]
    assert (root / "gold" / "schemata").read_text() == "L3:0=7e0;1=7e0\nMB:0=60;1=60\n"
    assert (root / "BestEffort" / "schemata").read_text() == "L3:0=3;1=3\nMB:0=20;1=20\n"
    assert set(listing(tmp_path)) - before == {
        "resctrl/BestEffort/", "resctrl/BestEffort/schemata", "resctrl/gold/",
        "resctrl/gold/schemata", "state/", "state/resctrl-groups.json",
    }
    record = json.loads((tmp_path / "state" / "resctrl-groups.json").read_text())
    assert record == {"version": 1, "root": str(root.resolve()), "groups": {
        "BestEffort": {"kind": "class", "pod_uid": ""},
        "gold": {"kind": "class", "pod_uid": ""}}}


def test_reapply_drops_owned_classes_but_not_adopted_ones(tmp_path: Path) -> None:
    root = tmp_path / "resctrl"
    make_resctrl_tree(root, INTEL_SKX)
    (root / "BestEffort").mkdir()  # made by someone else before us
    controller(tmp_path).apply_classes()
    assert (root / "BestEffort" / "schemata").read_text() == "L3:0=3;1=3\nMB:0=20;1=20\n"
    empty: dict[str, Any] = {"partitions": {"p": {"classes": {"silver": {}}}}}
    controller(tmp_path, empty).apply_classes()
    assert not (root / "gold").exists()          # ours, no longer configured: removed
    assert (root / "BestEffort").is_dir()        # not ours: left alone
    assert (root / "silver" / "schemata").read_text() == "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"


def test_pod_group_exists_from_ensure_to_remove(tmp_path: Path) -> None:
    ctl = controller(tmp_path)
    root = tmp_path / "resctrl"
    group = root / f"nri-resmgr-pod-{UID_A}"
    assert not group.exists()
    assert ctl.ensure_pod_group(pod(UID_A)) == f"nri-resmgr-pod-{UID_A}"
    assert (group / "schemata").read_text() == "L3:0=3c;1=1fc\nMB:0=20;1=20\n"
    assert ctl.owned() == {f"nri-resmgr-pod-{UID_A}": {"kind": "pod", "pod_uid": UID_A}}
    # idempotent, and it rewrites the schemata
    (group / "schemata").write_text("L3:0=1;1=1\n")
    assert ctl.ensure_pod_group(pod(UID_A)) == f"nri-resmgr-pod-{UID_A}"
    assert (group / "schemata").read_text() == "L3:0=3c;1=1fc\nMB:0=20;1=20\n"
    assert ctl.remove_pod_group(pod(UID_A)) == [f"nri-resmgr-pod-{UID_A}"]
    assert not group.exists()
    assert ctl.owned() == {}
    assert ctl.remove_pod_group(pod(UID_A)) == []


def test_pod_without_annotation_gets_no_group(tmp_path: Path) -> None:
    ctl = controller(tmp_path)
    before = listing(tmp_path)
    assert ctl.ensure_pod_group(pod(UID_A, annotation=None)) is None
    assert listing(tmp_path) == before


def test_closids_exhausted(tmp_path: Path) -> None:
    ctl = controller(tmp_path)  # num_closids is 8 (MB): root + 7 groups
    ctl.apply_classes()
    for i in range(5):
        ctl.ensure_pod_group(pod(f"{i:08d}-0000-0000-0000-000000000000"))
    with pytest.raises(ResmgrError) as info:
        ctl.ensure_pod_group(pod(UID_A))
    assert str(info.value).startswith(
        f"resctrl group nri-resmgr-pod-{UID_A}: expected a free CLOSID (num_closids=8, "
        "CLOSID 0 is the root group); found all taken by BestEffort, gold, nri-resmgr-pod-0")
    assert not (tmp_path / "resctrl" / f"nri-resmgr-pod-{UID_A}").exists()
    assert f"nri-resmgr-pod-{UID_A}" not in ctl.owned()


def test_reconcile_after_restart(tmp_path: Path) -> None:
    ctl = controller(tmp_path)
    ctl.apply_classes()
    ctl.ensure_pod_group(pod(UID_A))
    ctl.ensure_pod_group(pod(UID_B))
    mon_a = ctl.ensure_mon_group(pod(UID_A, None), "gold")
    assert mon_a == f"gold/mon_groups/nri-resmgr-pod-{UID_A}"
    assert ctl.ensure_mon_group(pod(UID_B, None), None) == f"mon_groups/nri-resmgr-pod-{UID_B}"
    root = tmp_path / "resctrl"
    # groups this daemon never created, one of them even with our prefix
    (root / "koordlet-1234").mkdir()
    (root / "nri-resmgr-pod-cccccccc").mkdir()
    (root / "gold" / "mon_groups" / "someone-else").mkdir()

    restarted = controller(tmp_path)  # a new process: only the record remembers
    report = restarted.reconcile({UID_A})
    assert report == ReconcileReport(
        removed=(f"mon_groups/nri-resmgr-pod-{UID_B}", f"nri-resmgr-pod-{UID_B}"),
        kept=(f"gold/mon_groups/nri-resmgr-pod-{UID_A}", f"nri-resmgr-pod-{UID_A}"),
        foreign=("nri-resmgr-pod-cccccccc",),
    )
    groups = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert groups == ["BestEffort", "gold", "info", "koordlet-1234", "mon_data", "mon_groups",
                      f"nri-resmgr-pod-{UID_A}", "nri-resmgr-pod-cccccccc"]
    assert sorted(p.name for p in (root / "mon_groups").iterdir()) == []
    assert sorted(p.name for p in (root / "gold" / "mon_groups").iterdir()) == [
        f"nri-resmgr-pod-{UID_A}", "someone-else"]
    assert sorted(restarted.owned()) == [
        "BestEffort", "gold", f"gold/mon_groups/nri-resmgr-pod-{UID_A}",
        f"nri-resmgr-pod-{UID_A}"]
    # removing A afterwards takes its monitoring group with it
    assert restarted.remove_pod_group(pod(UID_A)) == [
        f"gold/mon_groups/nri-resmgr-pod-{UID_A}", f"nri-resmgr-pod-{UID_A}"]


def test_record_for_another_root_is_ignored(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "resctrl-groups.json").write_text(json.dumps(
        {"version": 1, "root": "/elsewhere", "groups": {"gold": {"kind": "class"}}}))
    assert controller(tmp_path).owned() == {}


def test_mon_group_needs_monitor_pods(tmp_path: Path) -> None:
    ctl = controller(tmp_path, {"partitions": {}})
    assert ctl.ensure_mon_group(pod(UID_A), None) is None


def test_read_counters(tmp_path: Path) -> None:
    ctl = controller(tmp_path)
    rel = ctl.ensure_mon_group(pod(UID_A), None)
    assert rel is not None
    data = tmp_path / "resctrl" / rel / "mon_data"
    for cid, (occ, total) in {0: ("123456", "987654321"), 1: ("Unavailable", "42")}.items():
        d = data / f"mon_L3_{cid:02d}"
        d.mkdir(parents=True)
        (d / "llc_occupancy").write_text(occ + "\n")
        (d / "mbm_total_bytes").write_text(total + "\n")
        (d / "mbm_local_bytes").write_text("7\n")
    assert ctl.read_counters(rel) == {
        0: MonCounters(llc_occupancy=123456, mbm_total_bytes=987654321, mbm_local_bytes=7),
        1: MonCounters(llc_occupancy=None, mbm_total_bytes=42, mbm_local_bytes=7),
    }
    assert ctl.read_counters("nonexistent-group") == {}
    assert ctl.remove_pod_group(pod(UID_A)) == [rel]
    assert not (tmp_path / "resctrl" / rel).exists()


def test_write_failure_reports_last_cmd_status(tmp_path: Path) -> None:
    ctl = controller(tmp_path)
    root = tmp_path / "resctrl"
    (root / "gold" / "schemata").mkdir(parents=True)  # makes the write fail
    (root / "info" / "last_cmd_status").write_text("Mask out of range\n")
    with pytest.raises(ResmgrError, match=r"gold/schemata: expected the kernel to accept "
                       r"'L3:0=7e0;1=7e0\\nMB:0=60;1=60\\n'; found .*Is a directory.* "
                       r"\(info/last_cmd_status: Mask out of range\)"):
        ctl.apply_classes()


HOSTILE_ANNOTATIONS = [
    pytest.param("../x", "expected JSON", id="path"),
    pytest.param('{"llc":{"schemata":{"range":[0,101]}}}', "expected 0 <= start < end <= 100",
                 id="over-100"),
    pytest.param('{"mb":{"schemata":{"percent":101}}}', "expected an integer percentage 1-100",
                 id="over-100-mb"),
    pytest.param('{"llc":{"schemataPerCache":[{"cacheID":"../0","range":[0,5]}]}}',
                 "expected a cache id", id="path-cache-id"),
    pytest.param('{"mb":{"schemata":{"percent":5}}}', "expected at least min_bandwidth=10%",
                 id="below-min-bw"),
    pytest.param("\x00", "expected JSON", id="nul"),
]


@pytest.mark.parametrize(("value", "fragment"), HOSTILE_ANNOTATIONS)
def test_hostile_pod_annotations_write_nothing(
    tmp_path: Path, value: str, fragment: str
) -> None:
    ctl = controller(tmp_path, {"partitions": {}})
    before = listing(tmp_path)
    with pytest.raises(AnnotationError) as info:
        ctl.ensure_pod_group(pod(UID_A, value))
    assert str(info.value).startswith(
        "pod default/web: annotation node.koordinator.sh/resctrl")
    assert fragment in str(info.value)
    assert listing(tmp_path) == before


@pytest.mark.parametrize("uid", ["../../escape", "/abs", "a/b", "x" * 300,
                                 "\u0430bc", "uid\nx"])
def test_hostile_pod_uid_writes_nothing(tmp_path: Path, uid: str) -> None:
    ctl = controller(tmp_path, {"partitions": {}, "monitorPods": True})
    before = listing(tmp_path)
    with pytest.raises(AnnotationError, match=r"as a resctrl group name: expected 1-64"):
        ctl.ensure_pod_group(pod(uid))
    with pytest.raises(AnnotationError, match=r"as a resctrl group name: expected 1-64"):
        ctl.ensure_mon_group(pod(uid), None)
    assert listing(tmp_path) == before


@pytest.mark.parametrize("cls", ["../x", "info", "/abs", ".h", "mon_groups"])
def test_hostile_class_for_mon_group_writes_nothing(tmp_path: Path, cls: str) -> None:
    ctl = controller(tmp_path)
    before = listing(tmp_path)
    with pytest.raises(AnnotationError, match=r"^RDT class of a monitoring group: expected"):
        ctl.ensure_mon_group(pod(UID_A), cls)
    assert listing(tmp_path) == before


def test_cdp_pod_group(tmp_path: Path) -> None:
    ctl = controller(tmp_path, {"partitions": {}}, layout=with_(INTEL_SKX, cdp=True))
    name = ctl.ensure_pod_group(pod(UID_A))
    assert name is not None
    assert (tmp_path / "resctrl" / name / "schemata").read_text() == (
        "L3CODE:0=3c;1=1fc\nL3DATA:0=3c;1=1fc\nMB:0=20;1=20\n")


def test_pod_in_its_own_group_is_monitored_by_that_group(tmp_path: Path) -> None:
    ctl = controller(tmp_path)
    name = ctl.ensure_pod_group(pod(UID_A))
    before = listing(tmp_path)
    assert ctl.ensure_mon_group(pod(UID_A), name) == name
    assert listing(tmp_path) == before
