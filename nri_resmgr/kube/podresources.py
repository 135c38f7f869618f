"""The kubelet's PodResources API: which devices the kubelet gave a container, and where.

Theory of operation
-------------------
The kubelet serves gRPC ``v1.PodResourcesLister`` (``List``, ``Get``) on a unix socket
under its root directory (``/var/lib/kubelet/pod-resources/kubelet.sock`` by default).
For every container it names the devices its device manager allocated: the resource
(``vendor.com/gpu``), the device plugin's ids and, when the plugin said so, their NUMA
nodes.  nri-plugins reads it (``pkg/agent/podresapi``) for topology hints and for the
balloons policy's ``preferCloseToDevices: podresourceapi:NAME``; so does this module:

- `PodResourcesClient` makes one call at a time per worker thread, each with a gRPC
  deadline (`timeout`), and the awaiting coroutine gives up a little later still, so the
  event loop never waits on the kubelet.  A socket that is missing, not a socket, not
  readable or not answering is a *condition*, logged when it changes (`Availability`),
  not an error: the containers just get no hints from the kubelet.  A kubelet that does
  not know the pod (``NOT_FOUND``) is no pod devices.
- Whatever comes back is checked before it is used (`pod_devices`): the pod named must be
  the one asked for, names must be resource names, NUMA ids non-negative and below
  `MAX_NODE_ID`, every count bounded.  A reply that fails is refused whole with a
  `PodResourcesError` naming the pod, the part, what was expected and what was found.
- `device_hints` turns a container's devices into `TopologyHint`\\ s with provider
  ``podresourceapi:<resource>`` (`HintSource.POD_RESOURCES`): the kubelet's NUMA nodes,
  and, for a device id that is a PCI address this machine has, its sysfs locality
  (``local_cpulist``, ``numa_node``; `topology.devices.pci_hints`).  Topology-aware
  places by them (``topologyhints`` ``pod-resources``), balloons matches them against
  ``preferCloseToDevices: podresourceapi:PATTERN``.
- `PodResourcesCache` asks at RunPodSandbox (the kubelet allocated the devices when it
  admitted the pod), awaits the answer at CreateContainer (bounded by the call's own
  deadline), fills from one ``List`` at Synchronize, and forgets at RemovePodSandbox.
"""

from __future__ import annotations

import asyncio
import enum
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from nri_resmgr.kube._pb import podresources_pb2 as pb
from nri_resmgr.model import HintSource, ResmgrError, TopologyHint
from nri_resmgr.ops.logs import EventLog, get_logger
from nri_resmgr.topology.cpuset import IDSet, union
from nri_resmgr.topology.devices import pci_hints

__all__ = [
    "DEFAULT_SOCKET",
    "POD_RESOURCE_PREFIX",
    "Availability",
    "DeviceAlloc",
    "PodResourcesCache",
    "PodResourcesClient",
    "PodResourcesError",
    "device_hints",
    "pod_devices",
]

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
#: a hint's provider is this and the resource name (nri-plugins' ``HintProvider``)
POD_RESOURCE_PREFIX = "podresourceapi:"
SERVICE = "/v1.PodResourcesLister"
#: their deadlines: List at Synchronize 2 s, Get per pod 1 s (pkg/resmgr/nri.go)
LIST_TIMEOUT = 2.0
GET_TIMEOUT = 1.0
#: the awaiting coroutine waits this much longer than the gRPC deadline
GRACE = 0.5
#: bounds on a reply: bigger is not a kubelet's answer about one node
MAX_REPLY_BYTES = 16 << 20
MAX_PODS = 10_000
MAX_CONTAINERS = 1_000
MAX_DEVICES = 1_000
MAX_IDS = 4_096
MAX_NODE_ID = 4_096
#: a resource name as the kubelet accepts one (``[domain/]name``, at most 253 + 63)
_RESOURCE_NAME = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,252}(/[A-Za-z0-9][-A-Za-z0-9_.]{0,62})?")
#: the kubelet's error text for a pod it does not know (pkg/kubelet/apis/podresources)
_NOT_FOUND = re.compile(r"pod \S+ in namespace \S+ not found")
#: pods whose answer is kept or awaited at once; beyond it the oldest goes
MAX_CACHED = 4_096


