"""Pods and containers as the kubelet and containerd make them, as the Go fake runtime's
JSON (protojson with proto field names): `make_pod` with its QoS class's cgroup parent,
`make_container` with the resources, cgroup path and OOM score the kubelet gives a
container of that class (`cpu_shares` from a CPU request as the kubelet computes it).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence

from tests.conformance.harness import Json

QOS_CLASSES = ("guaranteed", "burstable", "besteffort")


def _pod_slice(qos: str, uid: str) -> str:
    under = uid.replace("-", "_")
    if qos == "guaranteed":
        return f"kubepods-pod{under}.slice"
    return f"kubepods-{qos}-pod{under}.slice"


# kubelet's oom_score_adj per QoS class (burstable: a typical value; the real
# one depends on the memory request relative to node capacity).
_OOM_SCORE_ADJ = {"guaranteed": -997, "burstable": 936, "besteffort": 1000}


def _pod_qos(pod: Json) -> str:
    parent = str(pod.get("linux", {}).get("cgroup_parent", ""))
    for qos in ("burstable", "besteffort"):
        if f"kubepods-{qos}-" in parent:
            return qos
    return "guaranteed"


def cpu_shares(millis: int) -> int:
    """kubelet's MilliCPUToShares: 1024 shares per CPU, at least 2."""
    return max(2, millis * 1024 // 1000)


def make_pod(
    *,
    name: str,
    namespace: str = "default",
    qos: str = "burstable",
    uid: str | None = None,
    id: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    runtime_handler: str = "runc",
) -> Json:
    """A PodSandbox as containerd reports it (systemd cgroup driver)."""
    if qos not in QOS_CLASSES:
        raise ValueError(
            f"pod {namespace}/{name}: qos {qos!r}; expected one of {', '.join(QOS_CLASSES)}"
        )
    uid = uid or str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{namespace}/{name}"))
    id = id or hashlib.sha256(f"sandbox/{uid}".encode()).hexdigest()
    all_labels = {
        "io.kubernetes.pod.name": name,
        "io.kubernetes.pod.namespace": namespace,
        "io.kubernetes.pod.uid": uid,
        **(labels or {}),
    }
    all_annotations = {
        "io.kubernetes.cri.container-type": "sandbox",
        "io.kubernetes.cri.sandbox-id": id,
        "io.kubernetes.cri.sandbox-name": name,
        "io.kubernetes.cri.sandbox-namespace": namespace,
        "io.kubernetes.cri.sandbox-uid": uid,
        "kubernetes.io/config.source": "api",
        **(annotations or {}),
    }
    slice_ = _pod_slice(qos, uid)
    return {
        "id": id,
        "name": name,
        "uid": uid,
        "namespace": namespace,
        "labels": all_labels,
        "annotations": all_annotations,
        "runtime_handler": runtime_handler,
        "linux": {
            "cgroup_parent": slice_,
            "cgroups_path": f"{slice_}:cri-containerd:{id}",
            "namespaces": [
                {"type": "network", "path": f"/var/run/netns/cni-{uid}"},
                {"type": "ipc"},
                {"type": "uts"},
            ],
        },
    }


def make_container(
    pod: Json,
    *,
    name: str,
    id: str | None = None,
    cpu_request_millis: int = 100,
    cpu_limit_millis: int | None = None,
    memory_request: int | None = None,
    memory_limit: int | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    env: Sequence[str] = (),
    args: Sequence[str] = ("/bin/sleep", "infinity"),
    state: str | None = None,
    cpuset_cpus: str | None = None,
) -> Json:
    """A Container as containerd reports it to NRI at CreateContainer time.

    CPU shares derive from the request, quota/period from the limit (period
    100000 µs), like kubelet. `memory_request` is only recorded as an annotation
    (the OCI spec carries no memory request).
    """
    id = id or hashlib.sha256(f"container/{pod['id']}/{name}".encode()).hexdigest()
    cpu: Json = {"shares": {"value": cpu_shares(cpu_request_millis)}}
    if cpu_limit_millis is not None:
        cpu["quota"] = {"value": cpu_limit_millis * 100}
        cpu["period"] = {"value": 100000}
    if cpuset_cpus is not None:
        cpu["cpus"] = cpuset_cpus
    resources: Json = {"cpu": cpu}
    if memory_limit is not None:
        resources["memory"] = {"limit": {"value": memory_limit}}
    all_labels = {
        "io.kubernetes.container.name": name,
        "io.kubernetes.pod.name": pod["name"],
        "io.kubernetes.pod.namespace": pod["namespace"],
        "io.kubernetes.pod.uid": pod["uid"],
        **(labels or {}),
    }
    all_annotations = {
        "io.kubernetes.cri.container-name": name,
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.image-name": "registry.k8s.io/pause:3.10",
        "io.kubernetes.cri.sandbox-id": pod["id"],
        "io.kubernetes.cri.sandbox-name": pod["name"],
        "io.kubernetes.cri.sandbox-namespace": pod["namespace"],
        "io.kubernetes.cri.sandbox-uid": pod["uid"],
        **(annotations or {}),
    }
    if memory_request is not None:
        all_annotations.setdefault("io.kubernetes.container.memory-request", str(memory_request))
    ctr: Json = {
        "id": id,
        "pod_sandbox_id": pod["id"],
        "name": name,
        "labels": all_labels,
        "annotations": all_annotations,
        "args": list(args),
        "env": [
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            f"HOSTNAME={pod['name']}",
            "KUBERNETES_SERVICE_HOST=10.96.0.1",
            "KUBERNETES_SERVICE_PORT=443",
            *env,
        ],
        "mounts": [
            {
                "destination": "/etc/hosts",
                "type": "bind",
                "source": f"/var/lib/kubelet/pods/{pod['uid']}/etc-hosts",
                "options": ["rbind", "rprivate", "rw"],
            },
            {
                "destination": "/dev/termination-log",
                "type": "bind",
                "source": f"/var/lib/kubelet/pods/{pod['uid']}/containers/{name}/termination-log",
                "options": ["rbind", "rprivate", "rw"],
            },
        ],
        "linux": {
            "resources": resources,
            "cgroups_path": f"{pod['linux']['cgroup_parent']}:cri-containerd:{id}",
            "oom_score_adj": {"value": _OOM_SCORE_ADJ[_pod_qos(pod)]},
        },
    }
    if state is not None:
        ctr["state"] = state
    return ctr
