"""RDT monitoring on a synthetic resctrl tree: where a container's tasks are counted, how
they get there (the runtime through NRI's LinuxRdt, or the daemon writing the PID), and the
counters read for /metrics."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.control.resctrl import (
    MonPlan,
    MonSample,
    RdtConfig,
    RdtController,
    read_info,
)
from nri_resmgr.control.resctrl.monitor import sample_groups
from nri_resmgr.control.synthetic import INTEL_SKX, make_resctrl_tree
from nri_resmgr.model import AnnotationError, Pod, PodID, QoSClass, ResmgrError

UID = "aaaaaaaa-0000-0000-0000-000000000001"
CID = "0123456789abcdef" * 4  # a containerd container id: 64 hex digits
CONFIG: dict[str, Any] = {
    "partitions": {"p": {"classes": {"gold": {"l3Allocation": "50-100%"}}}},
    "monitorPods": True,
}
KOORD = '{"llc": {"schemata": {"range": [20, 80]}}}'


def pod(annotation: str | None = None) -> Pod:
    ann = {} if annotation is None else {"node.koordinator.sh/resctrl": annotation}
    return Pod(
        id=PodID("sb"),
        uid=UID,
        name="web",
        namespace="default",
        qos_class=QoSClass.BURSTABLE,
        annotations=ann,
    )


@pytest.fixture
def ctl(tmp_path: Path) -> RdtController:
    return controller(tmp_path, CONFIG)


def controller(tmp_path: Path, config: dict[str, Any]) -> RdtController:
    root = tmp_path / "resctrl"
    mounts = make_resctrl_tree(root, INTEL_SKX)
    c = RdtController(
        root,
        RdtConfig.model_validate(config),
        state_dir=tmp_path / "state",
        info=read_info(root, mounts=mounts),
    )
    c.apply_classes()
    return c


def tasks(ctl: RdtController, rel: str) -> list[str]:
    return (ctl.root / rel / "tasks").read_text().split()


def test_pid_goes_into_the_pod_monitoring_group(ctl: RdtController) -> None:
    plan = ctl.monitor_container(pod(), CID, "gold", runtime_rdt=False)
    rel = f"gold/mon_groups/nri-resmgr-pod-{UID}"
    assert plan == MonPlan(group=rel)
    assert (ctl.root / rel).is_dir()  # made at CreateContainer: no RMID, no container
    assert ctl.task_started(pod(), CID, "gold", 4242) == rel
    assert ctl.task_started(pod(), "sidecar", "gold", 4343) == rel
    assert tasks(ctl, rel) == ["4242", "4343"]


def test_no_class_counts_in_the_root_monitoring_group(ctl: RdtController) -> None:
    rel = f"mon_groups/nri-resmgr-pod-{UID}"
    # without a class the runtime would make a control group per container: never asked
    assert ctl.monitor_container(pod(), CID, None, runtime_rdt=True) == MonPlan(group=rel)
    assert ctl.task_started(pod(), CID, None, 99) == rel
    assert tasks(ctl, rel) == ["99"]


def test_runtime_with_linux_rdt_makes_the_group(ctl: RdtController) -> None:
    plan = ctl.monitor_container(pod(), CID, "gold", runtime_rdt=True)
    assert plan == MonPlan(group=f"gold/mon_groups/{CID}", clos_id="gold")
    assert not (ctl.root / "gold" / "mon_groups").exists()  # nothing of ours made
    # the OCI runtime made it and started the task in it
    (ctl.root / plan.group).mkdir(parents=True)
    (ctl.root / plan.group / "tasks").write_text("4242\n")
    assert ctl.task_started(pod(), CID, "gold", 4242) == plan.group
    assert tasks(ctl, plan.group) == ["4242"]
    assert not (ctl.root / "gold" / "mon_groups" / f"nri-resmgr-pod-{UID}").exists()


def test_runtime_that_made_no_group_falls_back_to_the_pid(ctl: RdtController) -> None:
    plan = ctl.monitor_container(pod(), CID, "gold", runtime_rdt=True)
    assert plan is not None and plan.clos_id == "gold"
    rel = f"gold/mon_groups/nri-resmgr-pod-{UID}"
    assert ctl.task_started(pod(), CID, "gold", 4242) == rel
    assert tasks(ctl, rel) == ["4242"]
    assert not (ctl.root / plan.group).exists()


def test_pod_in_its_own_group_is_counted_there(ctl: RdtController) -> None:
    annotated = pod(KOORD)
    name = ctl.ensure_pod_group(annotated)
    assert name == f"nri-resmgr-pod-{UID}"
    for runtime_rdt in (True, False):
        assert ctl.monitor_container(annotated, CID, name, runtime_rdt=runtime_rdt) == (
            MonPlan(group=name)
        )
    assert ctl.task_started(annotated, CID, name, 4242) == name
    assert not (ctl.root / name / "tasks").exists()  # its class put it there: nothing written


def test_missing_pid_is_an_error_naming_the_container(ctl: RdtController) -> None:
    ctl.monitor_container(pod(), CID, "gold", runtime_rdt=False)
    with pytest.raises(
        ResmgrError,
        match=rf"^pod default/web container {CID}: expected the "
        r"task's PID at PostStartContainer to monitor it; found 0$",
    ):
        ctl.task_started(pod(), CID, "gold", 0)


def test_pid_write_failure_reports_the_kernel(ctl: RdtController) -> None:
    rel = f"gold/mon_groups/nri-resmgr-pod-{UID}"
    ctl.monitor_container(pod(), CID, "gold", runtime_rdt=False)
    (ctl.root / rel / "tasks").mkdir()  # stands in for a write the kernel refuses
    (ctl.root / "info" / "last_cmd_status").write_text("No such process\n")
    with pytest.raises(
        ResmgrError,
        match=r"tasks: expected the kernel to accept '7\\n'; .*"
        r"\(info/last_cmd_status: No such process\)",
    ):
        ctl.task_started(pod(), CID, "gold", 7)


def test_without_monitor_pods_nothing_happens(tmp_path: Path) -> None:
    ctl = controller(tmp_path, {**CONFIG, "monitorPods": False})
    before = sorted(p for p in ctl.root.rglob("*"))
    assert ctl.monitor_container(pod(), CID, "gold", runtime_rdt=True) is None
    assert ctl.task_started(pod(), CID, "gold", 4242) is None
    assert ctl.monitoring_samples([(CID, "gold")]) == []
    assert sorted(p for p in ctl.root.rglob("*")) == before


def _counters(group: Path, cache_id: int, occupancy: str, local: str, total: str) -> None:
    d = group / "mon_data" / f"mon_L3_{cache_id:02d}"
    d.mkdir(parents=True)
    (d / "llc_occupancy").write_text(occupancy + "\n")
    (d / "mbm_local_bytes").write_text(local + "\n")
    (d / "mbm_total_bytes").write_text(total + "\n")


def test_samples_label_groups_as_nri_plugins_does(ctl: RdtController) -> None:
    pod_mon = ctl.monitor_container(pod(), "other", "gold", runtime_rdt=False)
    assert pod_mon is not None
    runtime = f"gold/mon_groups/{CID}"
    _counters(ctl.root, 0, "10", "11", "12")
    _counters(ctl.root / "gold", 1, "20", "21", "22")
    _counters(ctl.root / pod_mon.group, 0, "30", "31", "32")
    _counters(ctl.root / runtime, 1, "Unavailable", "41", "42")
    # a group nobody told us about is not reported
    _counters(ctl.root / "gold" / "mon_groups" / "someone-elses", 0, "1", "1", "1")
    samples = ctl.monitoring_samples([(CID, "gold"), ("no-class", None)])
    assert sorted(samples, key=lambda s: (s.rdt_class, s.rdt_mon_group)) == [
        MonSample("gold", "", 1, 20, 22, 21),
        MonSample("gold", CID, 1, None, 42, 41),
        MonSample("gold", f"nri-resmgr-pod-{UID}", 0, 30, 32, 31),
        MonSample("system/default", "", 0, 10, 12, 11),
    ]


def test_sample_groups_lists_each_group_once_in_a_fixed_order() -> None:
    """The pure half of `monitoring_samples`: which groups, labelled how, each path once
    (a container listed twice, or a runtime group under a class, is read once)."""
    pod_group = f"nri-resmgr-pod-{UID}"
    owned = {
        "gold": {"kind": "class", "pod_uid": ""},
        pod_group: {"kind": "pod", "pod_uid": UID},
        f"gold/mon_groups/{pod_group}": {"kind": "mon", "pod_uid": UID},
        f"mon_groups/{pod_group}": {"kind": "mon", "pod_uid": UID},
    }
    got = sample_groups(
        ["gold"], owned, [(CID, "gold"), (CID, "gold"), ("x", None), ("../bad", "gold")]
    )
    assert got == [
        ("system/default", "", ""),
        ("gold", "", "gold"),
        ("gold", pod_group, f"gold/mon_groups/{pod_group}"),
        ("system/default", pod_group, f"mon_groups/{pod_group}"),
        (pod_group, "", pod_group),
        ("gold", CID, f"gold/mon_groups/{CID}"),
    ]


# -- monitorGroupNames: pod-uid (nri-plugins' resctrl-mon, read by Kepler) ----------------

KEPLER: dict[str, Any] = {**CONFIG, "monitorGroupNames": "pod-uid"}


def test_pod_uid_names_the_group_as_resctrl_mon_does(tmp_path: Path) -> None:
    ctl = controller(tmp_path, KEPLER)
    rel = f"mon_groups/{UID}"
    # a pod nobody classes is counted in the root's mon_groups, as resctrl-mon counts it;
    # the runtime's per-container group is never asked for: Kepler reads the pod's
    assert ctl.monitor_container(pod(), CID, None, runtime_rdt=True) == MonPlan(group=rel)
    assert (ctl.root / rel).is_dir()
    assert ctl.task_started(pod(), CID, None, 4242) == rel
    assert ctl.task_started(pod(), "sidecar", None, 4343) == rel
    assert tasks(ctl, rel) == ["4242", "4343"]
    _counters(ctl.root / rel, 0, "100", "200", "300")
    assert MonSample("system/default", UID, 0, 100, 300, 200) in ctl.monitoring_samples()
    # retained until the pod goes (a restarted container keeps its RMID), then removed
    assert ctl.remove_pod_group(pod()) == [rel]
    assert not (ctl.root / rel).exists()


def test_pod_uid_with_a_class_and_with_linux_rdt(tmp_path: Path) -> None:
    ctl = controller(tmp_path, KEPLER)
    rel = f"gold/mon_groups/{UID}"
    assert ctl.monitor_container(pod(), CID, "gold", runtime_rdt=True) == MonPlan(group=rel)
    assert ctl.task_started(pod(), CID, "gold", 7) == rel
    assert tasks(ctl, rel) == ["7"]
    assert not (ctl.root / "gold" / "mon_groups" / CID).exists()


def test_pod_uid_in_its_own_group_gets_a_monitoring_group_inside(tmp_path: Path) -> None:
    ctl = controller(tmp_path, KEPLER)
    annotated = pod(KOORD)
    own = ctl.ensure_pod_group(annotated)
    assert own == f"nri-resmgr-pod-{UID}"
    rel = f"{own}/mon_groups/{UID}"
    assert ctl.monitor_container(annotated, CID, own, runtime_rdt=True) == MonPlan(group=rel)
    assert ctl.task_started(annotated, CID, own, 11) == rel
    assert tasks(ctl, rel) == ["11"]
    assert ctl.remove_pod_group(annotated) == [rel, own]


def test_pod_uid_is_canonical_and_a_record_of_it_survives_a_restart(tmp_path: Path) -> None:
    ctl = controller(tmp_path, KEPLER)
    upper = dataclasses.replace(pod(), uid="{" + UID.upper() + "}")
    assert ctl.ensure_mon_group(upper, None) == f"mon_groups/{UID}"
    again = controller(tmp_path, KEPLER)  # the record is read back, entry shape accepted
    assert f"mon_groups/{UID}" in again.owned()
    assert again.reconcile(live_pod_uids=[]).removed == (f"mon_groups/{UID}",)


def test_pod_uid_that_is_no_uuid_is_refused_naming_the_pod(tmp_path: Path) -> None:
    ctl = controller(tmp_path, KEPLER)
    bad = dataclasses.replace(pod(), uid="../../etc")
    with pytest.raises(
        AnnotationError,
        match=r"^pod default/web: pod uid '\.\./\.\./etc': expected a UUID to name its "
        r"monitoring group mon_groups/<pod-uid> \(monitorGroupNames: pod-uid\); found none$",
    ):
        ctl.monitor_container(bad, CID, None, runtime_rdt=False)
    assert not (ctl.root / "mon_groups").exists() or not any((ctl.root / "mon_groups").iterdir())


def test_pod_uid_never_makes_a_control_group_for_a_missing_class(tmp_path: Path) -> None:
    ctl = controller(tmp_path, KEPLER)
    with pytest.raises(
        ResmgrError,
        match=r"^pod default/web: monitoring group under RDT class 'silver': expected its "
        r"control group .*/silver to exist; found none$",
    ):
        ctl.monitor_container(pod(), CID, "silver", runtime_rdt=False)
    assert not (ctl.root / "silver").exists()


@pytest.mark.parametrize(
    ("filters", "monitored"),
    [
        ({"monitorNamespaces": ["default"]}, True),
        ({"monitorNamespaces": ["kube-system"]}, False),
        ({"monitorLabelSelector": {"app": "web"}}, True),
        ({"monitorLabelSelector": {"app": "web", "tier": "db"}}, False),
    ],
)
def test_namespace_and_label_filters_as_resctrl_mon(
    tmp_path: Path, filters: dict[str, Any], monitored: bool
) -> None:
    ctl = controller(tmp_path, {**KEPLER, **filters})
    labelled = dataclasses.replace(pod(), labels={"app": "web"})
    plan = ctl.monitor_container(labelled, CID, None, runtime_rdt=False)
    started = ctl.task_started(labelled, CID, None, 5)
    assert (plan is not None, started is not None) == (monitored, monitored)
    assert (ctl.root / "mon_groups" / UID).is_dir() == monitored


def test_unknown_group_naming_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match=r"monitorGroupNames\n.*'nri-resmgr' or 'pod-uid'"):
        RdtConfig.model_validate({**CONFIG, "monitorGroupNames": "kepler"})
