"""The host state a test node needs, made and given back: what `node.kube_cluster` stacks.

Each is a context manager that undoes what it did, or what the kubelet did, on the way
out, so that a node leaves the machine as it found it; and first `held`, the node's names
for this run alone: `saved_sysctls` (the kernel
tunables the kubelet and the bridge plugin set, `SYSCTLS`), `kubelet_chains_removed`
(the iptables chains the kubelet made), `cgroup_root` (a kubelet's --cgroup-root in
every cgroup v1 hierarchy, its processes killed and directories removed after),
`bridge` (a node's Linux bridge and /24) and `service_nat` (the DNAT rules that take the
``kubernetes`` Service address, `SERVICE_IP`, to the API server for the pods of the
given subnets); and `keep_logs`, what is kept of a node's logs after it.

Two runs on one machine (two test sessions, or a session and a soak) must not use the same
names: the second would replace the first's bridge and NAT chain, and its kubelet, seeing
pod cgroups under its cgroup root that are not its pods', would kill their processes every
housekeeping pass (2 s) as orphans: the first run's pods then die about a second after each
start, sandbox after sandbox.  `held` makes the second run wait for the first instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.e2e import cri

SERVICE_IP = "10.96.0.1"


SYSCTLS = ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops", "net.ipv4.ip_forward")


#: where `held` keeps its lock files (one a name, ``nri-resmgr-kube-NAME.lock``)
LOCK_DIR = Path("/run/lock")


#: seconds a cluster waits for another run on this machine to give its names back
#: (`held`): a test module's node lives about ten minutes at most, a soak longer
HOLD_TIMEOUT = 1800


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def lock_path(name: str) -> Path:
    return LOCK_DIR / f"nri-resmgr-kube-{name}.lock"


def lock_holders(path: Path) -> list[str]:
    """The processes that have `path` open, as "pid (command line)"."""
    out = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) == str(path) for fd in fd_dir.iterdir()):
                argv = (fd_dir.parent / "cmdline").read_bytes().split(b"\0")
                command = " ".join(a.decode(errors="replace") for a in argv if a)
                out.append(f"{fd_dir.parent.name} ({command[:160]})")
    return sorted(out)


def _lock(fd: int, name: str, *, timeout: float, poll: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                path = lock_path(name)
                mine = f"{os.getpid()} "
                holders = [h for h in lock_holders(path) if not h.startswith(mine)]
                raise TimeoutError(
                    f"test node name {name!r}: expected it free for this run within "
                    f"{timeout:g} s; another run holds it ({path}): "
                    f"{'; '.join(holders) or 'no process found'}"
                ) from None
            time.sleep(poll)


@contextlib.contextmanager
def held(names: Sequence[str], *, timeout: float, poll: float = 1.0) -> Iterator[list[int]]:
    """Hold `names` (a node's bridge name, which names its subnet, NAT chain and cgroup
    root too) for this run alone: an flock on one file a name, taken in sorted order, so
    two runs wanting overlapping names cannot deadlock.  A name another run holds is waited
    for, up to `timeout` seconds; then a TimeoutError names the processes holding it.

    Yields the locked file descriptors.  A process started with them (``pass_fds``: the
    kubelets) holds the names as long as it lives: a kubelet that an interrupted run left
    behind keeps them held, and is named here, instead of killing the next run's pods."""
    fds: list[int] = []
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    try:
        for name in sorted(set(names)):
            fds.append(os.open(lock_path(name), os.O_RDWR | os.O_CREAT, 0o644))
            _lock(fds[-1], name, timeout=timeout, poll=poll)
        yield fds
    finally:
        for fd in fds:
            os.close(fd)


#: a cluster's logs that `keep_logs` keeps: its processes' (a node's own in its directory
#: when there are more nodes), and the daemon pods' (NAMESPACE_nri-resmgr-..._UID)
PROCESS_LOGS = ("*.log", "*/*.log", "cp/control-plane.log")
POD_LOGS = ("pod-logs/*_nri-resmgr*/*/*.log", "*/pod-logs/*_nri-resmgr*/*/*.log")


