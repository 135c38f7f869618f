"""What an operator does on the test node with the chart: the chart values for the node
(`values`), the README's tested deploy block and what it promises, pods as manifests,
their cpusets read from the kernel, the daemon's pods, log and events, helm upgrades,
the service account's rights (`LEAST_PRIVILEGE`, `IN_NAMESPACE`, `EVERYONE`), the
daemon's page through a kubectl proxy, and pod start-up timing.  Every step goes
through kubectl or helm as an operator's would (crictl only finds a container's pid for
the cgroup read); the scenarios are tests/e2e_kube/test_kube.py.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from nri_resmgr.cli import main as cli_main
from tests.e2e import cri
from tests.e2e.containerd import TEST_IMAGE
from tests.e2e_kube.image import Image
from tests.e2e_kube.node import Node
from tests.support.requirements import REPO

README = REPO / "README.md"


NAMESPACE = "kube-system"


RELEASE = "nri-resmgr"


SA = f"system:serviceaccount:{NAMESPACE}:{RELEASE}"


LABEL = "app.kubernetes.io/name=nri-resmgr"


PLUGIN = "90-resmgr"


#: the default validator's refusal (NRI v0.10+), as `enable-nri --require` sets it up
REFUSED = 'required plugin "resmgr" not present'


def values(node: Node, image: Image, **extra: Any) -> dict[str, Any]:
    """The chart values for this node: the test image, the private NRI socket and state
    dir, the static policy with CPU 0 reserved, node reporting on."""
    doc: dict[str, Any] = {
        "image": {"repository": image.repository, "tag": image.tag, "pullPolicy": "Never"},
        "hostPaths": {"nriSocketDir": str(node.ctd.layout.base)},
        "stateDir": str(node.base / "nri-resmgr-state"),
        "policy": "static",
        # null removes the chart's topology-aware defaults
        "policyConfig": {
            "reservedSystemCPUs": "0",
            "reservedResources": None,
            "pinCPU": None,
            "pinMemory": True,
        },
        "nodeResourceTopology": {"enable": True, "interval": 5},
        # the kubelet's PodResources socket under its private root dir
        "podResources": {"enable": True, "dir": str(node.base / "kubelet" / "pod-resources")},
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "log": {"level": "info", "format": "json"},
    }
    for key, value in extra.items():
        doc[key] = value
    return doc


def readme_deploy_block() -> str:
    """The shell block of the README's "Deploy on a cluster" section that the test runs."""
    text = README.read_text()
    section = text.split("## Deploy on a cluster", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"<!-- tested: tests/e2e_kube -->\s*```sh\n(.*?)```", section, re.S)
    assert m, 'README: no tested ```sh block in "Deploy on a cluster"'
    return m.group(1)


BUILD_LINE = "tools/build-image.sh -t nri-resmgr:$TAG -o nri-resmgr.oci.tar"


#: what the README's deploy section says happens to running containers on an upgrade and
#: a restart; the test named beside it checks it on the node (uninstall: test_uninstall.py)
README_KEEP = (  # test_upgrade_and_daemon_restart_leave_running_containers_where_they_are
    "A `helm upgrade` and a daemon restart leave running containers where they are: the next "
    "daemon takes them over."
)


def readme_says(sentence: str) -> None:
    section = README.read_text().split("## Deploy on a cluster", 1)[1].split("\n## ", 1)[0]
    assert sentence in " ".join(section.split()), f"README's deploy section lost: {sentence!r}"