class PodResourcesError(ResmgrError):
    """The kubelet's PodResources answer is unusable (it hangs, fails or lies)."""


class Availability(enum.StrEnum):
    """What the last look at the socket found."""

    UNKNOWN = "unknown"
    OK = "ok"
    MISSING = "missing"
    NOT_A_SOCKET = "not a socket"
    UNREADABLE = "unreadable"
    NOT_ANSWERING = "not answering"


@dataclass(frozen=True, slots=True)
class DeviceAlloc:
    """One ``ContainerDevices`` entry: a resource's devices given to a container."""

    resource: str
    ids: tuple[str, ...]
    nodes: IDSet


M = TypeVar("M", bound=Message)


def _shown(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _container_devices(where: str, c: Any) -> tuple[DeviceAlloc, ...]:
    if len(c.devices) > MAX_DEVICES:
        raise PodResourcesError(
            f"{where}: expected at most {MAX_DEVICES} device entries; found {len(c.devices)}"
        )
    out = []
    for d in c.devices:
        name = d.resource_name
        if not _RESOURCE_NAME.fullmatch(name):
            raise PodResourcesError(
                f"{where}: expected a resource name ([domain/]name); found {_shown(name)}"
            )
        if len(d.device_ids) > MAX_IDS:
            raise PodResourcesError(
                f"{where}: resource {name}: expected at most {MAX_IDS} device ids; "
                f"found {len(d.device_ids)}"
            )
        ids = tuple(str(i)[:256] for i in d.device_ids)
        raw = [n.ID for n in d.topology.nodes]
        bad = [n for n in raw if not 0 <= n < MAX_NODE_ID]
        if bad:
            raise PodResourcesError(
                f"{where}: resource {name}: expected NUMA node ids 0-{MAX_NODE_ID - 1}; "
                f"found {bad[:8]}"
            )
        out.append(DeviceAlloc(resource=name, ids=ids, nodes=IDSet(raw)))
    return tuple(out)


def pod_devices(reply: Any, namespace: str, name: str) -> dict[str, tuple[DeviceAlloc, ...]]:
    """The devices of each container of the pod `reply` (a ``PodResources``) describes,
    checked to be about pod `namespace`/`name` and sane (module docstring)."""
    pod = f"kubelet pod-resources reply for pod {namespace}/{name}"
    if (reply.namespace, reply.name) != (namespace, name):
        raise PodResourcesError(
            f"{pod}: expected that pod; found pod "
            f"{_shown(reply.namespace, 64)}/{_shown(reply.name, 64)}"
        )
    if len(reply.containers) > MAX_CONTAINERS:
        raise PodResourcesError(
            f"{pod}: expected at most {MAX_CONTAINERS} containers; found {len(reply.containers)}"
        )
    out: dict[str, tuple[DeviceAlloc, ...]] = {}
    for c in reply.containers:
        where = f"{pod}: container {_shown(c.name, 64)}"
        if c.name in out:
            raise PodResourcesError(f"{where}: expected each container once; found it twice")
        out[c.name] = _container_devices(where, c)
    return out


def device_hints(
    devices: Iterable[DeviceAlloc], *, sys_root: str | os.PathLike[str] | None
) -> tuple[TopologyHint, ...]:
    """One hint per resource of `devices`: the kubelet's NUMA nodes and, with `sys_root`,
    the sysfs locality of each id that is a PCI address there; none for a resource that
    has neither."""
    nodes: dict[str, list[IDSet]] = {}
    cpus: dict[str, list[IDSet]] = {}
    for d in devices:
        nodes.setdefault(d.resource, []).append(d.nodes)
        cpus.setdefault(d.resource, [])
        if sys_root is None:
            continue
        for dev_id in d.ids:
            for h in pci_hints(Path(sys_root), dev_id, source=HintSource.POD_RESOURCES):
                cpus[d.resource].append(h.cpus)
                nodes[d.resource].append(h.nodes)
    out = []
    for resource in nodes:
        hint = TopologyHint(
            provider=POD_RESOURCE_PREFIX + resource,
            source=HintSource.POD_RESOURCES,
            cpus=union(cpus[resource]),
            nodes=union(nodes[resource]),
        )
        if hint.cpus or hint.nodes:
            out.append(hint)
    return tuple(out)


class PodResourcesClient:
    """Calls to the kubelet's PodResources socket at `path`, off the event loop."""

    def __init__(
        self,
        path: str | os.PathLike[str] = DEFAULT_SOCKET,
        *,
        list_timeout: float = LIST_TIMEOUT,
        get_timeout: float = GET_TIMEOUT,
        log: EventLog | None = None,
    ) -> None:
        self.path = Path(path).absolute()
        self.list_timeout = list_timeout
        self.get_timeout = get_timeout
        self.log: EventLog = log if log is not None else get_logger("podresources")
        self.availability = Availability.UNKNOWN
        # two workers: a kubelet that hangs holds a call no longer than its deadline
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="podresources")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _note(self, now: Availability, reason: str = "") -> None:
        if now is self.availability:
            return
        self.availability = now
        if now is Availability.OK:
            self.log.info("kubelet pod-resources socket answers", socket=str(self.path))
        else:
            self.log.warning(
                "kubelet pod-resources socket unavailable: containers get no device "
                "hints from the kubelet until it answers",
                socket=str(self.path),
                state=str(now),
                reason=reason,
            )

    def _usable(self) -> bool:
        try:
            mode = os.stat(self.path).st_mode
        except FileNotFoundError:
            self._note(Availability.MISSING, "no such file")
            return False
        except OSError as exc:
            self._note(Availability.UNREADABLE, str(exc))
            return False
        if not stat.S_ISSOCK(mode):
            self._note(Availability.NOT_A_SOCKET, f"mode {stat.filemode(mode)}")
            return False
        if not os.access(self.path, os.R_OK | os.W_OK):
            self._note(Availability.UNREADABLE, "no read and write permission")
            return False
        return True

    def _call(self, method: str, request: Message, reply: type[M], timeout: float) -> M:
        """One unary call (in a worker thread), its deadline `timeout`."""
        options = [
            ("grpc.max_receive_message_length", MAX_REPLY_BYTES),
            ("grpc.enable_retries", 0),
        ]
        with grpc.insecure_channel(f"unix://{self.path}", options=options) as channel:
            call: Callable[..., M] = channel.unary_unary(
                f"{SERVICE}/{method}",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=reply.FromString,
            )
            return call(request, timeout=timeout)

    async def _ask(self, method: str, request: Message, reply: type[M], timeout: float) -> M | None:
        """The reply of `method`; None when the socket is unavailable or the kubelet
        does not know the pod; PodResourcesError when it fails or takes too long."""
        if not self._usable():
            return None
        loop = asyncio.get_running_loop()
        what = f"kubelet pod-resources socket {self.path}: {method}"
        work = loop.run_in_executor(self._pool, self._call, method, request, reply, timeout)
        try:
            got = await asyncio.wait_for(work, timeout + GRACE)
        except TimeoutError:
            self._note(Availability.NOT_ANSWERING, f"{method} took over {timeout + GRACE} s")
            raise PodResourcesError(
                f"{what}: expected a reply within {timeout + GRACE:g} s; found none"
            ) from None
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            detail = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            # the kubelet (v1.34) answers an unknown pod with UNKNOWN "pod NAME in
            # namespace NS not found" (its Get returns a plain error), not NOT_FOUND
            if code is grpc.StatusCode.NOT_FOUND or (
                code is grpc.StatusCode.UNKNOWN and _NOT_FOUND.fullmatch(str(detail))
            ):
                self._note(Availability.OK)
                return None
            if code is grpc.StatusCode.UNAVAILABLE:
                self._note(Availability.NOT_ANSWERING, str(detail))
                return None
            if code is grpc.StatusCode.DEADLINE_EXCEEDED:
                self._note(Availability.NOT_ANSWERING, f"{method} took over {timeout} s")
                raise PodResourcesError(
                    f"{what}: expected a reply within {timeout:g} s; found none"
                ) from None
            raise PodResourcesError(
                f"{what}: expected a reply; found status {code}: {_shown(str(detail), 200)}"
            ) from None
        self._note(Availability.OK)
        return got

    async def get(self, namespace: str, name: str) -> dict[str, tuple[DeviceAlloc, ...]] | None:
        """``Get``: the devices of each container of the pod (None: nothing known)."""
        request = pb.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
        got = await self._ask("Get", request, pb.GetPodResourcesResponse, self.get_timeout)
        if got is None or not got.HasField("pod_resources"):
            return None
        return pod_devices(got.pod_resources, namespace, name)

    async def list(self) -> dict[tuple[str, str], dict[str, tuple[DeviceAlloc, ...]]] | None:
        """``List``: every pod's containers' devices by (namespace, name); None when the
        socket is unavailable."""
        got = await self._ask(
            "List", pb.ListPodResourcesRequest(), pb.ListPodResourcesResponse, self.list_timeout
        )
        if got is None:
            return None
        if len(got.pod_resources) > MAX_PODS:
            raise PodResourcesError(
                f"kubelet pod-resources socket {self.path}: List: expected at most {MAX_PODS} "
                f"pods; found {len(got.pod_resources)}"
            )
        return {
            (p.namespace, p.name): pod_devices(p, p.namespace, p.name) for p in got.pod_resources
        }


