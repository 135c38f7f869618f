"""A real single-node Kubernetes for tests: every part real, every path private.

Theory of operation
-------------------
`kube_node()` starts, in order, and stops in reverse:

1. a Linux bridge `nrk0` with 10.88.77.1/24 (the CNI bridge plugin adopts it), so the API
   server has an address that both this host and the pods can reach;
2. etcd + kube-apiserver (tests/k8s/cluster.py) on 10.88.77.1 with Node,RBAC
   authorization and ServiceAccount admission, so pods get real projected tokens and RBAC
   is enforced for everyone but the admin token;
3. one iptables DNAT rule (a private nat chain) for the `kubernetes` Service address
   10.96.0.1:443 -> the API server: the one thing kube-proxy would do that a pod's
   in-cluster client needs; there is no kube-proxy;
4. containerd 2.3.7 or 1.7.35 (tests/e2e build) with NRI on at a private socket, Debian's runc and
   Debian's CNI plugins (bridge, host-local, loopback) with a private conflist, the e2e
   pause and busybox images imported into `k8s.io`;
5. kube-controller-manager and kube-scheduler, and the kubelet (cgroupfs driver,
   `failCgroupV1: false`, CPU manager `none`, pods under the private cgroup root
   /nri-resmgr-kube), all v1.34.4 built by tests/k8s/components.py.

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
from tests.e2e import cri
from tests.k8s.cluster import Cluster, _free_port, control_plane
from tests.support.waiting import wait_for

#: NRI_RESMGR_KUBE_SLOT=N (1-9) gives a run its own bridge, subnet, NAT chain and cgroup
#: root, so a long run (the soak, tests/e2e_kube/soak.py) and the test suite's node can run
#: on one machine at the same time; 0 (the default) is the suite's own
SLOT = int(os.environ.get("NRI_RESMGR_KUBE_SLOT", "0") or "0")
_SUFFIX = str(SLOT) if SLOT else ""
BRIDGE = f"nrk{SLOT}"
GATEWAY = f"10.88.{77 + 10 * SLOT}.1"
SUBNET = f"10.88.{77 + 10 * SLOT}.0/24"
SERVICE_IP = "10.96.0.1"
NAT_CHAIN = f"NRI-RESMGR-KUBE{_SUFFIX}"
CGROUP_ROOT = f"nri-resmgr-kube{_SUFFIX}"
NODE_NAME = "nri-resmgr-node"
SYSCTLS = ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops", "net.ipv4.ip_forward")
CNI_PLUGINS = Path("/usr/lib/cni")


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


@contextlib.contextmanager
def _saved_sysctls() -> Iterator[None]:
    saved = {name: _sysctl_path(name).read_text() for name in SYSCTLS}
    try:
        yield
    finally:
        for name, value in saved.items():
            with contextlib.suppress(OSError):
                _sysctl_path(name).write_text(value)


@contextlib.contextmanager
def _bridge() -> Iterator[None]:
    _sh("ip", "link", "del", BRIDGE, check=False)
    _sh("ip", "link", "add", BRIDGE, "type", "bridge")
    try:
        _sh("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        _sh("ip", "link", "set", BRIDGE, "up")
        yield
    finally:
        _sh("ip", "link", "del", BRIDGE, check=False)


def _remove_service_nat() -> None:
    _sh("iptables", "-w", "-t", "nat", "-D", "PREROUTING", "-j", NAT_CHAIN, check=False)
    _sh("iptables", "-w", "-t", "nat", "-F", NAT_CHAIN, check=False)
    _sh("iptables", "-w", "-t", "nat", "-X", NAT_CHAIN, check=False)


@contextlib.contextmanager
def _service_nat(api_port: int) -> Iterator[None]:
    _remove_service_nat()  # what a killed earlier run left
    _sh("iptables", "-w", "-t", "nat", "-N", NAT_CHAIN)
    try:
        _sh(
            "iptables", "-w", "-t", "nat", "-A", NAT_CHAIN, "-s", SUBNET, "-d", SERVICE_IP,
            "-p", "tcp", "--dport", "443", "-j", "DNAT",
            "--to-destination", f"{GATEWAY}:{api_port}",
        )  # fmt: skip
        _sh("iptables", "-w", "-t", "nat", "-I", "PREROUTING", "-j", NAT_CHAIN)
        yield
    finally:
        _remove_service_nat()


def _iptables_chains() -> set[tuple[str, str]]:
    out = set()
    for table in ("filter", "nat", "mangle"):
        r = _sh("iptables", "-w", "-t", table, "-S", check=False)
        for line in r.stdout.splitlines():
            if line.startswith("-N "):
                out.add((table, line.split()[1]))
    return out


@contextlib.contextmanager
def _kubelet_chains_removed() -> Iterator[None]:
    before = _iptables_chains()
    try:
        yield
    finally:
        for table, chain in sorted(_iptables_chains() - before):
            if chain.startswith("KUBE-"):
                for builtin in ("INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"):
                    _sh("iptables", "-w", "-t", table, "-D", builtin, "-j", chain, check=False)
                _sh("iptables", "-w", "-t", table, "-F", chain, check=False)
                _sh("iptables", "-w", "-t", table, "-X", chain, check=False)


def _v1_controllers() -> list[str]:
    return sorted(
        p.name
        for p in cri.CGROUP_ROOT.iterdir()
        if p.is_dir() and not p.is_symlink() and (p / "cgroup.procs").exists()
    )


@contextlib.contextmanager
def _cgroup_root() -> Iterator[None]:
    """The kubelet's --cgroup-root, made in every v1 hierarchy, and removed afterwards."""
    for controller in _v1_controllers():
        top = cri.CGROUP_ROOT / controller / CGROUP_ROOT
        top.mkdir(exist_ok=True)
        if controller == "cpuset":
            for name in ("cpuset.cpus", "cpuset.mems"):
                (top / name).write_text((top.parent / name).read_text())
    try:
        yield
    finally:
        for controller in _v1_controllers():
            cri.kill_cgroup_tree(controller, f"/{CGROUP_ROOT}")
        for controller in _v1_controllers():
            top = cri.CGROUP_ROOT / controller / CGROUP_ROOT
            # deepest first: a cgroup directory goes only once its children have
            for path in sorted(top.glob("**/"), key=lambda p: len(p.parts), reverse=True):
                for _ in range(50):  # a killed process leaves its cgroup a moment later
                    try:
                        path.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)


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


