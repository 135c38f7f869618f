"""A fake kubelet PodResources server on a real unix socket, honest or hostile.

`fake_kubelet(path, pods)` serves gRPC ``v1.PodResourcesLister`` ``List`` and ``Get``
(the real grpc server, the committed generated messages) from `pods`, values built with
`pod_resources`; `behaviour` makes it hang past any deadline, fail with a status, or
answer about another pod.  `silent_socket(path)` listens and never speaks (the kernel
accepts the connection, nothing answers): a kubelet that hangs below gRPC.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from nri_resmgr.kube._pb import podresources_pb2 as pb

__all__ = ["fake_kubelet", "pod_resources", "silent_socket"]

#: resource name -> (device ids, NUMA nodes) for one container
ContainerSpec = Mapping[str, tuple[Sequence[str], Sequence[int]]]


def pod_resources(
    namespace: str, name: str, containers: Mapping[str, ContainerSpec]
) -> pb.PodResources:
    """A ``PodResources`` message: each container's devices by resource name."""
    return pb.PodResources(
        namespace=namespace,
        name=name,
        containers=[
            pb.ContainerResources(
                name=cname,
                devices=[
                    pb.ContainerDevices(
                        resource_name=resource,
                        device_ids=list(ids),
                        topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in nodes]),
                    )
                    for resource, (ids, nodes) in spec.items()
                ],
            )
            for cname, spec in containers.items()
        ],
    )


@contextmanager
def fake_kubelet(
    path: Path, pods: Sequence[pb.PodResources] = (), *, behaviour: str = "honest"
) -> Iterator[list[str]]:
    """Serve `pods` on unix socket `path`; yields the list of methods called, in order.

    `behaviour`: ``honest``; ``hang`` (each call sleeps 30 s); ``fail`` (INTERNAL);
    ``other-pod`` (Get answers with the first pod whatever is asked)."""
    calls: list[str] = []
    released = threading.Event()

    def listed(_request: Any, context: grpc.ServicerContext) -> pb.ListPodResourcesResponse:
        calls.append("List")
        _misbehave(context)
        return pb.ListPodResourcesResponse(pod_resources=list(pods))

    def got(request: Any, context: grpc.ServicerContext) -> pb.GetPodResourcesResponse:
        calls.append("Get")
        _misbehave(context)
        if behaviour == "other-pod" and pods:
            return pb.GetPodResourcesResponse(pod_resources=pods[0])
        for p in pods:
            if (p.namespace, p.name) == (request.pod_namespace, request.pod_name):
                return pb.GetPodResourcesResponse(pod_resources=p)
        # as the kubelet v1.34 answers (its server_v1.go Get): UNKNOWN, not NOT_FOUND
        context.abort(
            grpc.StatusCode.UNKNOWN,
            f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
        )
        raise AssertionError("abort returns no more")

    def _misbehave(context: grpc.ServicerContext) -> None:
        if behaviour == "hang":
            released.wait(30)
        elif behaviour == "fail":
            context.abort(grpc.StatusCode.INTERNAL, "device manager checkpoint corrupt")

    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {
            "List": grpc.unary_unary_rpc_method_handler(
                listed,
                request_deserializer=pb.ListPodResourcesRequest.FromString,
                response_serializer=pb.ListPodResourcesResponse.SerializeToString,
            ),
            "Get": grpc.unary_unary_rpc_method_handler(
                got,
                request_deserializer=pb.GetPodResourcesRequest.FromString,
                response_serializer=pb.GetPodResourcesResponse.SerializeToString,
            ),
        },
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{path}")
    server.start()
    try:
        yield calls
    finally:
        released.set()
        server.stop(grace=None).wait(5)


@contextmanager
def silent_socket(path: Path) -> Iterator[None]:
    """A unix socket at `path` that accepts connections and never writes a byte."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
        s.listen(16)
        yield
        time.sleep(0)  # connections die with the socket
