"""The adapter: NRI messages to domain values and back (QoS, shares, quota, annotations)."""

from __future__ import annotations

import dataclasses

import pytest

from nri_api import api
from nri_resmgr.limits import Limits
from nri_resmgr.model import (
    AnnotationError,
    ContainerID,
    ContainerKind,
    DeviceRef,
    MountRef,
    QoSClass,
    Request,
)
from nri_resmgr.runtime import adapter
from nri_resmgr.runtime.adapter import AdapterError
from nri_resmgr.topology.cpuset import CPUSet
from tests.support.work import counting_calls

UID = "0c3b2a4e-1f6d-4b8a-9a33-5d1b2e7c9f10"
UID_ = UID.replace("-", "_")

QOS_PARENTS = [
    # systemd driver, as the kubelet passes it and as a full path
    (f"kubepods-pod{UID_}.slice", QoSClass.GUARANTEED),
    (f"kubepods-burstable-pod{UID_}.slice", QoSClass.BURSTABLE),
    (f"kubepods-besteffort-pod{UID_}.slice", QoSClass.BEST_EFFORT),
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
     QoSClass.BURSTABLE),
    (f"/kubepods.slice/kubepods-pod{UID_}.slice", QoSClass.GUARANTEED),
    # cgroupfs driver
    (f"/kubepods/pod{UID}", QoSClass.GUARANTEED),
    (f"/kubepods/burstable/pod{UID}", QoSClass.BURSTABLE),
    (f"/kubepods/besteffort/pod{UID}", QoSClass.BEST_EFFORT),
    (f"/kubepods/besteffort/pod{UID}/", QoSClass.BEST_EFFORT),
    # not a kubelet pod cgroup
    ("", None),
    ("/system.slice/foo.slice", None),
    ("kubepods-burstable.slice", None),
    ("/kubepods/burstable", None),
    ("/kubepods-x/pod1", None),
]


@pytest.mark.parametrize(
    ("parent", "expected"), QOS_PARENTS, ids=[p or "empty" for p, _ in QOS_PARENTS]
)
def test_qos_class_from_cgroup_parent(parent: str, expected: QoSClass | None) -> None:
    assert adapter.qos_class_from_cgroup_parent(parent) == expected


@pytest.mark.parametrize(
    ("shares", "milli"),
    [(None, 0), (0, 0), (2, 0), (3, 3), (102, 100), (256, 250), (512, 500), (1024, 1000),
     (2048, 2000), (1536, 1500), (4096, 4000)],
)
def test_cpu_request_from_shares(shares: int | None, milli: int) -> None:
    assert adapter.cpu_request_from_shares(shares) == milli