PodKey = tuple[str, str]
Devices = Mapping[str, tuple[DeviceAlloc, ...]]


class PodResourcesCache:
    """Each pod's devices, asked for at RunPodSandbox and awaited at CreateContainer."""

    def __init__(
        self,
        client: PodResourcesClient,
        *,
        sys_root: str | os.PathLike[str] | None,
        log: EventLog | None = None,
    ) -> None:
        self.client = client
        self.sys_root = sys_root
        self.log: EventLog = log if log is not None else client.log
        self._pods: dict[PodKey, asyncio.Future[Devices | None]] = {}

    async def _fetch(self, key: PodKey) -> Devices | None:
        try:
            return await self.client.get(*key)
        except PodResourcesError as exc:
            self.log.warning("pod devices from the kubelet not used", error=str(exc))
            return None

    def _keep(self, key: PodKey, answer: asyncio.Future[Devices | None]) -> None:
        self._pods.pop(key, None)
        self._pods[key] = answer
        while len(self._pods) > MAX_CACHED:
            oldest = next(iter(self._pods))
            self._pods.pop(oldest).cancel()

    def prefetch(self, namespace: str, name: str) -> None:
        """At RunPodSandbox: ask the kubelet now, in the background."""
        key = (namespace, name)
        if key not in self._pods:
            self._keep(key, asyncio.ensure_future(self._fetch(key)))

    async def hints(self, namespace: str, name: str, container: str) -> tuple[TopologyHint, ...]:
        """At CreateContainer: the hints of `container`'s devices (() when none are known);
        waits at most the call's own deadline."""
        key = (namespace, name)
        if key not in self._pods:
            self.prefetch(namespace, name)
        answer = self._pods[key]
        try:
            devices = await asyncio.shield(answer)
        except asyncio.CancelledError:
            if not answer.cancelled():
                raise  # this coroutine itself was cancelled
            return ()  # the pod went (forget) while it was asked for
        if devices is None:
            return ()
        return device_hints(devices.get(container, ()), sys_root=self.sys_root)

    async def refresh(self) -> None:
        """At Synchronize: every pod's devices from one ``List``."""
        try:
            listed = await self.client.list()
        except PodResourcesError as exc:
            self.log.warning("pod devices from the kubelet not listed", error=str(exc))
            return
        for key, devices in (listed or {}).items():
            done: asyncio.Future[Devices | None] = asyncio.get_running_loop().create_future()
            done.set_result(devices)
            self._keep(key, done)

    def forget(self, namespace: str, name: str) -> None:
        """At RemovePodSandbox."""
        task = self._pods.pop((namespace, name), None)
        if task is not None:
            task.cancel()
