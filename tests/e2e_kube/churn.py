"""Pod churn, the kernel's invariants and the daemon's vital signs on the real node.

Theory of operation
-------------------
The upgrade measurement (tests/e2e_kube/test_upgrades.py) and the soak
(tests/e2e_kube/soak.py) share three things, all read from the node itself, never from
what the daemon says it did:

* **What runs, from the kernel.** `seen_containers` walks the kubelet's cpuset hierarchy
  (`/sys/fs/cgroup/cpuset/<cgroup root>/kubepods/...`): every container cgroup with a
  process in it is a running container; its `cpuset.cpus` is where the kernel lets it run.
  crictl's list names each one (pod uid, container name; sandboxes are left out), the API
  server's pod gives its QoS class and CPU request. A container of a Guaranteed pod with an
  integer CPU request is exclusive (the static policy's rule, the one the node runs); any
  other is shared.
* **The invariants, a pure function of that list** (`violations`): an exclusive container
  holds exactly its count of CPUs; no CPU is held by two exclusive containers; no shared
  container runs on an exclusive CPU; and every shared container runs on exactly the
  shared pool (the online CPUs less the exclusive ones), which is what "placed" means
  under the static policy (a container created while no daemon decided runs on every CPU
  and fails this as soon as any CPU is exclusive). `settle` polls until they hold, since an
  update may be in flight after any step; what still fails after its timeout is a
  violation.
* **The daemon's vital signs** (`sample_daemon`): RSS and open file descriptors from
  `/proc/<pid>` of its container's init process, the round trip of `/healthz` (served on
  the daemon's event loop, so its lateness is the loop's lag plus a local HTTP exchange),
  and the slowest decision, the top non-empty bucket of its
  `nri_resmgr_event_latency_seconds` histogram.

`Churn` is a thread that creates pods of every QoS class and deletes the oldest, timing
each from its create request to the first list that shows it Running. `plugin_windows`
reads containerd's log for the intervals in which the daemon was not connected (from
"connection to plugin closed" to the next "connected and synchronized") and the container
creations and validator refusals that fell into them.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nri_resmgr.kube.client import KubeError
from tests.e2e import containerd as ctdmod
from tests.e2e import cri
from tests.e2e_kube import node as nodemod
from tests.e2e_kube.node import Node

PODS = "/api/v1/namespaces/default/pods"
DAEMON_CONTAINER = "nri-resmgr"
HTTP_PORT = 8891
_CONTAINER_ID = re.compile(r"[0-9a-f]{64}")


# -- the kernel's view -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Seen:
    """One running container as the kernel and the API server show it."""

    name: str  # namespace/pod/container
    cpus: frozenset[int]
    exclusive: int  # CPUs it must hold alone; 0 for a shared container


def _fmt(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus)) or "-"


def violations(seen: Sequence[Seen], online: frozenset[int]) -> list[str]:
    """Every broken invariant of the static policy's node, one sentence each (pure)."""
    out: list[str] = []
    held: dict[int, str] = {}
    for c in sorted((c for c in seen if c.exclusive), key=lambda c: c.name):
        if len(c.cpus) != c.exclusive:
            out.append(
                f"{c.name}: expected {c.exclusive} exclusive CPU(s); found cpuset {_fmt(c.cpus)}"
            )
        for cpu in sorted(c.cpus):
            if cpu in held:
                out.append(f"CPU {cpu}: exclusive to both {held[cpu]} and {c.name}")
            held[cpu] = c.name
    pool = online - frozenset(held)
    for c in sorted((c for c in seen if not c.exclusive), key=lambda c: c.name):
        on = c.cpus & frozenset(held)
        if on:
            owners = sorted({held[cpu] for cpu in on})
            out.append(f"{c.name} (shared): on exclusive CPU(s) {_fmt(on)} of {', '.join(owners)}")
        elif c.cpus != pool:
            out.append(
                f"{c.name} (shared): expected the shared pool {_fmt(pool)}; "
                f"found cpuset {_fmt(c.cpus)}"
            )
    return out


