"""QoS classes of pods that no kubelet made (issue 10 item 12).

nerdctl, ``ctr`` and other orchestrators put a sandbox under a cgroup parent that is not
a kubelet pod cgroup (``/default``, ``""``, ``system.slice``).  The pipeline remembers the
pod at RunPodSandbox, before any container exists, so a class fixed there is fixed "from
nothing" (BestEffort).  Each container's class must come from its own resources instead.
"""

from __future__ import annotations

import pytest

from nri_api import api
from nri_resmgr.model import ContainerID, CPUKind, QoSClass, Request
from nri_resmgr.policy.static import StaticPolicy
from nri_resmgr.runtime import adapter
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.simulator.kubelet import container_resources
from nri_resmgr.simulator.scenario import ContainerSpec, Resources
from nri_resmgr.topology.cpuset import CPUSet
from nri_resmgr.topology.synthetic import build_topology
from tests.support.logs import QUIET

UID = "0c8f2d7e-1b9a-4c1e-9f0a-3d2b1a0c9e8f"


def _sandbox(parent: str, *, sid: str = "sb0") -> api.PodSandbox:
    s = api.PodSandbox(id=sid, name="web", uid=UID, namespace="default")
    s.linux.cgroup_parent = parent
    return s


def _resources(cpu: str | None, memory: str | None = "256Mi") -> api.LinuxResources:
    limits = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return container_resources(
        ContainerSpec(name="x", requests=Resources(**limits), limits=Resources(**limits))
    )


def _container(res: api.LinuxResources, *, cid: str, name: str, sid: str = "sb0") -> api.Container:
    c = api.Container(id=cid, pod_sandbox_id=sid, name=name)
    c.state = api.ContainerState.CONTAINER_RUNNING
    c.linux.cgroups_path = f"/default/{cid}"
    c.linux.resources.CopyFrom(res)
    return c


def _best_effort() -> api.LinuxResources:
    res = api.LinuxResources()
    res.cpu.shares.value = 2
    res.cpu.shares.SetInParent()
    return res


NON_KUBELET_PARENTS = ["/default", "", "system.slice", "/nerdctl/abc"]


@pytest.mark.parametrize(
    "parent", NON_KUBELET_PARENTS, ids=["default", "empty", "slice", "nerdctl"]
)
def test_container_class_is_its_own_when_the_pod_was_remembered_first(parent: str) -> None:
    # RunPodSandbox: nothing to estimate from, the pod value says BestEffort
    pod = adapter.pod_from_nri(_sandbox(parent))
    assert pod.qos_class is QoSClass.BEST_EFFORT
    assert not adapter.pod_qos_is_known(pod)
    info = adapter.container_from_nri(pod, _container(_resources("2"), cid="c1", name="db"))
    assert info.qos_class is QoSClass.GUARANTEED
    # and the Guaranteed memory request follows from it, as for a kubelet pod
    assert info.request == Request(
        cpu_request_milli=2000,
        cpu_limit_milli=2000,
        memory_request=256 << 20,
        memory_limit=256 << 20,
    )


def test_each_container_of_one_foreign_pod_has_its_own_class() -> None:
    pod = adapter.pod_from_nri(_sandbox("/default"))
    guaranteed = adapter.container_from_nri(pod, _container(_resources("1"), cid="c1", name="a"))
    best = adapter.container_from_nri(pod, _container(_best_effort(), cid="c2", name="b"))
    burstable = adapter.container_from_nri(pod, _container(_resources(None), cid="c3", name="c"))
    assert [guaranteed.qos_class, best.qos_class, burstable.qos_class] == [
        QoSClass.GUARANTEED,
        QoSClass.BEST_EFFORT,
        QoSClass.BURSTABLE,
    ]
    # the pod value itself is untouched (pod-level use), only the container's view differs
    assert pod.qos_class is QoSClass.BEST_EFFORT


def test_the_class_follows_a_resize_of_a_foreign_container() -> None:
    pod = adapter.pod_from_nri(_sandbox("/default"))
    first = adapter.container_from_nri(pod, _container(_resources("2"), cid="c1", name="a"))
    # UpdateContainer passes the remembered pod of the container and the new resources
    resized = adapter.container_from_nri(
        first.pod,
        _container(_resources("2"), cid="c1", name="a"),
        resources=_resources("2", memory=None),
    )
    assert resized.qos_class is QoSClass.BURSTABLE


def test_a_kubelet_pod_keeps_its_class_from_the_cgroup_parent() -> None:
    # Kubernetes' rule: the pod's class, not the container's shape, decides
    pod = adapter.pod_from_nri(_sandbox(f"/kubepods/burstable/pod{UID}"))
    assert adapter.pod_qos_is_known(pod)
    info = adapter.container_from_nri(pod, _container(_resources("2"), cid="c1", name="a"))
    assert info.qos_class is QoSClass.BURSTABLE
    assert info.request.memory_request is None


@pytest.mark.parametrize(
    "parent", NON_KUBELET_PARENTS, ids=["default", "empty", "slice", "nerdctl"]
)
def test_static_policy_gives_a_foreign_guaranteed_container_exclusive_cpus(parent: str) -> None:
    """The whole path: RunPodSandbox first, then CreateContainer through the pipeline."""
    topo = build_topology({"packages": 1, "nodes": 1, "cores": 4, "threads": 1})
    pipe = Pipeline(StaticPolicy(topology=topo, config={"reservedSystemCPUs": "0"}), log=QUIET)
    sandbox = _sandbox(parent)
    pipe.run_pod(sandbox)
    adjust, _ = pipe.create(sandbox, _container(_resources("2"), cid="c1", name="db"))
    cpus = CPUSet.parse(adjust.linux.resources.cpu.cpus)
    assert len(cpus) == 2
    assert pipe.assignments[ContainerID("c1")].kind is CPUKind.EXCLUSIVE
    # a BestEffort sibling in the same pod stays shared, away from those CPUs
    adjust2, _ = pipe.create(sandbox, _container(_best_effort(), cid="c2", name="side"))
    assert not cpus & CPUSet.parse(adjust2.linux.resources.cpu.cpus)
