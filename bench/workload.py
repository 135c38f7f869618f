"""The benchmark workload: kubelet-like pods and containers, and the probe containers.

Live containers come in a repeating pattern of ten, one pod each:

* 5 burstable (request 100m, limit 500m, 128 MiB limit)  -> shared CPUs
* 4 besteffort (no requests)                             -> shared CPUs
* 1 guaranteed (1 CPU, 64 MiB)                           -> one exclusive CPU

so 1,000 live containers hold 100 exclusive CPUs and 90 shared CPUs' worth of requests on
the 224-thread machine (`examples/topologies/server-2s-224t.yaml`). Probes are the
containers whose creation is timed: a *shared* one (burstable 100m) and an *exclusive*
one (guaranteed 1 CPU); each is removed again after its sample, so the live count stays
put.
"""

from __future__ import annotations

from tests.conformance.harness import Json
from tests.conformance.harness_pods import make_container, make_pod

KINDS = ("burstable",) * 5 + ("besteffort",) * 4 + ("guaranteed",)
MiB = 1 << 20


def container_for(pod: Json, kind: str, name: str) -> Json:
    if kind == "guaranteed":
        return make_container(
            pod,
            name=name,
            cpu_request_millis=1000,
            cpu_limit_millis=1000,
            memory_request=64 * MiB,
            memory_limit=64 * MiB,
        )
    if kind == "burstable":
        return make_container(
            pod,
            name=name,
            cpu_request_millis=100,
            cpu_limit_millis=500,
            memory_request=64 * MiB,
            memory_limit=128 * MiB,
        )
    if kind == "burstable-small":
        return make_container(
            pod,
            name=name,
            cpu_request_millis=10,
            cpu_limit_millis=100,
            memory_request=16 * MiB,
            memory_limit=64 * MiB,
        )
    return make_container(pod, name=name, cpu_request_millis=0)


def live(n: int, *, start: int = 0, prefix: str = "w") -> list[tuple[Json, Json]]:
    """Live containers `start` .. `n - 1` of the pattern, each with its own pod."""
    out = []
    for i in range(start, n):
        kind = KINDS[i % len(KINDS)]
        pod = make_pod(name=f"{prefix}{i}", namespace="bench", qos=kind)
        out.append((pod, container_for(pod, kind, "app")))
    return out


#: beyond this many live containers, `scaled` adds small ones only (the machine is full)
PATTERN_UP_TO = 1000


def scaled(n: int, *, start: int = 0, prefix: str = "w") -> list[tuple[Json, Json]]:
    """Like `live` up to 1,000 containers (100 exclusive CPUs, 50 CPUs of Burstable
    requests), then one Burstable 10m container in ten and BestEffort ones, so that 10,000
    live containers still fit the 224-thread machine (59 CPUs of shared requests) and an
    exclusive probe still finds a CPU."""
    out = []
    for i in range(start, n):
        if i < PATTERN_UP_TO:
            kind = KINDS[i % len(KINDS)]
        else:
            kind = "burstable-small" if i % 10 == 0 else "besteffort"
        qos = "burstable" if kind == "burstable-small" else kind
        pod = make_pod(name=f"{prefix}{i}", namespace="bench", qos=qos)
        out.append((pod, container_for(pod, kind, "app")))
    return out


def probe(kind: str, i: int) -> tuple[Json, Json]:
    """The i-th probe: kind "shared" (burstable) or "exclusive" (guaranteed 1 CPU)."""
    qos = "burstable" if kind == "shared" else "guaranteed"
    pod = make_pod(name=f"probe-{kind}-{i}", namespace="bench", qos=qos)
    return pod, container_for(pod, qos, "probe")


def running(ctr: Json) -> Json:
    """`ctr` as the runtime reports it at Synchronize (state RUNNING, with its pid)."""
    return {**ctr, "state": "CONTAINER_RUNNING"}


#: the affinity rules of `affine_probe`: towards two live pods' containers (anywhere in
#: the namespace), away from a third
AFFINITY_RULES = (
    "probe: [{scope: {key: namespace, operator: Equals, values: [bench]}, "
    "match: {key: pod/name, operator: In, values: [w1, w2]}, weight: 5}]"
)
ANTI_AFFINITY_RULES = (
    "probe: [{scope: {key: namespace, operator: Equals, values: [bench]}, "
    "match: {key: pod/name, operator: Equals, values: [w3]}}]"
)


def affine_probe(i: int) -> tuple[Json, Json]:
    """The i-th shared probe (burstable 100m) with ``affinity`` and ``anti-affinity``
    annotations that weigh it against every live container of the namespace."""
    pod = make_pod(
        name=f"probe-affine-{i}",
        namespace="bench",
        qos="burstable",
        annotations={
            "resource-policy.nri.io/affinity": AFFINITY_RULES,
            "resource-policy.nri.io/anti-affinity": ANTI_AFFINITY_RULES,
        },
    )
    return pod, container_for(pod, "burstable", "probe")