def _cpu_count(quantity: str | None) -> int:
    """Whole CPUs of a request ("1", "2000m"), or 0 when it is not a whole number."""
    if not quantity:
        return 0
    millis = int(quantity[:-1]) if quantity.endswith("m") else round(float(quantity) * 1000)
    return millis // 1000 if millis % 1000 == 0 else 0


def _exclusive(pod: dict[str, Any], container: str) -> int:
    if (pod.get("status") or {}).get("qosClass") != "Guaranteed":
        return 0
    for spec in pod["spec"]["containers"]:
        if spec["name"] == container:
            return _cpu_count(((spec.get("resources") or {}).get("requests") or {}).get("cpu"))
    return 0


def _cgroup_cpus(root: Path) -> dict[str, frozenset[int]]:
    """Container id -> cpuset of every container cgroup under `root` with a process."""
    out: dict[str, frozenset[int]] = {}
    for procs in root.glob("**/cgroup.procs"):
        cg = procs.parent
        if not _CONTAINER_ID.fullmatch(cg.name):
            continue
        with contextlib.suppress(OSError):
            if procs.read_text().strip():
                out[cg.name] = cri.parse_cpus((cg / "cpuset.cpus").read_text())
    return out


def seen_containers(node: Node) -> tuple[list[Seen], list[str]]:
    """The running containers (sandboxes left out), and the ids not yet nameable."""
    root = cri.CGROUP_ROOT / "cpuset" / nodemod.CGROUP_ROOT / "kubepods"
    cpus = _cgroup_cpus(root)
    listed = json.loads(node.ctd.crictl("ps", "-o", "json", timeout=60).stdout)["containers"]
    labels = {c["id"]: c.get("labels") or {} for c in listed}
    sandboxes = set(node.ctd.crictl("pods", "-q", timeout=60).stdout.split())
    pods = {
        p["metadata"]["uid"]: p for p in node.cluster.client.request("GET", "/api/v1/pods")["items"]
    }
    out, unknown = [], []
    for cid, cpuset in sorted(cpus.items()):
        if cid in sandboxes:
            continue
        lab = labels.get(cid, {})
        pod = pods.get(lab.get("io.kubernetes.pod.uid", ""))
        container = lab.get("io.kubernetes.container.name", "")
        if pod is None or not container:
            unknown.append(cid[:12])
            continue
        meta = pod["metadata"]
        out.append(
            Seen(
                name=f"{meta['namespace']}/{meta['name']}/{container}",
                cpus=cpuset,
                exclusive=_exclusive(pod, container),
            )
        )
    return out, unknown


@dataclass
class Settled:
    seconds: float
    violations: list[str]
    containers: list[Seen]


def settle(node: Node, online: frozenset[int], *, timeout: float = 90) -> Settled:
    """Poll the invariants until they hold (an update may be in flight); what still fails
    after `timeout` is returned as violations."""
    start = time.monotonic()
    while True:
        try:
            seen, unknown = seen_containers(node)
            broken = violations(seen, online) + [
                f"container {cid}: running but named by neither crictl nor the API"
                for cid in unknown
            ]
        except (ctdmod.ContainerdError, KubeError, OSError) as exc:
            seen, broken = [], [f"node unreadable: {exc}"]
        if not broken or time.monotonic() - start > timeout:
            return Settled(round(time.monotonic() - start, 2), broken, seen)
        time.sleep(0.5)


# -- the daemon's vital signs ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Vitals:
    at: float
    pid: int
    rss_kib: int
    fds: int
    healthz_seconds: float
    slowest_decision: float  # upper bound of the top non-empty latency bucket; 0 if none


def daemon_pid(node: Node) -> int | None:
    ids = node.ctd.crictl(
        "ps", "--state", "running", "--name", f"^{DAEMON_CONTAINER}$", "-q", check=False,
        timeout=60,
    ).stdout.split()  # fmt: skip
    if len(ids) != 1:
        return None
    info = json.loads(node.ctd.crictl("inspect", "-o", "json", ids[0], timeout=60).stdout)
    pid = int(info["info"]["pid"])
    return pid or None


