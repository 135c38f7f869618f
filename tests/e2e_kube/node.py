"""A real Kubernetes of one or more nodes on this machine: every part real, every path private.

Theory of operation
-------------------
`kube_cluster(specs)` starts, in order, and stops in reverse (`kube_node()` is the
one-node cluster of `SINGLE`, the suite's classic node; `built_cluster` builds what a
cluster runs, as the e2e fixtures do, for a bench run outside pytest; the host state of
steps 1, 3 and 5 is made and given back by tests/e2e_kube/host.py):

1. per node a Linux bridge with its own /24 (`NodeSpec`; the CNI bridge plugin adopts
   it), the first node's address the API server's, one that both this host and the pods
   of every node can reach;
2. etcd + kube-apiserver (tests/k8s/cluster.py) on 10.88.77.1 with Node,RBAC
   authorization and ServiceAccount admission, so pods get real projected tokens and RBAC
   is enforced for everyone but the admin token;
3. iptables DNAT rules (a private nat chain, one rule per node subnet) for the
   `kubernetes` Service address 10.96.0.1:443 -> the API server: the one thing kube-proxy
   would do that a pod's in-cluster client needs; there is no kube-proxy;
4. per node containerd 2.3.7 or 1.7.35 (tests/e2e build) with NRI on at a private socket,
   Debian's runc and Debian's CNI plugins (bridge, host-local, loopback) with a private
   conflist, the e2e pause and busybox images imported into `k8s.io`;
5. kube-controller-manager and kube-scheduler, and per node a kubelet (cgroupfs driver,
   `failCgroupV1: false`, CPU manager `none`, pods under the node's private cgroup root),
   all v1.34.4 built by tests/k8s/components.py.

Two kubelets on one machine (../shared/KUBELET-NOTES.md, "Two nodes on one machine"):
each has its own root and cert dirs, cgroup root, bridge address, ports (kubelet and
healthz), `podLogsDir` (a shared one lets each kubelet's container GC remove the other's
logs) and node name; the second and later ones do not make the iptables utility chains
(`makeIPTablesUtilChains: false`: two kubelets making them at once can leave a duplicate
jump behind).  The kubelets' device plugin socket is fixed and shared (no device plugins
here).  Both nodes report the whole machine as capacity.

Two runs on one machine with the same names would break each other (each kubelet kills
the other's pods as orphans of its cgroup root): `kube_cluster` first holds its nodes'
names (`host.held`; its kubelets hold them too), so the second waits for the first.

The kubelet would otherwise leave host state behind: the kernel tunables it sets
(vm.overcommit_memory, kernel.panic, kernel.panic_on_oops) and net.ipv4.ip_forward (the
bridge plugin) are saved first and restored at the end; its cgroups, mounts, iptables
canary chains and the bridge are removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.e2e import containerd as ctdmod
from tests.e2e.images import build_images
from tests.e2e.layout import Layout, unmount_under
from tests.e2e_kube.host import (
    HOLD_TIMEOUT,
    POD_LOGS,
    PROCESS_LOGS,
    bridge,
    cgroup_root,
    held,
    keep_logs,
    kubelet_chains_removed,
    make_cgroup_root,
    saved_sysctls,
    service_nat,
)
from tests.k8s.cluster import Cluster, _free_port, control_plane
from tests.k8s.components import build_node_components
from tests.peers import build_helm
from tests.support.waiting import wait_for

#: NRI_RESMGR_KUBE_SLOT=N (1-9) gives a run its own bridge, subnet, NAT chain and cgroup
#: root, so a long run (the soak, tests/e2e_kube/soak.py) and the test suite's node can run
#: on one machine at the same time; 0 (the default) is the suite's own
SLOT = int(os.environ.get("NRI_RESMGR_KUBE_SLOT", "0") or "0")


_SUFFIX = str(SLOT) if SLOT else ""


BRIDGE = f"nrk{SLOT}"


GATEWAY = f"10.88.{77 + 10 * SLOT}.1"


SUBNET = f"10.88.{77 + 10 * SLOT}.0/24"


NAT_CHAIN = f"NRI-RESMGR-KUBE{_SUFFIX}"


CGROUP_ROOT = f"nri-resmgr-kube{_SUFFIX}"


NODE_NAME = "nri-resmgr-node"


@dataclass(frozen=True)
class NodeSpec:
    """What is private to one node: its name, bridge, /24 (``gateway`` is its .1) and
    cgroup root; `kubelet_chains` is false on every node after the first; `max_pods`, where
    set, the kubelet's ``maxPods`` (its default is 110)."""

    name: str
    bridge: str
    gateway: str
    cgroup_root: str
    kubelet_chains: bool = True
    max_pods: int | None = None

    @property
    def subnet(self) -> str:
        return self.gateway.rsplit(".", 1)[0] + ".0/24"


