"""CreateContainer through a real containerd (crictl), the peers side by side, in one run.

Usage: python -m bench.containerd_rt [--release containerd-2] [--levels 10,100]
                                     [--samples 30] [--out FILE]

Reuses the e2e suite's cached builds and fixtures (tests/e2e: containerd, crictl, the
busybox images, runc on this host). One private containerd per peer, all running at
once; each gets one external plugin on its NRI socket:

* ``none``: no plugin (containerd's own cost: the baseline);
* ``go-noop``: the Go stub no-op (`bench/go/noop`);
* ``nri-plugins``: nri-plugins' topology-aware, `--host-root /` (this host's sysfs);
* ``nri-resmgr``: `nri-resmgr run --policy topology-aware --sysfs-root /`.

Both policies reserve CPU 0 (``cpuset:0``): this host has 2 CPUs, so only shared
containers are possible (an exclusive CPU would empty the shared pool). Live containers
are BestEffort (pods and containers running busybox sleep); each probe is a Burstable
(10m) container in its own pod, created with ``crictl create`` (timed, wall clock, in
this process: crictl start-up + CRI + containerd + NRI + plugin), then removed with its
pod. Probes are interleaved over the containerds in a shuffled order. The cost NRI adds
is a peer's time minus ``none``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import build_go_noop, build_nri_plugins, load_note, machine, rss_kib, spawn
from bench.stats import summary_us
from tests._support import go_binary
from tests.e2e import containerd as ctdmod
from tests.e2e import cri
from tests.e2e.images import build_images

DAEMON = Path(__file__).resolve().parent / "plugins" / "resmgr.py"
PEERS = ("none", "go-noop", "nri-plugins", "nri-resmgr")
PROBE = cri.Resources(cpu_request=10, memory_request=16 << 20)
LIVE = cri.BESTEFFORT
NP_CONFIG = """\
apiVersion: config.nri/v1alpha1
kind: TopologyAwarePolicy
metadata:
  name: default
spec:
  pinCPU: true
  pinMemory: true
  reservedResources:
    cpu: cpuset:0