@pytest.mark.parametrize("milli", [3, 7, 10, 100, 123, 250, 333, 500, 999, 1000, 1001, 2500, 64000])
def test_shares_round_trip_matches_kubelet(milli: int) -> None:
    shares = max(2, milli * 1024 // 1000)  # kubelet MilliCPUToShares
    assert adapter.cpu_request_from_shares(shares) == milli


@pytest.mark.parametrize(
    ("quota", "period", "milli"),
    [(None, None, None), (-1, 100000, None), (0, 100000, None), (100000, 100000, 1000),
     (50000, 100000, 500), (250000, 100000, 2500), (1000, 100000, 10), (50000, 50000, 1000),
     (150000, None, 1500)],
)
def test_cpu_limit_from_quota(quota: int | None, period: int | None, milli: int | None) -> None:
    assert adapter.cpu_limit_from_quota(quota, period) == milli


def _resources(
    *, shares: int | None = None, quota: int | None = None, period: int | None = 100000,
    mem: int | None = None, cpus: str = "", mems: str = "",
) -> api.LinuxResources:
    r = api.LinuxResources()
    if shares is not None:
        r.cpu.shares.value = shares
        r.cpu.shares.SetInParent()
    if quota is not None:
        r.cpu.quota.value = quota
        r.cpu.quota.SetInParent()
        if period is not None:
            r.cpu.period.value = period
            r.cpu.period.SetInParent()
    if mem is not None:
        r.memory.limit.value = mem
        r.memory.limit.SetInParent()
    if cpus:
        r.cpu.cpus = cpus
    if mems:
        r.cpu.mems = mems
    return r


def _sandbox(parent: str = f"kubepods-pod{UID_}.slice", **annotations: str) -> api.PodSandbox:
    s = api.PodSandbox(id="sb0", name="web-0", uid=UID, namespace="prod")
    s.linux.cgroup_parent = parent
    s.annotations.update(annotations)
    return s


def _container(
    res: api.LinuxResources | None, *, name: str = "app", linux: bool = True, **annotations: str
) -> api.Container:
    c = api.Container(id="c0", pod_sandbox_id="sb0", name=name)
    if linux:
        c.linux.cgroups_path = f"kubepods-pod{UID_}.slice:cri-containerd:c0"
        if res is not None:
            c.linux.resources.CopyFrom(res)
    c.annotations.update(annotations)
    return c


def test_request_from_resources_full() -> None:
    r = adapter.request_from_resources(_resources(shares=2048, quota=200000, mem=1 << 30))
    assert r == Request(cpu_request_milli=2000, cpu_limit_milli=2000, memory_limit=1 << 30)


def test_request_from_resources_empty() -> None:
    assert adapter.request_from_resources(api.LinuxResources()) == Request()
    assert adapter.request_from_resources(None) == Request()
    # a memory limit of 0 or less is "unlimited"
    assert adapter.request_from_resources(_resources(mem=-1)).memory_limit is None


def test_container_guaranteed_full() -> None:
    res = _resources(shares=2048, quota=200000, mem=1 << 30, cpus="0-15", mems="0-1")
    info = adapter.container_from_nri(_sandbox(), _container(res))
    assert info.id == ContainerID("c0")
    assert info.name == "app"
    assert info.namespace == "prod"
    assert info.qos_class is QoSClass.GUARANTEED
    assert info.request == Request(
        cpu_request_milli=2000, cpu_limit_milli=2000, memory_request=1 << 30,
        memory_limit=1 << 30,
    )
    assert info.current_cpus == CPUSet.parse("0-15")
    assert info.current_mems == CPUSet.parse("0-1")
    assert info.kind is ContainerKind.APP
    assert info.cgroups_path.endswith(":cri-containerd:c0")


def test_container_burstable_has_no_memory_request() -> None:
    res = _resources(shares=512, mem=1 << 30)
    info = adapter.container_from_nri(_sandbox(f"/kubepods/burstable/pod{UID}"), _container(res))
    assert info.qos_class is QoSClass.BURSTABLE
    assert info.request == Request(cpu_request_milli=500, memory_limit=1 << 30)
    assert info.current_cpus is None


@pytest.mark.parametrize(
    ("res", "expected"),
    [
        (_resources(shares=2), QoSClass.BEST_EFFORT),
        (_resources(shares=1024, quota=100000, mem=100 << 20), QoSClass.GUARANTEED),
        (_resources(shares=512, quota=100000, mem=100 << 20), QoSClass.BURSTABLE),
        (_resources(shares=1024, quota=100000), QoSClass.BURSTABLE),
        (_resources(shares=2, mem=100 << 20), QoSClass.BURSTABLE),
    ],
    ids=["besteffort", "guaranteed", "burstable-limit-above", "burstable-no-mem", "mem-only"],
)
def test_qos_fallback_from_resources(res: api.LinuxResources, expected: QoSClass) -> None:
    info = adapter.container_from_nri(_sandbox("/custom/parent"), _container(res))
    assert info.qos_class is expected


def test_effective_annotations_reach_the_policy() -> None:
    sandbox = _sandbox(**{
        "prefer-shared-cpus.resource-policy.nri.io/pod": "true",
        "prefer-shared-cpus.resource-policy.nri.io/container.app": "false",
    })
    info = adapter.container_from_nri(sandbox, _container(_resources(shares=2)))
    assert info.annotation("prefer-shared-cpus.resource-policy.nri.io") == "false"
    other = adapter.container_from_nri(
        sandbox, _container(_resources(shares=2), name="sidecar")
    )
    assert other.annotation("prefer-shared-cpus.resource-policy.nri.io") == "true"


@pytest.mark.parametrize(
    ("annotations", "name", "kind"),
    [
        ({}, "init0", ContainerKind.APP),
        ({adapter.INIT_CONTAINERS_ANNOTATION: "init0, init1"}, "init1", ContainerKind.INIT),
        ({adapter.INIT_CONTAINERS_ANNOTATION: "init0"}, "app", ContainerKind.APP),
        ({adapter.RESOURCE_ANNOTATOR_ANNOTATION:
          '{"initContainers": [{"name": "init0", "cpu": "1"}], "containers": []}'},
         "init0", ContainerKind.INIT),
        ({adapter.RESOURCE_ANNOTATOR_ANNOTATION: '{"initContainers": {"init0": {}}}'},
         "init0", ContainerKind.INIT),
        ({adapter.RESOURCE_ANNOTATOR_ANNOTATION: '{"containers": [{"name": "init0"}]}'},
         "init0", ContainerKind.APP),
        ({adapter.RESOURCE_ANNOTATOR_ANNOTATION: '{"initContainers": null, "containers": []}'},
         "init0", ContainerKind.APP),
    ],
    ids=["unmarked", "listed", "not-listed", "annotator-list", "annotator-map", "annotator-app",
         "annotator-null"],
)
def test_init_container_detection(
    annotations: dict[str, str], name: str, kind: ContainerKind
) -> None:
    info = adapter.container_from_nri(
        _sandbox(**annotations), _container(_resources(shares=2), name=name)
    )
    assert info.kind is kind


@pytest.mark.parametrize(
    "value",
    ["{not json", "[1, 2]", '{"initContainers": 3}', '{"initContainers": [7]}'],
)
def test_garbage_annotator_annotation_is_a_clear_error(value: str) -> None:
    sandbox = _sandbox(**{adapter.RESOURCE_ANNOTATOR_ANNOTATION: value})
    with pytest.raises(
        AnnotationError, match=r"pod prod/web-0 container app: annotation noderesource\.dev"
    ):
        adapter.container_from_nri(sandbox, _container(_resources(shares=2)))


def test_missing_linux_section_is_a_clear_error() -> None:
    with pytest.raises(AdapterError, match=r"pod prod/web-0 container app: expected a linux"):
        adapter.container_from_nri(_sandbox(), _container(None, linux=False))


def test_garbage_cpuset_is_a_clear_error() -> None:
    res = _resources(shares=2, cpus="0-x")
    with pytest.raises(AdapterError, match=r"cpuset\.cpus '0-x' is not a kernel id list"):
        adapter.container_from_nri(_sandbox(), _container(res))


def test_missing_ids_are_clear_errors() -> None:
    with pytest.raises(AdapterError, match="expected a pod sandbox id"):
        adapter.pod_from_nri(api.PodSandbox(name="x", namespace="y"))
    c = _container(_resources(shares=2))
    c.id = ""
    with pytest.raises(AdapterError, match="expected a container id"):
        adapter.container_from_nri(_sandbox(), c)


def test_update_resources_override_the_containers_own() -> None:
    c = _container(_resources(shares=1024, quota=100000, mem=1 << 30, cpus="3"))
    info = adapter.container_from_nri(
        _sandbox(), c, resources=_resources(shares=2048, quota=200000, mem=1 << 30)
    )
    assert info.request.cpu_request_milli == 2000
    assert info.current_cpus == CPUSet.parse("3")  # what runs now, not what is asked


# -- bounds on hostile input (issue 11 items 2 and 3) -----------------------------------

NESTED = "[" * 5000 + "]" * 5000


def test_deeply_nested_annotator_annotation_is_a_clear_error() -> None:
    # json.loads would recurse 5,000 deep and raise RecursionError, which no handler
    # for bad input catches (CreateContainer answered INTERNAL)
    sandbox = _sandbox(**{adapter.RESOURCE_ANNOTATOR_ANNOTATION: NESTED})
    with pytest.raises(AnnotationError) as info:
        adapter.container_from_nri(sandbox, _container(_resources(shares=2)))
    assert str(info.value) == (
        "pod prod/web-0 container app: annotation noderesource.dev/resources: expected "
        "JSON nested at most 32 deep (limits.maxJSONDepth), found 5000"
    )


def test_oversized_annotator_annotation_is_refused_before_parsing() -> None:
    value = '{"initContainers": [' + ",".join(['"x"'] * 1000) + "]}"
    sandbox = _sandbox(**{adapter.RESOURCE_ANNOTATOR_ANNOTATION: value})
    limits = Limits(max_annotation_bytes=1000)
    with pytest.raises(AnnotationError, match=r"expected at most 1000 bytes .*found 4021"):
        adapter.container_from_nri(sandbox, _container(_resources(shares=2)), limits=limits)
    # within the default limits the same value is read
    assert adapter.container_from_nri(sandbox, _container(_resources(shares=2)))


def test_configured_json_depth_is_honoured() -> None:
    value = '{"initContainers": [{"name": "app"}]}'  # depth 3
    sandbox = _sandbox(**{adapter.RESOURCE_ANNOTATOR_ANNOTATION: value})
    info = adapter.container_from_nri(sandbox, _container(_resources(shares=2)))
    assert info.kind is ContainerKind.INIT
    with pytest.raises(AnnotationError, match="nested at most 2 deep"):
        adapter.container_from_nri(
            sandbox, _container(_resources(shares=2)), limits=Limits(max_json_depth=2)
        )


def test_huge_cpuset_range_is_refused_at_once() -> None:
    # was 2-3.7 s and 870 MiB of RSS for one CreateContainer
    res = _resources(shares=2, cpus="0-9999999")
    with counting_calls(limit=5_000, what="reading the container"), pytest.raises(
        AdapterError
    ) as info:
        adapter.container_from_nri(_sandbox(), _container(res))
    text = str(info.value)
    assert text.startswith("pod prod/web-0 container app: cpuset.cpus '0-9999999'")
    assert "limits.maxCPUID=8191" in text and "above 8191" in text


def test_configured_cpu_id_limit_is_honoured() -> None:
    res = _resources(shares=2, cpus="0-15", mems="0")
    assert adapter.container_from_nri(_sandbox(), _container(res)).current_cpus == CPUSet.parse(
        "0-15"
    )
    with pytest.raises(AdapterError, match=r"cpuset\.cpus '0-15' .*maxCPUID=7"):
        adapter.container_from_nri(_sandbox(), _container(res), limits=Limits(max_cpu_id=7))


def test_overlong_cpuset_string_is_refused_before_parsing() -> None:
    text = ",".join(["0-8191"] * 3000)  # 20,999 characters, 24.5 million ids to insert
    with counting_calls(limit=5_000, what="reading the container"), pytest.raises(
        AdapterError,
        match=r"cpuset\.mems: expected at most 16384 characters \(limits\.maxCPUSetLength\), "
        r"found 20999",
    ):
        adapter.container_from_nri(_sandbox(), _container(_resources(shares=2, mems=text)))


def test_devices_and_mounts_are_read_for_the_hints_and_not_kept() -> None:
    c = _container(_resources(shares=1024))
    c.linux.devices.add(path="/dev/dri/card0", type="c", major=226, minor=0)
    c.linux.devices.add(path="/dev/nvme0n1", type="b", major=259, minor=0)
    c.linux.devices.add(path="/dev/fifo", type="p", major=0, minor=0)  # no locality
    c.mounts.add(destination="/data", source="/mnt/fast", options=["rbind", "rw"])
    c.mounts.add(destination="/models", source="/mnt/models", options=["rbind", "ro"])
    c.mounts.add(destination="/proc", type="proc")  # no source: no locality
    # never a hint (`mount_may_hint`), so never a MountRef: a source or a destination
    # under an ignored prefix, as the kubelet's two mounts of every container are
    c.mounts.add(destination="/cfg", source="/etc/app", options=["rbind", "rw"])
    c.mounts.add(destination="/etc/hosts", source="/var/lib/kubelet/pods/u/etc-hosts")
    c.mounts.add(destination="/dev/termination-log", source="/var/lib/kubelet/pods/u/tl")
    devices, mounts = adapter.devices_and_mounts(c)
    assert devices == (
        DeviceRef("/dev/dri/card0", "c", 226, 0),
        DeviceRef("/dev/nvme0n1", "b", 259, 0),
    )
    assert mounts == (
        MountRef("/mnt/fast", "/data", read_only=False),
        MountRef("/mnt/models", "/models", read_only=True),
    )
    info = adapter.container_from_nri(_sandbox(), c)
    assert info.topology_hints == ()  # the shell resolves them (pipeline.resolve_hints)
    # what the pipeline keeps of the container holds neither (rss-1000)
    assert {"devices", "mounts"}.isdisjoint(f.name for f in dataclasses.fields(info))


def test_label_and_annotation_strings_are_held_once_across_pods_and_containers() -> None:
    # each read of a protobuf map makes new str objects; the adapter interns them, so the
    # keys and values a node's pods and containers repeat are one object each (rss-1000)
    first, second = _sandbox(**{"io.kubernetes.cri.sandbox-uid": UID}), _sandbox()
    for s in (first, second):
        s.labels["io.kubernetes.pod.namespace"] = "prod-namespace"
    a, b = adapter.pod_from_nri(first), adapter.pod_from_nri(second)
    assert a.labels == b.labels == {"io.kubernetes.pod.namespace": "prod-namespace"}
    (key_a, value_a), (key_b, value_b) = next(iter(a.labels.items())), next(iter(b.labels.items()))
    assert key_a is key_b and value_a is value_b
    ctr = _container(_resources(shares=2))
    ctr.annotations["io.kubernetes.cri.sandbox-uid"] = UID
    info = adapter.container_from_nri(a, ctr)
    pod_uid = next(v for k, v in a.annotations.items() if k == "io.kubernetes.cri.sandbox-uid")
    ctr_key, ctr_uid = next(iter(info.annotations.items()))
    assert ctr_uid == pod_uid == UID and ctr_uid is pod_uid
    assert ctr_key is next(k for k in a.annotations if k == ctr_key)


def test_the_pods_ids_and_names_are_the_strings_its_labels_hold() -> None:
    # the kubelet repeats the pod's uid, name and namespace and the sandbox id in labels
    # and annotations, and the container's name in its annotations: one object each
    s = _sandbox(**{"io.kubernetes.cri.sandbox-id": "sb0"})
    s.labels.update(
        {
            "io.kubernetes.pod.uid": UID,
            "io.kubernetes.pod.name": "web-0",
            "io.kubernetes.pod.namespace": "prod",
        }
    )
    pod = adapter.pod_from_nri(s)
    assert pod.uid is pod.labels["io.kubernetes.pod.uid"]
    assert pod.name is pod.labels["io.kubernetes.pod.name"]
    assert pod.namespace is pod.labels["io.kubernetes.pod.namespace"]
    assert pod.id is pod.annotations["io.kubernetes.cri.sandbox-id"]
    ctr = _container(_resources(shares=2))
    ctr.annotations["io.kubernetes.cri.container-name"] = "app"
    info = adapter.container_from_nri(pod, ctr)
    assert info.name is info.annotations["io.kubernetes.cri.container-name"]