def pod_manifest(
    name: str,
    *,
    cpu: str | None = None,
    memory: str | None = None,
    limits: bool = True,
    annotations: dict[str, str] | None = None,
    resize: bool = False,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if cpu or memory:
        req = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
        resources = {"requests": req, **({"limits": req} if limits else {})}
    container: dict[str, Any] = {
        "name": "c",
        "image": TEST_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["/bin/sleep", "2147483647"],
        "resources": resources,
    }
    if resize:
        container["resizePolicy"] = [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
        "spec": {
            "containers": [container],
            "terminationGracePeriodSeconds": 0,
            "restartPolicy": "Never",
        },
    }


def run_pod(node: Node, name: str, **kw: Any) -> dict[str, Any]:
    node.apply(pod_manifest(name, **kw))
    return wait_running(node, name)


def wait_running(node: Node, name: str, namespace: str = "default") -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        pod = node.get("pod", "-n", namespace, name)
        return pod if pod["status"].get("phase") == "Running" else None

    try:
        pod: dict[str, Any] = node.wait_for(running, timeout=120, what=f"pod {name} Running")
    except AssertionError:
        described = node.kubectl("describe", "pod", "-n", namespace, name, check=False)
        raise AssertionError(f"pod {name} not Running:\n{described.stdout}") from None
    return pod


def delete_pods(node: Node, *names: str) -> None:
    if names:
        node.kubectl(
            "delete",
            "pod",
            "-n",
            "default",
            "--wait=true",
            "--timeout=60s",
            "--ignore-not-found",
            *names,
        )


def stop_pods(node: Node, *names: str) -> None:
    """`delete_pods`, then wait until `node`'s runtime has stopped them (no ready sandbox).

    The tests' pods have ``terminationGracePeriodSeconds: 0``: their API objects go at
    once, while the kubelet is still stopping their containers (2 s at least, its minimum
    grace period, for a ``sleep`` that ignores SIGTERM) and the daemon still decides on
    them: the stop, and any resource update the kubelet sends meanwhile.  A test that
    needs the node done with them (nothing left for the daemon to decide or report) waits
    here; the kubelet stops a pod's sandbox after its containers.  A pod that another node
    runs is an error naming it; one never scheduled has nothing to stop."""
    uids: dict[str, str] = {}
    for name in names:
        r = node.kubectl("get", "pod", "-n", "default", name, "-o", "json", check=False)
        if r.returncode != 0:
            continue  # not in the API (any more): nothing to look its sandbox up by
        pod = json.loads(r.stdout)
        on = pod["spec"].get("nodeName")
        if on is None:
            continue
        assert on == node.name, f"pod {name}: expected it on node {node.name}, found on {on}"
        uids[name] = pod["metadata"]["uid"]
    delete_pods(node, *names)

    labels = [f"--label=io.kubernetes.pod.uid={uid}" for uid in uids.values()]
    node.wait_for(
        lambda: not any(ready_sandboxes(node, label) for label in labels),
        timeout=120,
        what=f"node {node.name} stopping pods {sorted(uids)}",
    )


def ready_sandboxes(node: Node, *filters: str) -> list[str]:
    """The ids of `node`'s ready pod sandboxes that crictl's `filters` select (e.g.
    ``--namespace=default``)."""
    return node.ctd.crictl("pods", "-q", "--state", "ready", *filters).stdout.split()


def container_pid(node: Node, pod: dict[str, Any], index: int = 0) -> int:
    cid = pod["status"]["containerStatuses"][index]["containerID"].split("://", 1)[1]
    info = json.loads(node.ctd.crictl("inspect", "-o", "json", cid).stdout)
    return int(info["info"]["pid"])


def cpuset(node: Node, name: str, namespace: str = "default") -> tuple[str, str]:
    """(cpuset.cpus, cpuset.mems) of the pod's first container, from the kernel."""
    pod = node.get("pod", "-n", namespace, name)
    pid = container_pid(node, pod)
    cpus = cri.read_cgroup(pid, "cpuset", "cpuset.cpus")
    mems = cri.read_cgroup(pid, "cpuset", "cpuset.mems")
    status = Path(f"/proc/{pid}/status").read_text()
    allowed = re.search(r"Cpus_allowed_list:\s*(\S+)", status)
    assert allowed and allowed.group(1) == cpus, (
        f"pod {name}: cgroup cpuset.cpus {cpus!r} but its process may run on "
        f"{allowed.group(1) if allowed else '?'!r}"
    )
    return cpus, mems


def wait_cpus(node: Node, name: str, want: str, *, timeout: float = 60) -> None:
    node.wait_for(
        lambda: cpuset(node, name)[0] == want,
        timeout=timeout,
        what=f"pod {name} cpuset.cpus == {want!r} (now {cpuset(node, name)[0]!r})",
    )


def daemon_pods(node: Node) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = node.get("pods", "-n", NAMESPACE, "-l", LABEL)["items"]
    return items


def daemon_log(node: Node) -> str:
    r = node.kubectl("logs", "-n", NAMESPACE, "-l", LABEL, "--tail=60", check=False)
    return r.stdout + r.stderr


def events_for(node: Node, kind: str, name: str, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = node.get(
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"involvedObject.kind={kind},involvedObject.name={name}",
    )["items"]
    return items


def helm_upgrade(node: Node, image: Image, policy_config: dict[str, Any]) -> None:
    doc = values(node, image)
    doc["policyConfig"] = {**doc["policyConfig"], **policy_config}
    helm_upgrade_values(node, doc)


def _helm_upgrade(node: Node, doc: dict[str, Any], name: str, *wait: str, timeout: float) -> None:
    """`helm upgrade` of the release with the values `doc`, written to `name` first."""
    path = node.base / name
    path.write_text(yaml.safe_dump(doc))
    node.run(
        "helm", "upgrade", RELEASE, str(REPO / "charts" / "nri-resmgr"),
        "--namespace", NAMESPACE, "-f", str(path), *wait,
        timeout=timeout,
    )  # fmt: skip


def helm_upgrade_values(node: Node, doc: dict[str, Any]) -> None:
    """`helm upgrade` with the values `doc` (only the configuration changes: applied live)."""
    _helm_upgrade(node, doc, "upgrade-values.yaml", timeout=180)


def upgrade_and_roll_out(node: Node, doc: dict[str, Any]) -> None:
    """`helm upgrade --wait` with the values `doc`, then the DaemonSet's rollout."""
    _helm_upgrade(node, doc, "rollout-values.yaml", "--wait", "--timeout", "180s", timeout=240)
    node.kubectl("-n", NAMESPACE, "rollout", "status", "daemonset/nri-resmgr", "--timeout=180s")


def config_events(node: Node, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in events_for(node, "ConfigMap", "nri-resmgr-config.default", NAMESPACE)
        if e.get("reason") == reason
    ]


def runtime_requires(node: Node, flag: str) -> None:
    """`enable-nri --require` / `--no-require` on the node's containerd, then restart it
    (running containers survive; the daemon reconnects by itself)."""
    node.ctd.stop()
    config = str(node.ctd.layout.config)
    assert cli_main(["enable-nri", "--runtime", "containerd", "--config", config, flag]) == 0
    node.ctd.start()


def daemon_page(node: Node, page: str) -> str:
    """A daemon page through the API server's pod proxy, as README's metrics check reads."""
    (ds_pod,) = daemon_pods(node)
    name = ds_pod["metadata"]["name"]
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}:8891/proxy{page}"
    return node.kubectl("get", "--raw", path).stdout


@contextlib.contextmanager
def kubectl_proxy(node: Node) -> Iterator[str]:
    """``kubectl proxy`` on a free local port: the API server's base URL for a browser."""
    proc = subprocess.Popen(
        ["kubectl", "proxy", "--port=0"], env=node.env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "Starting to serve on 127.0.0.1:PORT"
        m = re.search(r"(127\.0\.0\.1:\d+)", line)
        assert m, f"kubectl proxy said {line!r}"
        yield f"http://{m.group(1)}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def topology_aware(node: Node, image: Image, reserved: str) -> dict[str, Any]:
    """The chart values with the topology-aware policy reserving the CPUs `reserved`."""
    doc = values(node, image)
    doc["policy"] = "topology-aware"
    # the chart's pinCPU and pinMemory defaults stay; reservedSystemCPUs is static's
    doc["policyConfig"] = {"reservedResources": {"cpu": f"cpuset:{reserved}"}}
    return doc


def reconfigure(node: Node, doc: dict[str, Any]) -> None:
    """Apply the values `doc` live and wait for the daemon's ConfigApplied event."""
    applied_before = len(config_events(node, "ConfigApplied"))
    helm_upgrade_values(node, doc)
    try:
        node.wait_for(
            lambda: len(config_events(node, "ConfigApplied")) > applied_before,
            timeout=120,
            what="a ConfigApplied Event after helm upgrade",
        )
    except AssertionError as exc:
        rejected = [e["message"] for e in config_events(node, "ConfigRejected")]
        raise AssertionError(f"{exc}\nrejected: {rejected}\n{daemon_log(node)}") from None


#: the chart's documented least-privilege set (templates/rbac.yaml, with node reporting on)
LEAST_PRIVILEGE = {
    ("nodes", frozenset({"get", "list", "watch"})),
    # Events on the pods and the configuration ConfigMaps: created, nothing else
    ("events", frozenset({"create"})),
    (
        "noderesourcetopologies.topology.node.k8s.io",
        frozenset({"create", "get", "list", "update", "patch"}),
    ),
}


IN_NAMESPACE = {
    ("configmaps", frozenset({"get", "list", "watch"})),
    ("configmaps/status", frozenset({"update", "patch"})),
    # nri-plugins' configuration custom resources and their per-node status
    ("topologyawarepolicies.config.nri", frozenset({"get", "list", "watch"})),
    ("topologyawarepolicies.config.nri/status", frozenset({"get", "update", "patch"})),
    ("balloonspolicies.config.nri", frozenset({"get", "list", "watch"})),
    ("balloonspolicies.config.nri/status", frozenset({"get", "update", "patch"})),
    # the reset-on-uninstall container reads its own DaemonSet, and only that one
    # (templates/reset-on-uninstall.yaml)
    (f"daemonsets.apps/{RELEASE}", frozenset({"get"})),
}


#: what every authenticated identity may do (system:basic-user and friends)
EVERYONE = {
    "selfsubjectreviews.authentication.k8s.io",
    "selfsubjectaccessreviews.authorization.k8s.io",
    "selfsubjectrulesreviews.authorization.k8s.io",
}


def can_i(node: Node, token: str, namespace: str) -> set[tuple[str, frozenset[str]]]:
    out = node.kubectl("--token", token, "auth", "can-i", "--list", "-n", namespace).stdout
    rules = set()
    for line in out.splitlines()[1:]:
        # Resources  Non-Resource URLs  Resource Names  Verbs, e.g. "nodes  []  []  [get list]";
        # a rule limited to named objects is kept as "resource/name"
        m = re.match(r"(\S+)\s+\[[^\]]*\]\s+\[([^\]]*)\]\s+\[([^\]]*)\]\s*$", line)
        if m is None or m.group(1).startswith("["):  # non-resource URLs
            continue
        resource, names, verbs = m.group(1), m.group(2).split(), frozenset(m.group(3).split())
        if resource in EVERYONE:
            continue
        for key in [f"{resource}/{n}" for n in names] or [resource]:
            rules.add((key, verbs))
    return rules


def helm_install(node: Node, doc: dict[str, Any]) -> None:
    path = node.base / "install-values.yaml"
    path.write_text(yaml.safe_dump(doc))
    node.run(
        "helm", "install", RELEASE, str(REPO / "charts" / "nri-resmgr"),
        "--namespace", NAMESPACE, "-f", str(path), "--wait", "--timeout", "180s",
        timeout=240,
    )  # fmt: skip


def helm_uninstall(node: Node) -> None:
    node.run("helm", "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", timeout=180)
    node.wait_for(lambda: not daemon_pods(node), timeout=120, what="the daemon pod gone")


STARTUP_PODS = 30


def pod_startup_seconds(node: Node, prefix: str) -> list[float]:
    """Create STARTUP_PODS Burstable pods one after another through the API; for each,
    seconds from the create request to the first read that shows phase Running."""
    client = node.cluster.client
    base = "/api/v1/namespaces/default/pods"
    out = []
    for i in range(STARTUP_PODS):
        name = f"{prefix}-{i}"
        started = time.monotonic()
        client.request(
            "POST", base, body=pod_manifest(name, cpu="50m", memory="16Mi", limits=False)
        )
        while True:
            phase = (client.request("GET", f"{base}/{name}").get("status") or {}).get("phase")
            if phase == "Running":
                break
            assert phase in (None, "Pending"), f"pod {name}: phase {phase}"
            assert time.monotonic() - started < 120, f"pod {name} not Running in 120 s"
            time.sleep(0.02)
        out.append(time.monotonic() - started)
    node.kubectl("delete", "pods", "-n", "default", "--all", "--wait=true", "--timeout=180s")
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]
