"""The kubelet's PodResources API against a fake kubelet on a real unix socket: honest
answers become hints; a missing, wrong or silent socket is a logged condition; a kubelet
that hangs is given up on in bounded time with the event loop running; one that lies is
refused naming the pod, the part, what was expected and what was found."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nri_resmgr.kube.podresources import (
    GRACE,
    Availability,
    DeviceAlloc,
    PodResourcesCache,
    PodResourcesClient,
    PodResourcesError,
    device_hints,
)
from nri_resmgr.model import HintSource, TopologyHint
from nri_resmgr.topology.cpuset import IDSet
from tests.support.logs import CapturedLog
from tests.support.podresources import fake_kubelet, pod_resources, silent_socket

GPU = "vendor.com/gpu"
NIC = "intel.com/sriov_netdevice"
POD = pod_resources(
    "default",
    "trainer",
    {"c0": {GPU: (["gpu-1"], [1])}, "c1": {NIC: (["0000:3b:00.0"], [])}, "c2": {}},
)
UNAVAILABLE = (
    "kubelet pod-resources socket unavailable: containers get no device hints from the "
    "kubelet until it answers"
)


@pytest.fixture
def sock(tmp_path: Path) -> Iterator[Path]:
    # a unix socket path is limited to 107 bytes: pytest's tmp_path can be longer
    short = Path(f"/tmp/podres-{os.getpid()}-{id(tmp_path)}")
    short.mkdir()
    try:
        yield short / "kubelet.sock"
    finally:
        for p in short.iterdir():
            p.unlink()
        short.rmdir()


def client(sock: Path, log: CapturedLog | None = None, timeout: float = 1.0) -> PodResourcesClient:
    return PodResourcesClient(
        sock, get_timeout=timeout, list_timeout=timeout, log=(log or CapturedLog()).log
    )


def pci_tree(root: Path) -> None:
    """sysfs with PCI function 0000:3b:00.0 local to CPUs 2-3 on node 1."""
    dev = root / "sys" / "devices" / "pci0000:3a" / "0000:3b:00.0"
    dev.mkdir(parents=True)
    (dev / "local_cpulist").write_text("2-3\n")
    (dev / "numa_node").write_text("1\n")
    (root / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
    (root / "sys" / "bus" / "pci" / "devices" / "0000:3b:00.0").symlink_to(dev)


def test_get_gives_each_containers_devices(sock: Path) -> None:
    with fake_kubelet(sock, [POD]) as calls:
        got = asyncio.run(client(sock).get("default", "trainer"))
    assert calls == ["Get"]
    assert got == {
        "c0": (DeviceAlloc(GPU, ("gpu-1",), IDSet([1])),),
        "c1": (DeviceAlloc(NIC, ("0000:3b:00.0",), IDSet()),),
        "c2": (),
    }


def test_list_gives_every_pod_and_an_unknown_pod_is_none(sock: Path) -> None:
    other = pod_resources("kube-system", "dns", {"dns": {}})
    c = client(sock)
    with fake_kubelet(sock, [POD, other]) as calls:
        listed = asyncio.run(c.list())
        unknown = asyncio.run(c.get("default", "nobody"))
    assert calls == ["List", "Get"]
    assert listed is not None and sorted(listed) == [("default", "trainer"), ("kube-system", "dns")]
    assert listed[("kube-system", "dns")] == {"dns": ()}
    assert unknown is None
    assert c.availability is Availability.OK


def test_hints_from_kubelet_nodes_and_pci_sysfs(tmp_path: Path) -> None:
    pci_tree(tmp_path)
    devices = [
        DeviceAlloc(GPU, ("gpu-1",), IDSet([1])),
        DeviceAlloc(NIC, ("0000:3b:00.0", "not-a-pci-address"), IDSet()),
        DeviceAlloc("example.com/nothing", ("x",), IDSet()),  # no locality: no hint
    ]
    assert device_hints(devices, sys_root=tmp_path) == (
        TopologyHint("podresourceapi:" + GPU, HintSource.POD_RESOURCES, IDSet(), IDSet([1])),
        TopologyHint("podresourceapi:" + NIC, HintSource.POD_RESOURCES, IDSet([2, 3]), IDSet([1])),
    )
    # without sysfs only the kubelet's nodes count
    assert [h.provider for h in device_hints(devices, sys_root=None)] == ["podresourceapi:" + GPU]


@pytest.mark.parametrize("kind", ["missing", "file", "silent"])
def test_unavailable_socket_is_a_logged_condition(sock: Path, kind: str) -> None:
    log = CapturedLog()
    c = client(sock, log, timeout=0.3)
    if kind == "file":
        sock.write_text("")

    async def twice() -> list[object]:
        return [await c.get("default", "trainer"), await c.get("default", "trainer")]

    if kind == "silent":
        with silent_socket(sock), pytest.raises(PodResourcesError, match=r"within 0\.3 s"):
            asyncio.run(twice())
        state = Availability.NOT_ANSWERING
    else:
        assert asyncio.run(twice()) == [None, None]
        state = {"missing": Availability.MISSING, "file": Availability.NOT_A_SOCKET}[kind]
    assert c.availability is state
    # logged once, when it changed, naming the socket and why
    assert [(e["socket"], e["state"]) for e in log.events(UNAVAILABLE)] == [(str(sock), state)]


def test_a_hanging_kubelet_is_given_up_on_and_the_loop_runs(sock: Path) -> None:
    c = client(sock, timeout=0.5)

    async def call_and_tick() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        t = asyncio.create_task(ticker())
        with pytest.raises(
            PodResourcesError,
            match=rf"^kubelet pod-resources socket {sock}: Get: expected a reply within "
            r"0.5 s; found none$",
        ):
            await c.get("default", "trainer")
        t.cancel()
        return ticks

    with fake_kubelet(sock, [POD], behaviour="hang"):
        ticks = asyncio.run(call_and_tick())
    assert ticks >= 5  # the loop kept running while the kubelet hung
    assert c.availability is Availability.NOT_ANSWERING
    assert GRACE > 0


@pytest.mark.parametrize(
    ("pod", "behaviour", "message"),
    [
        (
            pod_resources("default", "other", {}),
            "other-pod",
            r"for pod default/trainer: expected that pod; found pod 'default'/'other'$",
        ),
        (
            pod_resources("default", "trainer", {"c0": {GPU: (["g"], [-1])}}),
            "honest",
            r"container 'c0': resource vendor.com/gpu: expected NUMA node ids 0-4095; "
            r"found \[-1\]$",
        ),
        (
            pod_resources("default", "trainer", {"c0": {"../../etc": (["g"], [0])}}),
            "honest",
            r"container 'c0': expected a resource name \(\[domain/\]name\); found '\.\./\.\./etc'$",
        ),
        (
            pod_resources(
                "default", "trainer", {"c0": {GPU: ([str(i) for i in range(5000)], [0])}}
            ),
            "honest",
            r"container 'c0': resource vendor.com/gpu: expected at most 4096 device ids; "
            r"found 5000$",
        ),
        (
            POD,
            "fail",
            r"Get: expected a reply; found status StatusCode.INTERNAL: "
            r"'device manager checkpoint corrupt'$",
        ),
    ],
    ids=["other-pod", "negative-node", "bad-name", "too-many-ids", "fails"],
)
def test_a_kubelet_that_lies_or_fails_is_refused(
    sock: Path, pod: object, behaviour: str, message: str
) -> None:
    with (
        fake_kubelet(sock, [pod], behaviour=behaviour),  # type: ignore[list-item]
        pytest.raises(PodResourcesError, match=message),
    ):
        asyncio.run(client(sock).get("default", "trainer"))


def test_cache_asks_at_sandbox_and_answers_at_create(sock: Path, tmp_path: Path) -> None:
    pci_tree(tmp_path)
    log = CapturedLog()
    cache = PodResourcesCache(client(sock, log), sys_root=tmp_path)

    async def events() -> tuple[object, ...]:
        cache.prefetch("default", "trainer")
        c0 = await cache.hints("default", "trainer", "c0")
        c1 = await cache.hints("default", "trainer", "c1")
        c2 = await cache.hints("default", "trainer", "c2")
        cache.forget("default", "trainer")
        return c0, c1, c2

    with fake_kubelet(sock, [POD]) as calls:
        c0, c1, c2 = asyncio.run(events())
    assert calls == ["Get"]  # one question per pod
    assert [h.nodes for h in c0] == [IDSet([1])]  # type: ignore[attr-defined]
    assert [h.cpus for h in c1] == [IDSet([2, 3])]  # type: ignore[attr-defined]
    assert c2 == ()


def test_cache_filled_by_list_and_failures_give_no_hints(sock: Path) -> None:
    log = CapturedLog()
    cache = PodResourcesCache(client(sock, log), sys_root=None)

    async def synchronized() -> object:
        await cache.refresh()
        return await cache.hints("default", "trainer", "c0")

    with fake_kubelet(sock, [POD]) as calls:
        assert [h.provider for h in asyncio.run(synchronized())] == ["podresourceapi:" + GPU]  # type: ignore[attr-defined]
    assert calls == ["List"]
    with fake_kubelet(sock, [POD], behaviour="fail"):
        assert (
            asyncio.run(
                PodResourcesCache(client(sock, log), sys_root=None).hints(
                    "default", "trainer", "c0"
                )
            )
            == ()
        )
    assert log.events("pod devices from the kubelet not used")[0]["error"].endswith(
        "'device manager checkpoint corrupt'"
    )
