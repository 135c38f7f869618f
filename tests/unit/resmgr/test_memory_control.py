"""The memory components in the pipeline: adjustments, placement, cgroup v1, NRI needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nri_api import api
from nri_resmgr.config import config_from_mapping
from nri_resmgr.control.hooks import RuntimeField
from nri_resmgr.control.memory import MemoryPolicyControl, MemoryQoSControl
from nri_resmgr.control.memory_config import MemoryPolicyConfig, MemoryQoSConfig
from nri_resmgr.model import Assignment, ConfigError, ContainerID, CPUKind, QoSClass
from nri_resmgr.runtime.assembly import build_pipeline
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import ctr, hbm_cxl
from tests.support.logs import QUIET, CapturedLog
from tests.support.messages import guaranteed, pod

POLICY_CLASSES: dict[str, Any] = {
    "classes": [
        {"name": "mems", "policy": {"mode": "MPOL_INTERLEAVE", "nodes": "allowed-mems"}},
        {"name": "pkg", "policy": {"mode": "MPOL_BIND", "nodes": "cpu-packages"}},
        {"name": "default", "policy": {"mode": "MPOL_DEFAULT"}},
    ]
}
QOS: dict[str, Any] = {
    "classes": [{"name": "silver", "swaplimitratio": 0.2}],
    "unifiedannotations": ["memory.oom.group"],
}


def _pipeline(tmp_path: Path, *, v2: bool) -> Any:
    root = tmp_path / "cgroup"
    root.mkdir()
    if v2:
        (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    config = config_from_mapping(
        {
            "policy": "topology-aware",
            "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}},
            "control": {"memoryPolicy": POLICY_CLASSES, "memoryQos": QOS},
        }
    )
    return build_pipeline(config, topology=hbm_cxl(), cgroup_root=str(root))


def test_the_policy_follows_topology_aware_placement(tmp_path: Path) -> None:
    """allowed-mems is the memory the policy pinned the container to: its CPU node and
    the HBM and CXL nodes attached to it (topology-aware's pinMemory)."""
    p = _pipeline(tmp_path, v2=True)
    sb = pod("db", QoSClass.GUARANTEED)
    sb.annotations["class.memory-policy.nri.io"] = "mems"
    adjust, _ = p.create(sb, guaranteed(sb, "main", "2"))
    mems = adjust.linux.resources.cpu.mems
    assert mems  # the policy pinned memory
    mpol = adjust.linux.memory_policy
    assert api.MpolMode.Name(mpol.mode) == "MPOL_INTERLEAVE"
    assert mpol.nodes == mems


def test_mpol_default_is_sent_present(tmp_path: Path) -> None:
    p = _pipeline(tmp_path, v2=True)
    sb = pod("web", QoSClass.GUARANTEED)
    sb.annotations["class.memory-policy.nri.io"] = "default"
    adjust, _ = p.create(sb, guaranteed(sb, "main", "1"))
    assert adjust.linux.HasField("memory_policy")
    assert adjust.linux.memory_policy.mode == api.MpolMode.MPOL_DEFAULT
    assert adjust.linux.memory_policy.nodes == ""


def test_memory_qos_values_in_the_adjustment(tmp_path: Path) -> None:
    p = _pipeline(tmp_path, v2=True)
    sb = pod("web", QoSClass.GUARANTEED)
    sb.annotations["class.memory-qos.nri.io"] = "silver"
    sb.annotations["memory.oom.group.memory-qos.nri.io/main"] = "1"
    adjust, _ = p.create(sb, guaranteed(sb, "main", "1"))
    # 100M limit (guaranteed()): int64(float32(100e6) * float32(0.8))
    assert dict(adjust.linux.resources.unified) == {
        "memory.high": "80000000",
        "memory.swap.max": "max",
        "memory.oom.group": "1",
    }


def test_no_annotation_no_adjustment(tmp_path: Path) -> None:
    p = _pipeline(tmp_path, v2=True)
    sb = pod("plain", QoSClass.GUARANTEED)
    adjust, _ = p.create(sb, guaranteed(sb, "main", "1"))
    assert not adjust.linux.HasField("memory_policy")
    assert not adjust.linux.resources.unified


def test_a_bad_annotation_fails_creation_and_changes_nothing(tmp_path: Path) -> None:
    p = _pipeline(tmp_path, v2=True)
    sb = pod("bad", QoSClass.GUARANTEED)
    sb.annotations["class.memory-policy.nri.io"] = "gold"
    with pytest.raises(Exception, match="names memory policy class 'gold'"):
        p.create(sb, guaranteed(sb, "main", "2"))
    assert not p.containers and not p.assignments


def test_cgroup_v1_is_said_at_start_and_for_each_container(tmp_path: Path) -> None:
    captured = CapturedLog()
    ctl = MemoryQoSControl(
        MemoryQoSConfig.model_validate(QOS), cgroup_root=tmp_path, log=captured.log
    )
    (start,) = captured.lines
    assert start["method"] == "warning"
    assert "cgroup v1 host" in start["event"] and start["cgroup_root"] == str(tmp_path)
    a = Assignment(ContainerID("p-c"), IDSet(), IDSet(), CPUKind.NONE)
    c = ctr("c", ann={"class.memory-qos.nri.io": "silver"}, mem=1 << 30)
    adjust = ctl.adjustment(c, a)
    assert adjust is not None and dict(adjust.linux.resources.unified)["memory.swap.max"] == "max"
    (line,) = captured.events(
        "memory qos on a cgroup v1 host: the runtime will refuse these cgroup v2 values "
        "and fail the container"
    )
    assert line["method"] == "warning" and line["container"] == c.pretty
    assert line["unified"] == "memory.high=858993472,memory.swap.max=max"
    assert ctl.adjustment(ctr("d"), a) is None  # no values: nothing said
    assert len(captured.lines) == 2


def test_cgroup_v2_says_nothing_at_start(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("memory\n")
    captured = CapturedLog()
    MemoryQoSControl(MemoryQoSConfig.model_validate(QOS), cgroup_root=tmp_path, log=captured.log)
    assert captured.lines == []


def test_memory_policy_needs_nri_0_12() -> None:
    ctl = MemoryPolicyControl(MemoryPolicyConfig(), hbm_cxl(), QUIET)
    assert ctl.nri_requirements() == (
        RuntimeField("LinuxMemoryPolicy", (0, 12, 0), "control.memoryPolicy"),
    )
    assert ctl.nri_requirements()[0].describe() == (
        "control.memoryPolicy sets LinuxMemoryPolicy (NRI v0.12.0+)"
    )


@pytest.mark.parametrize("inject", [True, False])
def test_inject_mpolset_is_said_once_and_the_policy_still_goes_as_nri(inject: bool) -> None:
    captured = CapturedLog()
    config = MemoryPolicyConfig.model_validate({**POLICY_CLASSES, "injectMpolset": inject})
    ctl = MemoryPolicyControl(config, hbm_cxl(), captured.log)
    said = [line for line in captured.lines if "injectMpolset" in line["event"]]
    assert len(said) == (1 if inject else 0)
    if inject:
        assert said[0]["method"] == "warning" and "LinuxMemoryPolicy" in said[0]["event"]
    a = Assignment(ContainerID("p-c"), IDSet(), IDSet({0}), CPUKind.NONE)
    adjust = ctl.adjustment(ctr("c", ann={"class.memory-policy.nri.io": "mems"}), a)
    assert adjust is not None
    assert api.MpolMode.Name(adjust.linux.memory_policy.mode) == "MPOL_INTERLEAVE"


def test_a_class_naming_absent_nodes_fails_the_pipeline_build(tmp_path: Path) -> None:
    config = config_from_mapping(
        {
            "policy": "none",
            "control": {
                "memoryPolicy": {
                    "classes": [{"name": "far", "policy": {"mode": "MPOL_BIND", "nodes": "7"}}]
                }
            },
        }
    )
    with pytest.raises(ConfigError, match=r"classes\[0\] \(far\).*found 7 \(no node 7\)"):
        build_pipeline(config, topology=hbm_cxl(), cgroup_root=str(tmp_path))


def test_without_pinning_the_machine_is_the_placement(tmp_path: Path) -> None:
    config = config_from_mapping({"policy": "none", "control": {"memoryPolicy": POLICY_CLASSES}})
    p = build_pipeline(config, topology=hbm_cxl(), cgroup_root=str(tmp_path))
    sb = pod("be", QoSClass.BEST_EFFORT)
    sb.annotations["class.memory-policy.nri.io"] = "pkg"
    adjust, _ = p.create(sb, guaranteed(sb, "main", "1"))
    assert adjust.linux.memory_policy.nodes == "0-5"


def test_sgx_epc_limit_is_a_misc_max_value(tmp_path: Path) -> None:
    """Their sgx-epc plugin's annotations: container over pod over the bare key."""
    config = config_from_mapping({"policy": "none", "control": {"sgxEpc": {"enable": True}}})
    p = build_pipeline(config, topology=hbm_cxl(), cgroup_root=str(tmp_path))
    sb = pod("enclave", QoSClass.BURSTABLE)
    sb.annotations.update({"epc-limit.nri.io/pod": "32768", "epc-limit.nri.io": "8192",
                           "epc-limit.nri.io/container.c0": "16384"})  # fmt: skip
    adjust, _ = p.create(sb, guaranteed(sb, "c0", "1"))
    assert dict(adjust.linux.resources.unified) == {"misc.max": "sgx_epc 16384"}
    adjust, _ = p.create(sb, guaranteed(sb, "c1", "1"))
    assert dict(adjust.linux.resources.unified) == {"misc.max": "sgx_epc 32768"}


@pytest.mark.parametrize("value", ["-1", "1k", "18446744073709551616", "\uff11\uff12"])
def test_a_bad_epc_limit_fails_the_container(tmp_path: Path, value: str) -> None:
    config = config_from_mapping({"policy": "none", "control": {"sgxEpc": {"enable": True}}})
    p = build_pipeline(config, topology=hbm_cxl(), cgroup_root=str(tmp_path))
    sb = pod("enclave", QoSClass.BURSTABLE)
    sb.annotations["epc-limit.nri.io"] = value
    with pytest.raises(Exception, match=r"annotation epc-limit.nri.io: expected a byte count"):
        p.create(sb, guaranteed(sb, "c0", "1"))


def test_without_sgx_epc_the_annotation_is_not_read(tmp_path: Path) -> None:
    config = config_from_mapping({"policy": "none"})
    p = build_pipeline(config, topology=hbm_cxl(), cgroup_root=str(tmp_path))
    sb = pod("enclave", QoSClass.BURSTABLE)
    sb.annotations["epc-limit.nri.io"] = "lots"
    adjust, _ = p.create(sb, guaranteed(sb, "c0", "1"))
    assert not adjust.linux.resources.unified