#: the suite's classic single node
SINGLE = NodeSpec(NODE_NAME, BRIDGE, GATEWAY, CGROUP_ROOT)


#: the two-node cluster's nodes (their own bridges, subnets and cgroup roots, so that it
#: may run beside the single node of another test session or a soak's)
TWO_NODES = (
    NodeSpec("node-a", "nrkc-a", "10.88.91.1", "nri-resmgr-node-a"),
    NodeSpec("node-b", "nrkc-b", "10.88.92.1", "nri-resmgr-node-b", kubelet_chains=False),
)


#: the two-node cluster's nat chain
TWO_NODES_NAT = "NRI-RESMGR-KUBE-CLUSTER"


CNI_PLUGINS = Path("/usr/lib/cni")


@dataclass
class Node:
    """The running node and how to drive it as an operator would."""

    cluster: Cluster
    ctd: ctdmod.Containerd
    base: Path
    kubeconfig: Path
    env: dict[str, str]  # PATH with kubectl, helm and ctr; KUBECONFIG
    name: str = NODE_NAME

    def run(
        self, *argv: str, check: bool = True, stdin: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            argv, capture_output=True, text=True, env=self.env, timeout=timeout, input=stdin
        )
        if check and r.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited with {r.returncode}:\n{r.stdout}\n{r.stderr}"
            )
        return r

    def kubectl(
        self, *args: str, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", *args, check=check, stdin=stdin)

    def get(self, *args: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.kubectl("get", "-o", "json", *args).stdout)
        return data

    def apply(self, *docs: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))

    def wait_for(self, predicate: Any, *, timeout: float = 120, what: str) -> Any:
        return wait_for(predicate, what=what, timeout=timeout, interval=0.5)


def _write_cni(base: Path, spec: NodeSpec) -> None:
    bins = base / "cni-bin"
    for plugin in ("bridge", "host-local", "loopback", "portmap"):
        link = bins / plugin
        if not link.exists():
            link.symlink_to(CNI_PLUGINS / plugin)
    (base / "cni-conf" / "10-nri-resmgr-kube.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "nri-resmgr-kube",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": spec.bridge,
                        "isGateway": True,
                        "ipMasq": False,
                        "ipam": {
                            "type": "host-local",
                            "dataDir": str(base / "cni-ipam"),
                            "ranges": [[{"subnet": spec.subnet, "gateway": spec.gateway}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                        },
                    }
                ],
            }
        )
    )


def _kubelet_config(base: Path, ctd: ctdmod.Containerd, spec: NodeSpec) -> Path:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": spec.gateway,
        "port": _free_port(),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": _free_port(),
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{spec.cgroup_root}",
        "failCgroupV1": False,
        "failSwapOn": False,
        "cpuManagerPolicy": "none",
        "containerRuntimeEndpoint": ctd.layout.endpoint,
        "imageServiceEndpoint": ctd.layout.endpoint,
        # the API server's kubelet client has no certificate here: logs and exec go
        # through anonymous access on the bridge address, which only this host reaches
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": False,
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "nodeStatusUpdateFrequency": "5s",
        "volumeStatsAggPeriod": "0s",
        "featureGates": {},
        "podLogsDir": str(base / "pod-logs"),
        "makeIPTablesUtilChains": spec.kubelet_chains,
    }
    if spec.max_pods is not None:
        config["maxPods"] = spec.max_pods
    path = base / "kubelet.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _start(
    argv: Sequence[str], log: Path, procs: list[subprocess.Popen[bytes]], *, fds: Sequence[int] = ()
) -> None:
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True, pass_fds=fds
        )
    procs.append(proc)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
    for p in reversed(procs):
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def node_ready(node: Node) -> bool:
    with contextlib.suppress(AssertionError):
        status = node.get("node", node.name)["status"]
        return any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []
        )
    return False