def keep_logs(base: Path, dest: Path, *patterns: str) -> None:
    """Copy the files of `base` that `patterns` match to `dest`, named by their path."""
    dest.mkdir(parents=True, exist_ok=True)
    for pattern in patterns:
        for log in base.glob(pattern):
            with contextlib.suppress(OSError):
                shutil.copy(log, dest / str(log.relative_to(base)).replace("/", "-"))


def sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


@contextlib.contextmanager
def saved_sysctls() -> Iterator[None]:
    saved = {name: sysctl_path(name).read_text() for name in SYSCTLS}
    try:
        yield
    finally:
        for name, value in saved.items():
            with contextlib.suppress(OSError):
                sysctl_path(name).write_text(value)


@contextlib.contextmanager
def bridge(name: str, gateway: str) -> Iterator[None]:
    """The Linux bridge `name` with `gateway`/24 on it (a stale one of that name replaced)."""
    sh("ip", "link", "del", name, check=False)
    sh("ip", "link", "add", name, "type", "bridge")
    try:
        sh("ip", "addr", "add", f"{gateway}/24", "dev", name)
        sh("ip", "link", "set", name, "up")
        yield
    finally:
        sh("ip", "link", "del", name, check=False)


def remove_service_nat(chain: str) -> None:
    sh("iptables", "-w", "-t", "nat", "-D", "PREROUTING", "-j", chain, check=False)
    sh("iptables", "-w", "-t", "nat", "-F", chain, check=False)
    sh("iptables", "-w", "-t", "nat", "-X", chain, check=False)


@contextlib.contextmanager
def service_nat(chain: str, subnets: Sequence[str], api: str) -> Iterator[None]:
    """DNAT of `SERVICE_IP`:443 to `api` for the pods of `subnets`, in the nat chain `chain`."""
    remove_service_nat(chain)  # what a killed earlier run left
    sh("iptables", "-w", "-t", "nat", "-N", chain)
    try:
        for subnet in subnets:
            sh(
                "iptables", "-w", "-t", "nat", "-A", chain, "-s", subnet, "-d", SERVICE_IP,
                "-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", api,
            )  # fmt: skip
        sh("iptables", "-w", "-t", "nat", "-I", "PREROUTING", "-j", chain)
        yield
    finally:
        remove_service_nat(chain)


def iptables_chains() -> set[tuple[str, str]]:
    out = set()
    for table in ("filter", "nat", "mangle"):
        r = sh("iptables", "-w", "-t", table, "-S", check=False)
        for line in r.stdout.splitlines():
            if line.startswith("-N "):
                out.add((table, line.split()[1]))
    return out


@contextlib.contextmanager
def kubelet_chains_removed() -> Iterator[None]:
    before = iptables_chains()
    try:
        yield
    finally:
        for table, chain in sorted(iptables_chains() - before):
            if chain.startswith("KUBE-"):
                for builtin in ("INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"):
                    sh("iptables", "-w", "-t", table, "-D", builtin, "-j", chain, check=False)
                sh("iptables", "-w", "-t", table, "-F", chain, check=False)
                sh("iptables", "-w", "-t", table, "-X", chain, check=False)


def v1_controllers() -> list[str]:
    return sorted(
        p.name
        for p in cri.CGROUP_ROOT.iterdir()
        if p.is_dir() and not p.is_symlink() and (p / "cgroup.procs").exists()
    )


def make_cgroup_root(name: str) -> None:
    """A kubelet's --cgroup-root in every v1 hierarchy (where it is not already)."""
    for controller in v1_controllers():
        top = cri.CGROUP_ROOT / controller / name
        top.mkdir(exist_ok=True)
        if controller == "cpuset":
            for file in ("cpuset.cpus", "cpuset.mems"):
                (top / file).write_text((top.parent / file).read_text())


@contextlib.contextmanager
def cgroup_root(name: str) -> Iterator[None]:
    """A kubelet's --cgroup-root, made in every v1 hierarchy, and removed afterwards."""
    make_cgroup_root(name)
    try:
        yield
    finally:
        for controller in v1_controllers():
            cri.kill_cgroup_tree(controller, f"/{name}")
        for controller in v1_controllers():
            top = cri.CGROUP_ROOT / controller / name
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