def _write_cni(base: Path) -> None:
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
                        "bridge": BRIDGE,
                        "isGateway": True,
                        "ipMasq": False,
                        "ipam": {
                            "type": "host-local",
                            "dataDir": str(base / "cni-ipam"),
                            "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                        },
                    }
                ],
            }
        )
    )


def _kubelet_config(base: Path, ctd: ctdmod.Containerd) -> Path:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": GATEWAY,
        "port": _free_port(),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": _free_port(),
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
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
    }
    if SLOT:
        # the default /var/log/pods is shared: each kubelet's log GC would remove the other's
        config["podLogsDir"] = str(base / "pod-logs")
    path = base / "kubelet.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _start(argv: Sequence[str], log: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    with open(log, "ab") as out:
        procs.append(
            subprocess.Popen(
                list(argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        )


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
    for log in sorted(base.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-n:]
        out.append(f"--- {log.name} ---\n" + "\n".join(lines))
    return "\n".join(out)


@contextlib.contextmanager
def kube_node(
    *,
    release: ctdmod.Release,
    ctd_bins: dict[str, Path],
    crictl: Path,
    images: Sequence[Path],
    k8s: dict[str, Path],
    helm: Path,
) -> Iterator[Node]:
    """Start the node (see the module docstring); stop and clean everything afterwards."""
    base = Path(tempfile.mkdtemp(prefix="k8s-", dir="/tmp"))
    procs: list[subprocess.Popen[bytes]] = []
    ctd: ctdmod.Containerd | None = None
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_saved_sysctls())
            stack.enter_context(_kubelet_chains_removed())
            stack.enter_context(_cgroup_root())
            stack.enter_context(_bridge())
            cluster = stack.enter_context(
                control_plane(
                    base / "cp",
                    address=GATEWAY,
                    authorization="Node,RBAC",
                    service_accounts=True,
                    # the node's name resolves nowhere: reach the kubelet by its address
                    extra_args=["--kubelet-preferred-address-types=InternalIP"],
                )
            )
            api_port = int(cluster.creds.server.rsplit(":", 1)[1])
            stack.enter_context(_service_nat(api_port))
            kubeconfig = cluster.kubeconfig()

            ctd = ctdmod.Containerd(release, ctd_bins, crictl, ctdmod.Layout(base))
            _write_cni(base)
            ctd.start()
            stack.callback(ctd.cleanup)
            for archive in images:
                ctd.import_image(archive)

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
                [
                    str(k8s["kube-scheduler"]),
                    f"--kubeconfig={kubeconfig}",
                    f"--authentication-kubeconfig={kubeconfig}",
                    f"--authorization-kubeconfig={kubeconfig}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={_free_port()}",
                    f"--cert-dir={base / 'sched-certs'}",
                    "--v=1",
                ],
                base / "kube-scheduler.log",
                procs,
            )
            _start(
                [
                    str(k8s["kubelet"]),
                    f"--config={_kubelet_config(base, ctd)}",
                    f"--kubeconfig={kubeconfig}",
                    f"--root-dir={base / 'kubelet'}",
                    f"--cert-dir={base / 'kubelet-pki'}",
                    f"--hostname-override={NODE_NAME}",
                    f"--node-ip={GATEWAY}",
                    "--v=1",
                ],
                base / "kubelet.log",
                procs,
            )

            bin_dir = base / "path"
            bin_dir.mkdir()
            for name, target in (
                ("kubectl", k8s["kubectl"]),
                ("helm", helm),
                ("ctr", ctd_bins["ctr"]),
            ):
                (bin_dir / name).symlink_to(target)
            env = {
                "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME": str(base),
                "KUBECONFIG": str(kubeconfig),
                "CONTAINERD_ADDRESS": str(ctd.layout.grpc_socket),
                "LANG": "C.UTF-8",
            }
            node = Node(cluster=cluster, ctd=ctd, base=base, kubeconfig=kubeconfig, env=env)
            deadline = time.monotonic() + 240
            while not node_ready(node):
                for p in procs:
                    if p.poll() is not None:
                        raise RuntimeError(
                            f"{p.args!r} exited with {p.returncode}:\n{_logs_tail(base)}"
                        )
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {NODE_NAME} not Ready in 240 s:\n{_logs_tail(base)}")
                time.sleep(1)
            # the kubelet stops first, so that it does not restart what containerd's
            # cleanup removes
            stack.callback(_stop, procs[2:])
            yield node
    finally:
        dest = ctdmod.CACHE / "logs" / f"kube{_SUFFIX}"
        dest.mkdir(parents=True, exist_ok=True)
        for log in [*base.glob("*.log"), base / "cp" / "control-plane.log"]:
            with contextlib.suppress(OSError):
                shutil.copy(log, dest / log.name)
        ctdmod._unmount_under(base)
        shutil.rmtree(base, ignore_errors=True)
