"""Hostile pods and containers through the adapter, the pipeline and the daemon.

Every annotation key the daemon reads (in its plain, ``/pod`` and ``/container.NAME``
forms), every cpuset and every resource number of a container is drawn from
`tests.support.hostile`: deep and unbalanced JSON, oversized values, huge integers, unicode
digits, out-of-range cpusets, negative and 2**64 numbers.  Each case must end in an
answer or a clean error (`ResmgrError` in-process, an RPC status that is not INTERNAL on
the wire), never another exception; afterwards the daemon still places a valid request
exactly.  The number of cases and the seed come from NRI_RESMGR_FUZZ_CASES /
NRI_RESMGR_FUZZ_SEED (see docs/fuzzing.md).
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
import traceback
from pathlib import Path

from nri_api import api
from nri_api.errors import RPCError, StatusCode
from nri_api.stub import OnClose
from nri_api.testing import FakeRuntime
from nri_resmgr.config import config_from_mapping
from nri_resmgr.control.resctrl import parse_pod_resctrl
from nri_resmgr.control.synthetic import INTEL_SKX, make_resctrl_tree
from nri_resmgr.model import ResmgrError
from nri_resmgr.policy.topology_aware.affinity import AFFINITY, container_affinities
from nri_resmgr.policy.topology_aware.hints import TEST_HINTS, container_hints
from nri_resmgr.runtime.assembly import build_pipeline
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.topology.synthetic import build_topology
from tests.support.builders import ctr
from tests.support.daemon import resmgr_plugin, serve_daemon, stop_daemon
from tests.support.hostile import (
    fuzz_cases,
    fuzz_seed,
    hostile_container,
    hostile_pod,
    hostile_resources,
    hostile_sysfs,
    hostile_text,
    hostile_yaml,
    reader_work_bound,
)
from tests.support.work import counting_calls

SPEC = {"packages": 1, "dies": 1, "nodes": 2, "cores": 4, "threads": 2, "memory": "4G"}
CLASSES = {
    "control": {
        "rdt": {
            "enable": True,
            "partitions": {
                "all": {"l3Allocation": "100%", "classes": {"gold": {"l3Allocation": "50-100%"}}}
            },
        },
        "blockio": {"enable": True, "runtimeClasses": True, "classes": {"slow": {}}},
    },
}
#: the initial Synchronize of the daemon test is kept under 4 MiB, ttrpc's message limit
SYNC_BYTES = 3 << 20
POLICIES = (
    {"policy": "static", "policyConfig": {"reservedSystemCPUs": "0"}},
    {
        "policy": "topology-aware",
        "policyConfig": {
            "reservedResources": {"cpu": "750m"},
            "colocatePods": True,
            "colocateNamespaces": True,
            "defaultCPUPriority": "normal",
            "schedulingClasses": [
                {"name": "idle", "policy": "idle", "ioClass": "be", "ioPriority": 6},
                {"name": "rt", "policy": "fifo", "priority": 10},
            ],
            "namespaceSchedulingClasses": {"fuzz": "idle"},
            "podQoSSchedulingClasses": {"BestEffort": "idle"},
        },
    },
)


def _pipelines(base: Path) -> list[Pipeline]:
    """One pipeline per policy, RDT groups on a synthetic resctrl tree under `base`,
    devices and mounts resolved under a hostile sysfs (`hostile_sysfs`)."""
    topology = build_topology(SPEC)
    sysfs = base / "sysfs"
    hostile_sysfs(sysfs)
    out = []
    for i, policy in enumerate(POLICIES):
        root = base / f"resctrl{i}"
        make_resctrl_tree(root, INTEL_SKX)
        out.append(
            build_pipeline(
                config_from_mapping({**policy, **CLASSES}),
                topology=topology,
                resctrl_root=str(root),
                state_dir=str(base / f"state{i}"),
                sysfs_root=str(sysfs),
            )
        )
    return out


def _one_case(pipeline: Pipeline, rng: random.Random, index: int) -> None:
    """One hostile event (or Synchronize) on `pipeline`.

    An event may fail with a `ResmgrError` (a clean error for that request); a Synchronize
    must not fail at all: one container's input never fails the whole of it.
    """
    pod = hostile_pod(rng, index)
    ctr = hostile_container(rng, pod, index)
    step = rng.randrange(6)
    if step == 2:
        pods = [hostile_pod(rng, index * 10 + i) for i in range(3)]
        containers = [hostile_container(rng, p, index * 10 + i) for i, p in enumerate(pods)]
        pipeline.synchronize(pods, containers)
        return
    try:
        if step == 0:
            pipeline.run_pod(pod)
        elif step == 1:
            pipeline.update(pod, ctr, hostile_resources(rng))
        elif step == 3:
            pipeline.stop(pod, ctr)
        else:
            pipeline.create(pod, ctr)
    except ResmgrError:
        pass


def test_hostile_pods_through_the_adapter_and_pipeline(tmp_path: Path) -> None:
    seed, cases = fuzz_seed(), fuzz_cases(1500)
    failures: list[str] = []
    pipelines = _pipelines(tmp_path)
    for index in range(cases):
        rng = random.Random(f"{seed}/{index}")
        pipeline = pipelines[index % len(pipelines)]
        try:
            _one_case(pipeline, rng, index)
        except Exception as exc:  # anything else is a finding
            failures.append(
                f"seed {seed} case {index}: {type(exc).__name__}: {str(exc)[:200]}\n"
                + "".join(traceback.format_tb(exc.__traceback__)[-3:])
            )
    assert not failures, f"{len(failures)} of {cases} cases raised:\n" + "\n".join(failures[:5])


def test_hostile_koordinator_resctrl_annotations_parse_or_fail_cleanly() -> None:
    seed, cases = fuzz_seed(), fuzz_cases(1500)
    failures: list[str] = []
    for index in range(cases):
        rng = random.Random(f"{seed}/resctrl/{index}")
        text = hostile_text(rng)
        try:
            parse_pod_resctrl(text, subject="pod fuzz/p: annotation node.koordinator.sh/resctrl")
        except ResmgrError:
            pass
        except Exception as exc:
            failures.append(f"seed {seed} case {index}: {type(exc).__name__}: {exc!r:.200}")
    assert not failures, f"{len(failures)} of {cases} cases raised:\n" + "\n".join(failures[:5])


def test_hostile_yaml_annotations_parse_or_fail_cleanly() -> None:
    """The affinity and test-hint readers alone, on `hostile_yaml` values: rules and
    hints or an `AnnotationError`, each within `reader_work_bound` calls (a work bound,
    linear in the value's size and the same at any load: `tests.support.work`)."""
    seed, cases = fuzz_seed(), fuzz_cases(1500) // 3 or 1
    topology = build_topology(SPEC)
    failures: list[str] = []
    for index in range(cases):
        rng = random.Random(f"{seed}/yaml/{index}")
        text = hostile_yaml(rng)
        c = ctr("c", pod="p", milli=1000, ann={AFFINITY: text, TEST_HINTS: text})
        for what in ("affinity", "hints"):
            where = f"seed {seed} case {index} {what} ({len(text)} characters)"
            with counting_calls(limit=reader_work_bound(text), what=where):
                try:
                    if what == "affinity":
                        container_affinities(c, colocate_pods=True, colocate_namespaces=False)
                    else:
                        container_hints(c, topology)
                except ResmgrError as exc:
                    if len(str(exc)) > 2000:
                        failures.append(
                            f"seed {seed} case {index} {what}: {len(str(exc))}-char error"
                        )
                except Exception as exc:
                    failures.append(
                        f"seed {seed} case {index} {what}: {type(exc).__name__}: {exc!r:.200}"
                    )
    assert not failures, f"{len(failures)} of {cases} cases failed:\n" + "\n".join(failures[:5])


def _guaranteed(pod: api.PodSandbox, name: str) -> api.Container:
    c = api.Container(
        id=f"{pod.name}-{name}",
        pod_sandbox_id=pod.id,
        name=name,
        state=api.ContainerState.CONTAINER_CREATED,
    )
    c.linux.cgroups_path = f"{pod.linux.cgroup_parent}:cri-containerd:{c.id}"
    r = c.linux.resources
    r.cpu.shares.value = 2048
    r.cpu.shares.SetInParent()
    r.cpu.quota.value = 200_000
    r.cpu.quota.SetInParent()
    r.cpu.period.value = 100_000
    r.cpu.period.SetInParent()
    r.memory.limit.value = 1 << 28
    r.memory.limit.SetInParent()
    return c


def test_hostile_pods_through_the_daemon() -> None:
    """The in-process daemon with RDT on (synthetic resctrl tree) over a real socket."""
    seed, cases = fuzz_seed(), fuzz_cases(300) // 2 or 1
    base = Path(tempfile.mkdtemp(prefix="nri-fz-", dir="/tmp"))
    root, state, sock = base / "resctrl", base / "state", str(base / "nri.sock")
    make_resctrl_tree(root, INTEL_SKX)
    config = config_from_mapping({**POLICIES[0], **CLASSES})
    topology = build_topology({**SPEC, "nodes": 1})  # CPUs 0-7, n and n+4 siblings
    findings: list[str] = []

    def check(index: int, what: str, exc: BaseException) -> None:
        if isinstance(exc, RPCError) and exc.code is not StatusCode.INTERNAL:
            return
        findings.append(f"seed {seed} case {index} {what}: {type(exc).__name__}: {exc!s:.200}")

    async def scenario() -> None:
        rng0 = random.Random(f"{seed}/sync")
        pods: list[api.PodSandbox] = []
        containers: list[api.Container] = []
        size = 0
        for i in range(20):  # as many as fit one ttrpc message (the fake runtime's limit)
            p = hostile_pod(rng0, i)
            c = hostile_container(rng0, p, i)
            if size + p.ByteSize() + c.ByteSize() < SYNC_BYTES:
                pods.append(p)
                containers.append(c)
                size += p.ByteSize() + c.ByteSize()
        rt = FakeRuntime(pods=pods, containers=containers)
        plugin = resmgr_plugin(
            config,
            topology,
            resctrl_root=str(root),
            state_dir=str(state),
            socket_path=sock,
            on_close=OnClose.EXIT,
        )
        task = await serve_daemon(rt, sock, plugin)
        try:
            await rt.wait_ready()  # a Synchronize full of hostile containers went through
            for index in range(cases):
                rng = random.Random(f"{seed}/daemon/{index}")
                pod = hostile_pod(rng, 1000 + index)
                ctr = hostile_container(rng, pod, 1000 + index)
                for what, call in (
                    ("RunPodSandbox", rt.run_pod_sandbox(pod)),
                    ("CreateContainer", rt.create_container(pod, ctr)),
                ):
                    try:
                        await call
                    except Exception as exc:
                        check(index, what, exc)
            # the daemon still places a valid request exactly, on a clean state
            rt.pods, rt.containers = [], []
            await rt.synchronize([], [])
            ok = api.PodSandbox(id="sb-ok", name="ok", uid="u-ok", namespace="default")
            ok.linux.cgroup_parent = "kubepods-podu_ok.slice"
            first = await rt.create_container(ok, _guaranteed(ok, "a"))
            second = await rt.create_container(ok, _guaranteed(ok, "b"))
            assert first.adjust.linux.resources.cpu.cpus == "1,5"
            assert second.adjust.linux.resources.cpu.cpus == "2,6"
            assert plugin.health.ready
        finally:
            await stop_daemon(rt, plugin, task)

    try:
        asyncio.run(asyncio.wait_for(scenario(), 120))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert not findings, f"{len(findings)} findings:\n" + "\n".join(findings[:10])