def daemon_ip(node: Node) -> str | None:
    items = node.cluster.client.request(
        "GET",
        "/api/v1/namespaces/kube-system/pods",
        query={"labelSelector": "app.kubernetes.io/name=nri-resmgr"},
    )["items"]
    ready = [
        p
        for p in items
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    ]
    return ready[0]["status"].get("podIP") if len(ready) == 1 else None


def slowest_bucket(metrics: str) -> float:
    """The upper bound of the highest latency bucket with any observation in it."""
    counts: dict[float, float] = {}
    for m in re.finditer(
        r'^nri_resmgr_event_latency_seconds_bucket\{[^}]*le="([^"]+)"[^}]*\}\s+(\S+)$',
        metrics,
        re.M,
    ):
        bound = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
        counts[bound] = counts.get(bound, 0.0) + float(m.group(2))
    bounds = sorted(counts)  # cumulative counts: a bucket is non-empty where they rise
    slowest = 0.0
    previous = 0.0
    for bound in bounds:
        if counts[bound] > previous:
            slowest = bound
        previous = counts[bound]
    return slowest


def sample_daemon(node: Node) -> Vitals | None:
    """The daemon's vital signs now, or None while it is not running and Ready."""
    pid, ip = daemon_pid(node), daemon_ip(node)
    if pid is None or ip is None:
        return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
        started = time.monotonic()
        with urllib.request.urlopen(f"http://{ip}:{HTTP_PORT}/healthz", timeout=10) as r:
            r.read()
        healthz = time.monotonic() - started
        with urllib.request.urlopen(f"http://{ip}:{HTTP_PORT}/metrics", timeout=10) as r:
            metrics = r.read().decode()
    except OSError:
        return None
    rss = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return Vitals(
        at=time.time(),
        pid=pid,
        rss_kib=int(rss.group(1)) if rss else 0,
        fds=fds,
        healthz_seconds=round(healthz, 4),
        slowest_decision=slowest_bucket(metrics),
    )


# -- containerd's record of the plugin ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Window:
    """An interval in which no instance of the plugin was connected."""

    closed: float
    synchronized: float
    created: int  # containers containerd created in it (no decision was made for them)
    refused: int  # creations the default validator refused in it

    @property
    def seconds(self) -> float:
        return self.synchronized - self.closed


#: the chart's own containers: their pod may start without the daemon (its annotation)
CHART_CONTAINERS = frozenset({"nri-resmgr", "reset-on-uninstall"})
_CREATED = re.compile(r'for name:\\"([^"\\]*)\\" returns container id')


def plugin_windows(
    log: str, plugin: str, since: float = 0.0, *, exempt: frozenset[str] = CHART_CONTAINERS
) -> list[Window]:
    """Every interval after `since` from the plugin's disconnect to its next
    synchronization (an open one ends at the last line), with what happened inside; the
    creations of `exempt` containers (the daemon's own pod) are not counted."""
    closed_at: float | None = None
    connected = 0
    spans: list[tuple[float, float]] = []
    creations: list[float] = []
    refusals: list[float] = []
    last = since
    for line in log.splitlines():
        at = ctdmod.log_time(line)
        if at is None or at < since:
            continue
        last = at
        if f'connection to plugin \\"{plugin}\\" closed' in line:
            connected = max(connected - 1, 0)
            if connected == 0:
                closed_at = at
        elif f'plugin \\"{plugin}\\" connected and synchronized' in line:
            connected += 1
            if closed_at is not None:
                spans.append((closed_at, at))
                closed_at = None
        elif (created := _CREATED.search(line)) and created.group(1) not in exempt:
            creations.append(at)
        elif "rejected container adjustment" in line and "CreateContainer" in line:
            refusals.append(at)
    if closed_at is not None:
        spans.append((closed_at, last))
    return [
        Window(
            closed=a,
            synchronized=b,
            created=sum(a <= t <= b for t in creations),
            refused=sum(a <= t <= b for t in refusals),
        )
        for a, b in spans
    ]