def _logs_tail(base: Path, n: int = 40) -> str:
    out = []
    for log in sorted([*base.glob("*.log"), *base.glob("*/*.log")]):
        lines = log.read_text(errors="replace").splitlines()[-n:]
        out.append(f"--- {log.relative_to(base)} ---\n" + "\n".join(lines))
    return "\n".join(out)


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop processes: TERM, then KILL after 20 s, the last started first."""
    _stop(procs)


@dataclass
class KubeCluster:
    """The running cluster: its control plane, its nodes in `NodeSpec` order, and the
    binaries it was built from (tests start another scheduler with `k8s`)."""

    cluster: Cluster
    base: Path
    kubeconfig: Path
    nodes: list[Node]
    k8s: dict[str, Path]
    procs: list[subprocess.Popen[bytes]]

    def start(self, argv: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
        """Start a process that the cluster stops (if still running) at its end."""
        _start(argv, log, self.procs)
        return self.procs[-1]


def _kubelet_argv(
    k8s: dict[str, Path], base: Path, ctd: ctdmod.Containerd, spec: NodeSpec, kubeconfig: Path
) -> list[str]:
    return [
        str(k8s["kubelet"]),
        f"--config={_kubelet_config(base, ctd, spec)}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={base / 'kubelet'}",
        f"--cert-dir={base / 'kubelet-pki'}",
        f"--hostname-override={spec.name}",
        f"--node-ip={spec.gateway}",
        # 2: the kubelet says why it kills a container or starts a pod's sandbox anew
        "--v=2",
    ]


def scheduler_argv(k8s: dict[str, Path], kubeconfig: Path, certs: Path, *extra: str) -> list[str]:
    """A kube-scheduler of this cluster (`extra`: e.g. its ``--config``)."""
    return [
        str(k8s["kube-scheduler"]),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={_free_port()}",
        f"--cert-dir={certs}",
        "--v=1",
        *extra,
    ]


@contextlib.contextmanager
def kube_cluster(
    specs: Sequence[NodeSpec],
    *,
    nat_chain: str,
    release: ctdmod.Release,
    ctd_bins: dict[str, Path],
    crictl: Path,
    images: Sequence[Path],
    k8s: dict[str, Path],
    helm: Path,
    logs: str | None = None,
) -> Iterator[KubeCluster]:
    """Start the cluster (see the module docstring); stop and clean everything afterwards.

    The processes' and the daemon pods' logs are kept in ``.cache/e2e/logs/`` under
    `logs` (by default ``kube`` and the slot, or ``kube-cluster``), replacing the last.

    A node whose kubelet exits or that is not Ready in 240 s fails the start (with the
    logs' tails).  With one node its files are in the cluster's directory itself (as they
    always were); with more, each node's are in a directory named after it."""
    base = Path(tempfile.mkdtemp(prefix="k8s-", dir="/tmp"))
    kept = ctdmod.CACHE / "logs" / (logs or ("kube-cluster" if specs[1:] else f"kube{_SUFFIX}"))
    shutil.rmtree(kept, ignore_errors=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with contextlib.ExitStack() as stack:
            locks = stack.enter_context(held([s.bridge for s in specs], timeout=HOLD_TIMEOUT))
            stack.enter_context(saved_sysctls())
            stack.enter_context(kubelet_chains_removed())
            for spec in specs:
                stack.enter_context(cgroup_root(spec.cgroup_root))
                stack.enter_context(bridge(spec.bridge, spec.gateway))
            cluster = stack.enter_context(
                control_plane(
                    base / "cp",
                    address=specs[0].gateway,
                    authorization="Node,RBAC",
                    service_accounts=True,
                    # the node's name resolves nowhere: reach the kubelet by its address
                    extra_args=["--kubelet-preferred-address-types=InternalIP"],
                )
            )
            api = cluster.creds.server.split("://", 1)[1]
            stack.enter_context(service_nat(nat_chain, [s.subnet for s in specs], api))
            kubeconfig = cluster.kubeconfig()

            dirs = [base] if len(specs) == 1 else [base / spec.name for spec in specs]
            ctds = []
            for spec, node_dir in zip(specs, dirs, strict=True):
                node_dir.mkdir(exist_ok=True)
                ctd = ctdmod.Containerd(release, ctd_bins, crictl, Layout(node_dir))
                _write_cni(node_dir, spec)
                ctd.start()
                stack.callback(ctd.cleanup)
                for archive in images:
                    ctd.import_image(archive)
                ctds.append(ctd)

            certs = base / "cp" / "certs"
            stack.callback(_stop, procs)
            _start(
                [
                    str(k8s["kube-controller-manager"]),
                    f"--kubeconfig={kubeconfig}",
                    f"--authentication-kubeconfig={kubeconfig}",
                    f"--authorization-kubeconfig={kubeconfig}",
                    f"--service-account-private-key-file={base / 'cp' / 'sa.key'}",
                    f"--root-ca-file={certs / 'apiserver.crt'}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={_free_port()}",
                    f"--cert-dir={base / 'kcm-certs'}",
                    "--node-monitor-grace-period=20s",
                    "--v=1",
                ],
                base / "kube-controller-manager.log",
                procs,
            )
            _start(
                scheduler_argv(k8s, kubeconfig, base / "sched-certs"),
                base / "kube-scheduler.log",
                procs,
            )
            kubelets: list[subprocess.Popen[bytes]] = []
            for spec, node_dir, ctd in zip(specs, dirs, ctds, strict=True):
                # an empty cgroup of the root was seen gone from some hierarchies (memory,
                # pids, systemd) by the time a second kubelet started (not traced): made
                # again where missing, just before the kubelet checks it
                make_cgroup_root(spec.cgroup_root)
                _start(
                    _kubelet_argv(k8s, node_dir, ctd, spec, kubeconfig),
                    node_dir / "kubelet.log",
                    procs,
                    fds=locks,
                )
                kubelets.append(procs[-1])

            bin_dir = base / "path"
            bin_dir.mkdir()
            for name, target in (
                ("kubectl", k8s["kubectl"]),
                ("helm", helm),
                ("ctr", ctd_bins["ctr"]),
            ):
                (bin_dir / name).symlink_to(target)
            nodes = []
            for spec, node_dir, ctd in zip(specs, dirs, ctds, strict=True):
                env = {
                    "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOME": str(base),
                    "KUBECONFIG": str(kubeconfig),
                    "CONTAINERD_ADDRESS": str(ctd.layout.grpc_socket),
                    "LANG": "C.UTF-8",
                }
                nodes.append(
                    Node(
                        cluster=cluster,
                        ctd=ctd,
                        base=node_dir,
                        kubeconfig=kubeconfig,
                        env=env,
                        name=spec.name,
                    )
                )
            deadline = time.monotonic() + 240
            for node in nodes:
                while not node_ready(node):
                    for p in procs:
                        if p.poll() is not None:
                            raise RuntimeError(
                                f"{p.args!r} exited with {p.returncode}:\n{_logs_tail(base)}"
                            )
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"node {node.name} not Ready in 240 s:\n{_logs_tail(base)}"
                        )
                    time.sleep(1)
            # the daemons' logs go with their containers: kept before containerd's cleanup
            stack.callback(keep_logs, base, kept, *POD_LOGS)
            # the kubelets stop first, so that they do not restart what containerd's
            # cleanup removes
            stack.callback(_stop, kubelets)
            yield KubeCluster(
                cluster=cluster, base=base, kubeconfig=kubeconfig, nodes=nodes, k8s=k8s, procs=procs
            )
    finally:
        keep_logs(base, kept, *PROCESS_LOGS)
        unmount_under(base)
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def kube_node(
    *,
    release: ctdmod.Release,
    ctd_bins: dict[str, Path],
    crictl: Path,
    images: Sequence[Path],
    k8s: dict[str, Path],
    helm: Path,
    run: str = "",
) -> Iterator[Node]:
    """The suite's single node (`SINGLE`), as `kube_cluster` starts it; its logs are kept
    under ``kube`` (and the slot) and `run`, e.g. the test module and release."""
    with kube_cluster(
        (SINGLE,),
        nat_chain=NAT_CHAIN,
        release=release,
        ctd_bins=ctd_bins,
        crictl=crictl,
        images=images,
        k8s=k8s,
        helm=helm,
        logs="-".join(p for p in (f"kube{_SUFFIX}", run) if p),
    ) as cluster:
        yield cluster.nodes[0]


@contextlib.contextmanager
def built_cluster(
    specs: Sequence[NodeSpec], *, nat_chain: str, go: str, release: ctdmod.Release
) -> Iterator[KubeCluster]:
    """`kube_cluster` of `specs` with everything it runs built first as the e2e fixtures
    build it (containerd `release`, crictl, the pause and test images, the Kubernetes
    components, helm; every build cached by content): a bench's cluster outside pytest."""
    with kube_cluster(
        specs,
        nat_chain=nat_chain,
        release=release,
        ctd_bins=ctdmod.build(release, go),
        crictl=ctdmod.build(ctdmod.CRI_TOOLS, go)["crictl"],
        images=build_images(
            ctdmod.CACHE / "images", sandbox_ref=ctdmod.SANDBOX_IMAGE, test_ref=ctdmod.TEST_IMAGE
        ),
        k8s=build_node_components(),
        helm=Path(build_helm()),
    ) as cluster:
        yield cluster