"""
PLUGIN_NAMES = {"go-noop": "10-gonoop", "nri-plugins": "90-topology-aware",
                "nri-resmgr": "90-resmgr"}


def _argv(peer: str, ctd: ctdmod.Containerd, work: Path) -> list[str]:
    sock = str(ctd.layout.nri_socket)
    if peer == "go-noop":
        return [str(build_go_noop()), "-socket", sock, "-idx", "10", "-name", "gonoop"]
    if peer == "nri-plugins":
        cfg = work / "np.yaml"
        cfg.write_text(NP_CONFIG)
        # It bind-mounts files from its state dir into every container ("rslave"), which
        # containerd allows only from a shared mount (on a node: the hostPath's mount).
        state = work / "np-state"
        state.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", str(state), str(state)], check=True)
        subprocess.run(["mount", "--make-rshared", str(state)], check=True)
        return [str(build_nri_plugins()), "--config-file", str(cfg), "--nri-socket", sock,
                "--nri-plugin-index", "90", "--nri-plugin-name", "topology-aware",
                "--state-dir", str(work / "np-state"), "--pid-file", str(work / "np.pid")]
    cfg = work / "resmgr.json"
    cfg.write_text(json.dumps({
        "policy": "topology-aware",
        "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}},
        "log": {"level": "info", "format": "json", "file": str(work / "resmgr.log")},
    }))
    return [sys.executable, str(DAEMON), "--socket", sock, "--idx", "90", "--name", "resmgr",
            "--config", str(cfg), "--sysfs-root", "/", "--state-dir", str(work / "state")]


def _wait_synced(ctd: ctdmod.Containerd, plugin: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in ctd.log_text().splitlines():
            if plugin in line and ("synchronized" in line or "synchronization success" in line):
                return
        time.sleep(0.1)
    raise RuntimeError(f"containerd never synchronized {plugin}:\n{ctd.log_tail(30)}")


def _cleanup_cgroups(ctd: ctdmod.Containerd) -> None:
    for spec in (ctd.layout.base / "specs").glob("pod-*.json"):
        with contextlib.suppress(ValueError, KeyError, OSError):
            parent = json.loads(spec.read_text())["linux"]["cgroup_parent"]
            for controller in os.listdir(cri.CGROUP_ROOT):
                cri.remove_cgroup_tree(controller, parent)


@contextlib.contextmanager
def containerd_with(
    peer: str, release: ctdmod.Release, bins: dict[str, Path], crictl: Path,
    images: list[Path],
) -> Iterator[tuple[ctdmod.Containerd, int | None]]:
    base = Path(tempfile.mkdtemp(prefix=f"bc-{peer[:4]}-", dir="/tmp"))
    ctd = ctdmod.Containerd(release, bins, crictl, ctdmod.Layout(base))
    proc = None
    try:
        ctd.start()
        for archive in images:
            ctd.import_image(archive)
        if peer != "none":
            proc = spawn(_argv(peer, ctd, base), log_path=base / f"{peer}.log", cwd=base)
            _wait_synced(ctd, PLUGIN_NAMES[peer])
        yield ctd, proc.pid if proc else None
    finally:
        try:
            ctd.cleanup()
        finally:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=20)
            _cleanup_cgroups(ctd)
            ctdmod._unmount_under(base)
            shutil.rmtree(base, ignore_errors=True)


def run(*, release_name: str, levels: list[int], samples: int, seed: int) -> dict[str, Any]:
    go = go_binary()
    if go is None:
        raise RuntimeError("bench: no Go toolchain to build containerd")
    release = ctdmod.RELEASES[release_name]
    bins = ctdmod.build(release, go)
    crictl = ctdmod.build(ctdmod.CRI_TOOLS, go)["crictl"]
    images = build_images(ctdmod.CACHE / "images", sandbox_ref=ctdmod.SANDBOX_IMAGE,
                          test_ref=ctdmod.TEST_IMAGE)
    out: dict[str, Any] = {"machine": machine(), "release": f"{release.name} {release.version}",
                           "levels": {}}
    with contextlib.ExitStack() as stack:
        ctds = {p: stack.enter_context(containerd_with(p, release, bins, crictl, images))
                for p in PEERS}
        rng = random.Random(seed)
        count = 0
        for n in levels:
            for i in range(count, n):
                for ctd, _pid in ctds.values():
                    pod = cri.run_pod(ctd, f"live{i}", qos=cri.QoS.BESTEFFORT)
                    cri.run_container(ctd, pod, "app", resources=LIVE)
            count = n
            times: dict[str, list[int]] = {p: [] for p in PEERS}
            order = list(PEERS)
            for i in range(samples):
                rng.shuffle(order)
                for p in order:
                    ctd = ctds[p][0]
                    pod = cri.run_pod(ctd, f"probe{n}-{i}", qos=cri.QoS.BURSTABLE)
                    t0 = time.perf_counter_ns()
                    c, err = cri.create_container(ctd, pod, "probe", resources=PROBE)
                    dt = time.perf_counter_ns() - t0
                    if c is None:
                        raise RuntimeError(f"{p}: crictl create failed: {err}")
                    times[p].append(dt)
                    ctd.crictl("rm", c.id)
                    cri.remove_pod(ctd, pod)
            out["levels"][str(n)] = {p: summary_us(times[p]) for p in PEERS}
            out["levels"][str(n)]["load"] = load_note()
        out["rss_kib"] = {p: rss_kib(pid) for p, (_c, pid) in ctds.items() if pid}
    return out


def table(result: dict[str, Any]) -> str:
    rows = [f"**crictl create through {result['release']} (ms, wall clock), p50 / p99**", "",
            "| live | no plugin | Go stub no-op | nri-plugins | nri-resmgr | NRI cost p50: "
            "Go no-op / nri-plugins / nri-resmgr | load |", "|---|---|---|---|---|---|---|"]
    for n, r in result["levels"].items():
        cells = [f"{r[p]['p50_us'] / 1000:.1f} / {r[p]['p99_us'] / 1000:.1f}" for p in PEERS]
        base = r["none"]["p50_us"]
        cost = " / ".join(f"{(r[p]['p50_us'] - base) / 1000:+.1f}" for p in PEERS[1:])
        rows.append(f"| {n} | " + " | ".join(cells) + f" | {cost} | {r['load']} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--release", default="containerd-2")
    ap.add_argument("--levels", default="10,100")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="bench/out/containerd.json")
    ns = ap.parse_args()
    if os.geteuid() != 0:
        print("bench.containerd_rt: containerd and runc need root", file=sys.stderr)
        return 2
    result = run(release_name=ns.release, levels=[int(x) for x in ns.levels.split(",")],
                 samples=ns.samples, seed=ns.seed)
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