# -- pod churn ---------------------------------------------------------------------------

QOS = ("guaranteed", "burstable", "besteffort")


def churn_pod(name: str, qos: str) -> dict[str, Any]:
    """A pod of the given QoS class running busybox's sleep (the e2e test image)."""
    resources: dict[str, Any] = {}
    if qos == "guaranteed":
        req = {"cpu": "1", "memory": "32Mi"}
        resources = {"requests": req, "limits": req}
    elif qos == "burstable":
        resources = {"requests": {"cpu": "50m", "memory": "16Mi"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"churn": qos}},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": ctdmod.TEST_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sleep", "2147483647"],
                    "resources": resources,
                }
            ],
            "terminationGracePeriodSeconds": 0,
            "restartPolicy": "Never",
        },
    }


@dataclass
class Started:
    name: str
    qos: str
    created: float  # time.time() of the create request
    seconds: float | None = None  # to the first list showing it Running


@dataclass
class Churn:
    """Pods created and deleted on a thread: about `keep` of ours at a time (the oldest
    that ran deleted first), at most one Guaranteed (the node has one CPU to give
    exclusively)."""

    node: Node
    rng: random.Random
    prefix: str = "churn"
    keep: int = 5
    period: float = 1.5
    started: list[Started] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Churn:
        self._thread = threading.Thread(target=self._run, name="churn", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    def step(self, live: list[Started]) -> None:
        """One creation or deletion (used by the thread, and by the soak directly). Only a
        pod seen Running is deleted, so that every pod's start-up is timed, a refused and
        retried one's too; while `2 * keep` wait to run, nothing is created."""
        client = self.node.cluster.client
        ran = [s for s in live if s.seconds is not None]
        if ran and (len(live) >= self.keep or self.rng.random() < 0.3):
            victim = ran[0] if len(live) >= self.keep else self.rng.choice(ran)
            live.remove(victim)
            with contextlib.suppress(KubeError):
                client.request("DELETE", f"{PODS}/{victim.name}", body={"gracePeriodSeconds": 0})
            return
        if len(live) >= 2 * self.keep:
            return
        qos = self.rng.choice(QOS)
        if qos == "guaranteed" and any(s.qos == "guaranteed" for s in live):
            qos = "burstable"
        pod = Started(f"{self.prefix}-{len(self.started)}", qos, time.time())
        client.request("POST", PODS, body=churn_pod(pod.name, qos))
        self.started.append(pod)
        live.append(pod)

    def observe(self) -> None:
        """Time the pods not yet seen Running."""
        waiting = {s.name: s for s in self.started if s.seconds is None}
        if not waiting:
            return
        items = self.node.cluster.client.request("GET", PODS, query={"labelSelector": "churn"})[
            "items"
        ]
        now = time.time()
        for p in items:
            s = waiting.get(p["metadata"]["name"])
            if s is not None and (p.get("status") or {}).get("phase") == "Running":
                s.seconds = round(now - s.created, 2)

    def _run(self) -> None:
        live: list[Started] = []
        next_step = time.monotonic()
        while not self._stop.is_set():
            try:
                if time.monotonic() >= next_step:
                    self.step(live)
                    next_step = time.monotonic() + self.period
                self.observe()
            except (KubeError, OSError) as exc:
                self.errors.append(f"{time.strftime('%H:%M:%S')} {exc}")
            self._stop.wait(0.25)


def delays(started: Sequence[Started], during: Callable[[float], bool]) -> dict[str, Any]:
    """Start-up seconds of the pods created `during` an upgrade against the others."""
    inside = [s.seconds for s in started if s.seconds is not None and during(s.created)]
    outside = [s.seconds for s in started if s.seconds is not None and not during(s.created)]
    base = statistics.median(outside) if outside else 0.0
    return {
        "pods": len(started),
        "never_running": [s.name for s in started if s.seconds is None],
        "median_outside_upgrades": round(base, 2),
        "longest_during_upgrades": max(inside, default=0.0),
        "longest_delay_caused": round(max(inside, default=base) - base, 2),
    }
