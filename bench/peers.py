"""nri-resmgr side by side with Go peers, through the real NRI adaptation, in one run.

Usage: python -m bench.peers [--levels 10,100,1000] [--samples 100] [--sync-containers 1000]
                             [--startup-reps 5] [--out FILE]

Peers, each an external process on its own fake runtime (tests/conformance/harness,
NRI v0.12.2):

* ``go-noop``: a no-op plugin written with the Go stub (`bench/go/noop`);
* ``nri-plugins``: containers/nri-plugins' topology-aware plugin, built unchanged from its
  Go module (`tests.peers.make_nri_plugins`), run with ``--config-file`` (no Kubernetes
  API server) and ``--host-root`` on a synthetic sysfs tree;
* ``nri-resmgr``: our daemon, `nri-resmgr run`, topology-aware, ``--sysfs-root`` on the
  same tree (`bench/plugins/resmgr.py` maps the harness's plugin flags to its options).

The machine is `examples/topologies/server-2s-224t.yaml` (2 sockets, 4 NUMA nodes, 224
threads) written as sysfs by `write_sysfs`; both policies reserve 750m. Measured:

1. CreateContainer round trip, timed inside Go around the adaptation call, at each level
   of live containers (`bench.workload`); probes alternate shared (burstable 100m) and
   exclusive (guaranteed 1 CPU), each stopped and removed after its sample; requests are
   interleaved over the peers in a shuffled order so all see the same load;
2. Synchronize with `--sync-containers` running containers (no cpusets yet, so a policy
   places all of them), timed in Go; one fresh runtime per peer and repetition, with the
   request timeout (which covers the whole Synchronize) raised to 15 min so that every
   peer finishes; runs over the default 2 s are counted;
3. process start -> registered and synchronized with an empty runtime: spawn to
   `wait_synced` (external, all peers) and the runtime's Start with the plugin
   pre-registered (go-noop and nri-resmgr; the launcher execs the plugin), wall clock;
4. resident memory (VmRSS) of each plugin process after the largest level.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import functools
import json
import random
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    build_go_noop,
    build_nri_plugins,
    load_note,
    machine,
    rss_kib,
    spawn,
)
from bench.stats import summary_us
from bench.workload import live, probe, running
from nri_resmgr.topology.load import load_topology
from tests.conformance.harness import GoRuntime, go_runtime, short_tempdir
from tests.differential.host import host_root
from tests.differential.machines import TA_CONFIG
from tests.differential.plugins import DAEMON, ours_argv, theirs_argv

REPO = Path(__file__).resolve().parents[1]
TOPOLOGY = REPO / "examples" / "topologies" / "server-2s-224t.yaml"
PEERS = ("go-noop", "nri-plugins", "nri-resmgr")
KINDS = ("shared", "exclusive")
VERSION = "v0.12.2"
SYNC_TIMEOUT_MS = 900_000
REQUEST_TIMEOUT_MS = 60_000


class Peers:
    """How to start each peer against a fake runtime; built binaries; the sysfs tree."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.root = work / "host"
        host_root(load_topology(str(TOPOLOGY)), self.root)
        self.noop = build_go_noop()
        self.np_config = work / "topology-aware.yaml"
        self.np_config.write_text(TA_CONFIG)
        self.resmgr_config = work / "resmgr.json"
        self.resmgr_config.write_text(
            json.dumps(
                {
                    "policy": "topology-aware",
                    "policyConfig": {"reservedResources": {"cpu": "750m"}},
                    "log": {"level": "info", "format": "json", "file": str(work / "resmgr.log")},
                }
            )
        )

    @functools.cached_property
    def nri_plugins(self) -> Path:
        """nri-plugins' binary, built on first use (bench.goals runs without it)."""
        return build_nri_plugins()

    def argv(self, peer: str, rt: GoRuntime, *, state_dir: Path | None = None) -> list[str]:
        if peer == "go-noop":
            return [str(self.noop), "-socket", str(rt.socket), "-idx", "10", "-name", "gonoop"]
        if peer == "nri-plugins":
            state = rt.dir / "np-state"
            state.mkdir(exist_ok=True)
            return theirs_argv(
                self.nri_plugins,
                socket=rt.socket,
                config=self.np_config,
                root=self.root,
                state_dir=state,
                name="topology-aware",
            )
        return ours_argv(
            socket=rt.socket,
            config=self.resmgr_config,
            root=self.root,
            state_dir=state_dir or rt.dir / "state",
            name="resmgr",
        )

    def start(
        self, peer: str, rt: GoRuntime, *, state_dir: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """Start `peer` as an external plugin of `rt`; nri-resmgr keeps its state in
        `state_dir` (default: a fresh one in the runtime's directory)."""
        argv = self.argv(peer, rt, state_dir=state_dir)
        proc = spawn(argv, log_path=rt.dir / f"{peer}.log", cwd=rt.dir)
        rt.externals.append(proc)
        return proc

    def preregister(self, peer: str, rt: GoRuntime) -> None:
        """Install `peer` as runtime-launched 90-NAME (go-noop and nri-resmgr only)."""
        if peer == "go-noop":
            launcher = rt.plugin_dir / "10-gonoop"
            launcher.write_text(f"#!/bin/sh\nexec {self.noop}\n")
            launcher.chmod(0o755)
            return
        if peer == "nri-resmgr":
            rt.install_preregistered(
                DAEMON,
                idx="90",
                name="resmgr",
                config=self.resmgr_config.read_text(),
                args=["--sysfs-root", str(self.root), "--state-dir", str(rt.dir / "state")],
            )
            return
        raise ValueError(f"peer {peer!r}: no pre-registered mode here")


#: the packages the daemon runs from (their bytecode is what a start-up row loads)
PACKAGES = ("nri_api", "nri_resmgr")


def compile_bytecode(root: Path = REPO) -> None:
    """Write the daemon's bytecode (`__pycache__`) before a start-up row is timed.

    An installed daemon runs from compiled bytecode (pip compiles at install, an image
    keeps it).  A daemon the benchmarks start inherits this environment, and with
    ``PYTHONDONTWRITEBYTECODE`` set (as in the agents' shells) every module edited since
    its bytecode was last written is compiled again at each start: the start-up rows then
    measured the compiler (1.4-2.0 s to connect instead of 0.5 s, load 1-3) by how many
    files a merge had touched.  Compiling first makes them measure the daemon.
    """
    for package in PACKAGES:
        if not compileall.compile_dir(root / package, quiet=1):
            raise RuntimeError(
                f"bench: compiling {root / package}: expected every module to compile, "
                "found one that does not (listed above)"
            )


def _log_tail(rt: GoRuntime, peer: str) -> str:
    path = rt.dir / f"{peer}.log"
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"


@contextlib.contextmanager
def attached(peers: Peers, peer: str) -> Iterator[tuple[GoRuntime, subprocess.Popen[bytes]]]:
    with go_runtime(VERSION) as rt:
        # containerd's default request timeout is 2 s; nri-plugins exceeds it at 1,000 live
        # containers on this machine and gets disconnected, so it is raised here and the
        # requests over 2 s are counted instead.
        rt.start(request_timeout_ms=REQUEST_TIMEOUT_MS)
        proc = peers.start(peer, rt)
        try:
            rt.wait_synced(timeout=60)
        except Exception as exc:
            raise RuntimeError(f"{peer} did not synchronize: {exc}\n{_log_tail(rt, peer)}") from exc
        yield rt, proc


def _check_alive(p: str, rt: GoRuntime, proc: subprocess.Popen[bytes], where: str) -> None:
    if proc.poll() is not None:
        raise RuntimeError(
            f"{p} exited with {proc.returncode} {where}; its requests would now go unanswered "
            f"and be timed without it\n{_log_tail(rt, p)}\n{rt.logs()[-20:]}"
        )


def createcontainer(
    peers: Peers,
    *,
    levels: list[int],
    samples: int,
    warmup: int,
    seed: int,
    save: Callable[[dict[str, Any]], None],
    names: Sequence[str] = PEERS,
    kinds: Sequence[str] = KINDS,
) -> dict[str, Any]:
    out: dict[str, Any] = {"levels": {}, "rss_kib": {}}
    with contextlib.ExitStack() as stack:
        rts = {p: stack.enter_context(attached(peers, p)) for p in names}
        out["request_timeout_ms"] = REQUEST_TIMEOUT_MS
        rng = random.Random(seed)
        count = 0
        for n in levels:
            for pod, ctr in live(n, start=count):
                for rt, _proc in rts.values():
                    rt.run_pod(pod)
                    rt.create_container(pod, ctr)
                    rt.start_container(pod, ctr)
            count = n
            for p, (rt, proc) in rts.items():
                _check_alive(p, rt, proc, f"while filling to {n} live containers")
            times: dict[str, dict[str, list[int]]] = {p: {k: [] for k in kinds} for p in names}
            order = list(names)
            for i in range(warmup + samples):
                for kind in kinds:
                    pod, ctr = probe(kind, i)
                    rng.shuffle(order)
                    for p in order:
                        rt = rts[p][0]
                        rt.run_pod(pod)
                        try:
                            rt.create_container(pod, ctr)
                        except Exception as exc:
                            raise RuntimeError(
                                f"{p}: CreateContainer {kind} at {n} live: {exc}\n"
                                f"{_log_tail(rt, p)}"
                            ) from exc
                        if i >= warmup:
                            times[p][kind].append(int(rt.last_reply["elapsed_ns"]))
                        rt.stop_container(pod, ctr)
                        rt.remove_container(pod, ctr)
                        rt.stop_pod(pod)
                        rt.remove_pod(pod)
            for p, (rt, proc) in rts.items():
                _check_alive(p, rt, proc, f"during the probes at {n} live containers")
            out["levels"][str(n)] = {
                p: {
                    k: {
                        **summary_us(times[p][k]),
                        "over_2s": sum(t > 2_000_000_000 for t in times[p][k]),
                    }
                    for k in kinds
                }
                for p in names
            }
            out["levels"][str(n)]["load"] = load_note()
            out["rss_kib"] = {p: rss_kib(proc.pid) for p, (_rt, proc) in rts.items()}
            out["rss_at"] = n
            save(out)
    return out


def synchronize(
    peers: Peers,
    *,
    containers: int,
    reps: int,
    names: Sequence[str] = PEERS,
    seed: int = 1,
) -> dict[str, Any]:
    state = live(containers, prefix="s")
    pods = [pod for pod, _ in state]
    ctrs = [running(ctr) for _, ctr in state]
    res: dict[str, list[int]] = {p: [] for p in names}
    updates: dict[str, int] = {}
    rng = random.Random(seed)
    order = list(names)
    for _ in range(reps):
        rng.shuffle(order)
        for p in order:
            with go_runtime(VERSION) as rt:
                # One request timeout covers the whole Synchronize; the default 2 s is too
                # short for nri-plugins here, so it is raised; runs over 2 s are counted.
                rt.start(pods=pods, containers=ctrs, request_timeout_ms=SYNC_TIMEOUT_MS)
                peers.start(p, rt)
                try:
                    sync = rt.wait_synced(timeout=SYNC_TIMEOUT_MS / 1000)
                except Exception as exc:
                    raise RuntimeError(f"{p}: Synchronize: {exc}\n{_log_tail(rt, p)}") from exc
                res[p].append(sync.elapsed_ns)
                updates[p] = len(sync.updates)
    return {
        "containers": containers,
        "reps": reps,
        "ms": {p: sorted(round(v / 1e6, 1) for v in res[p]) for p in names},
        "median_ms": {p: sorted(res[p])[len(res[p]) // 2] / 1e6 for p in names},
        "updates": updates,
        "request_timeout_ms": SYNC_TIMEOUT_MS,
        "over_default_2s": {p: sum(v > 2e9 for v in res[p]) for p in names},
        "load": load_note(),
    }


def startup(peers: Peers, *, reps: int) -> dict[str, Any]:
    ext: dict[str, list[float]] = {p: [] for p in PEERS}
    pre: dict[str, list[float]] = {p: [] for p in ("go-noop", "nri-resmgr")}
    compile_bytecode()
    for _ in range(reps):
        for p in PEERS:
            with go_runtime(VERSION) as rt:
                rt.start()
                t0 = time.perf_counter()
                peers.start(p, rt)
                rt.wait_synced(timeout=60)
                ext[p].append(time.perf_counter() - t0)
        for p in pre:
            with go_runtime(VERSION) as rt:
                peers.preregister(p, rt)
                t0 = time.perf_counter()
                sync = rt.start()
                pre[p].append(time.perf_counter() - t0)
                if sync is None:
                    raise RuntimeError(f"{p}: pre-registered start-up: no start-up sync")
    return {
        "reps": reps,
        "external_ms": {p: sorted(round(v * 1000, 1) for v in ext[p]) for p in ext},
        "preregistered_ms": {p: sorted(round(v * 1000, 1) for v in pre[p]) for p in pre},
        "load": load_note(),
    }


def _med(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def tables(result: dict[str, Any]) -> str:
    rows: list[str] = []
    cc = result.get("createcontainer", {"levels": {}, "rss_kib": {}})
    rows += [
        "**CreateContainer round trip (µs, timed in Go), p50 / p99**",
        "",
        "| live | probe | Go stub no-op | nri-plugins topology-aware | nri-resmgr "
        "topology-aware | nri-resmgr / nri-plugins p50 | nri-resmgr / Go no-op p50 "
        "| requests over 2 s (np / ours) | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, r in cc["levels"].items():
        for k in KINDS:
            g, np_, us = r["go-noop"][k], r["nri-plugins"][k], r["nri-resmgr"][k]
            rows.append(
                f"| {n} | {k} | {g['p50_us']} / {g['p99_us']} | {np_['p50_us']} / "
                f"{np_['p99_us']} | {us['p50_us']} / {us['p99_us']} | "
                f"{us['p50_us'] / np_['p50_us']:.2f} | {us['p50_us'] / g['p50_us']:.2f} "
                f"| {np_.get('over_2s', '-')} / {us.get('over_2s', '-')} | {r['load']} |"
            )
    if "synchronize" in result:
        s = result["synchronize"]
        rows += [
            "",
            f"**Synchronize with {s['containers']} running containers (ms, timed in "
            f"Go; {s['reps']} runs each)**",
            "",
            "| peer | median | all runs | runs over the default 2 s | updates returned |",
            "|---|---|---|---|---|",
        ]
        for p in PEERS:
            rows.append(
                f"| {p} | {s['median_ms'][p]:.1f} | {s['ms'][p]} | "
                f"{s['over_default_2s'][p]} | {s['updates'][p]} |"
            )
    if "startup" in result:
        st = result["startup"]
        rows += [
            "",
            f"**Process start -> registered and synchronized (ms, wall; {st['reps']} runs each)**",
            "",
            "| peer | external median | pre-registered median | "
            "all external | all pre-registered |",
            "|---|---|---|---|---|",
        ]
        for p in PEERS:
            ext = st["external_ms"][p]
            pre = st["preregistered_ms"].get(p)
            rows.append(
                f"| {p} | {_med(ext)} | {_med(pre) if pre else 'n/a'} | {ext} | "
                f"{pre if pre else 'n/a'} |"
            )
    rss = cc["rss_kib"]
    if not rss:
        return "\n".join(rows)
    rows += [
        "",
        f"**Resident memory after {cc['rss_at']} live containers (VmRSS, MiB)**",
        "",
        "| peer | RSS MiB |",
        "|---|---|",
    ]
    for p in PEERS:
        rows.append(f"| {p} | {rss[p] / 1024:.1f} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--levels", default="10,100,1000")
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--sync-containers", type=int, default=1000)
    ap.add_argument("--sync-reps", type=int, default=3)
    ap.add_argument("--startup-reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skip", default="", help="comma list of: create,sync,startup")
    ap.add_argument(
        "--merge", action="store_true", help="keep the other sections of an existing --out file"
    )
    ap.add_argument("--out", default="bench/out/peers.json")
    ns = ap.parse_args()
    skip = set(filter(None, ns.skip.split(",")))
    out = Path(ns.out)
    result: dict[str, Any] = {}
    if ns.merge and out.exists():
        result = json.loads(out.read_text())
    result.update({"machine": machine(), "nri_version": VERSION})
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(section: str) -> Callable[[dict[str, Any]], None]:
        def write(value: dict[str, Any]) -> None:
            result[section] = value
            result["load_after"] = load_note()
            out.write_text(json.dumps(result, indent=1) + "\n")

        return write

    with short_tempdir("nri-bench-") as work:
        peers = Peers(work)
        if "startup" not in skip:
            save("startup")(startup(peers, reps=ns.startup_reps))
        if "create" not in skip:
            createcontainer(
                peers,
                levels=[int(x) for x in ns.levels.split(",")],
                samples=ns.samples,
                warmup=ns.warmup,
                seed=ns.seed,
                save=save("createcontainer"),
            )
        if "sync" not in skip:
            save("synchronize")(
                synchronize(peers, containers=ns.sync_containers, reps=ns.sync_reps)
            )
    print(tables(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
