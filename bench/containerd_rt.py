"""The peers through a real containerd (crictl), one at a time on one containerd.

Usage: python -m bench.containerd_rt [--release containerd-2|containerd-1.7|crio]
                                     [--levels 10,100,1000]
                                     [--samples 30] [--rounds 3] [--startup-reps 5]
                                     [--request-timeout 120s] [--cri-timeout 120]
                                     [--peer-budget 90] [--out FILE]

Reuses the e2e suite's cached builds and fixtures (tests/e2e: containerd, crictl, the
busybox images, runc on this host). One private containerd; the peers take turns on its
NRI socket, so every peer sees the same runtime with the same live containers:

* ``none``: no plugin (containerd's own cost: the baseline);
* ``go-noop``: the Go stub no-op (`bench/go/noop`);
* ``nri-plugins``: nri-plugins' topology-aware, `--host-root /` (this host's sysfs);
* ``nri-resmgr``: `nri-resmgr run --policy topology-aware --sysfs-root /`.

Both policies reserve CPU 0 (``cpuset:0``). What is measured, all wall clock:

1. **Start-up, empty runtime.** External: from `exec` of the plugin to containerd's log
   line "plugin ... registered" (and to "connected and synchronized"). Pre-registered
   (go-noop and nri-resmgr; nri-plugins is not meant to be runtime-launched): containerd
   is restarted with a launcher in its plugin dir, and the time is taken from its log,
   "starting pre-installed NRI plugin" to "synchronization success".
2. **Per level of live containers** (10, 100, 1,000: BestEffort busybox containers, ten
   per pod, so 1,000 containers need 100 shims): containers are created while no plugin
   is connected, already pinned where both policies put BestEffort work (every online
   CPU but 0, every online memory node), so a peer's Synchronize measures its own work
   and not `runc update` of every container. Then, in ``--rounds`` shuffled rounds, each
   peer in turn connects (Synchronize time: containerd's "synchronizing plugin" to
   "connected and synchronized" log lines), takes its share of the probes, reports its
   resident memory, and is stopped. A probe is a Burstable (10m) container in its own
   pod; only ``crictl create`` is timed (crictl start-up + CRI + containerd + NRI +
   plugin), then the container and pod are removed. The cost NRI adds is a peer's time
   minus ``none``'s in the same round.

containerd's NRI request timeout (default 2 s) also bounds Synchronize; the bench raises
it (``--request-timeout``) so that slow peers are measured rather than dropped, and counts
the requests over 2 s. Each CRI call may take ``--cri-timeout`` (120 s, the kubelet's
default runtime request timeout); a create that fails is counted, with its time until
failure. A peer whose probes of one round have taken ``--peer-budget`` seconds stops that
round early, so the tables give the sample count where it is short.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import load_note, machine, rss_kib
from bench.rt_peers import attached, prepare_nri_plugins_state, preregistered_startup
from bench.stats import percentile, summary_us
from tests.e2e import containerd as ctdmod
from tests.e2e import cri
from tests.e2e import crio as criomod
from tests.e2e.images import build_images
from tests.e2e.layout import Layout, unmount_under
from tests.support.requirements import go_binary, online_cpus

PEERS: tuple[str, ...] = ("none", "go-noop", "nri-plugins", "nri-resmgr")


PLUGINS = PEERS[1:]


PREREGISTERED = ("go-noop", "nri-resmgr")


PROBE = cri.Resources(cpu_request=10, memory_request=16 << 20)


PER_POD = 10


def _online(path: str) -> str:
    return Path(path).read_text().strip()


def _live_resources() -> dict[str, Any]:
    """BestEffort resources, pinned where both policies place BestEffort containers."""
    cpus = online_cpus()
    shared = sorted(cpus - {0}) if len(cpus) > 1 else sorted(cpus)
    out = cri.BESTEFFORT.linux()
    out["cpuset_cpus"] = ",".join(map(str, shared))
    out["cpuset_mems"] = _online("/sys/devices/system/node/online")
    return out


def _fill_pod(ctd: ctdmod.Containerd, index: int, count: int, resources: dict[str, Any]) -> None:
    pod = cri.run_pod(ctd, f"live{index}", qos=cri.QoS.BESTEFFORT)
    for j in range(count):
        config = cri.container_config(pod, f"app{j}")
        config["linux"]["resources"] = resources
        path = ctd.layout.base / "specs" / f"ctr-live{index}-{j}-{pod.uid[:8]}.json"
        path.write_text(json.dumps(config))
        cid = ctd.crictl("create", pod.id, str(path), str(pod.config_path)).stdout.strip()
        ctd.crictl("start", cid)


def fill(ctd: ctdmod.Containerd, have: int, want: int, workers: int = 4) -> None:
    """Add live containers, PER_POD to a pod, until `want` run."""
    resources = _live_resources()
    jobs = []
    index = have // PER_POD
    while have < want:
        count = min(PER_POD, want - have)
        jobs.append((index, count))
        index += 1
        have += count
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for f in [pool.submit(_fill_pod, ctd, i, c, resources) for i, c in jobs]:
            f.result()


def probe(ctd: ctdmod.Containerd, tag: str) -> tuple[int, str]:
    """Time one `crictl create` of a Burstable container in a fresh pod.

    Returns (ns, "") or, when the create fails (the CRI deadline included), the time until
    it failed and crictl's error. The container and the pod are removed either way.
    """
    pod = cri.run_pod(ctd, f"probe-{tag}", qos=cri.QoS.BURSTABLE)
    t0 = time.perf_counter_ns()
    c, err = cri.create_container(ctd, pod, "probe", resources=PROBE, check=False)
    dt = time.perf_counter_ns() - t0
    if c is not None:
        ctd.crictl("rm", c.id)
    ctd.crictl("stopp", pod.id, check=False)
    ctd.crictl("rmp", "-f", pod.id, check=False)
    return dt, "" if c is not None else (err.strip().splitlines() or ["?"])[-1]


@contextlib.contextmanager
def private_containerd(
    release_name: str, request_timeout: str
) -> Iterator[tuple[ctdmod.Containerd, Path]]:
    go = go_binary()
    if go is None:
        raise RuntimeError("bench: no Go toolchain to build containerd")
    crictl = ctdmod.build(ctdmod.CRI_TOOLS, go)["crictl"]
    images = build_images(
        ctdmod.CACHE / "images", sandbox_ref=ctdmod.SANDBOX_IMAGE, test_ref=ctdmod.TEST_IMAGE
    )
    base = Path(tempfile.mkdtemp(prefix="bc-", dir="/tmp"))
    ctd: ctdmod.Containerd
    if release_name == criomod.CRIO.name:  # the same bench on CRI-O (tests/e2e/crio.py)
        ctd = criomod.Crio(criomod.build(go), crictl, Layout(base), request_timeout=request_timeout)
    else:
        release = ctdmod.RELEASES[release_name]
        bins = ctdmod.build(release, go)
        ctd = ctdmod.Containerd(
            release, bins, crictl, Layout(base), request_timeout=request_timeout
        )
    work = base / "work"
    work.mkdir()
    try:
        prepare_nri_plugins_state(work)
        ctd.start()
        for archive in images:
            ctd.import_image(archive)
        yield ctd, work
    finally:
        try:
            ctd.cleanup()
        finally:
            for spec in (base / "specs").glob("pod-*.json"):
                with contextlib.suppress(ValueError, KeyError, OSError):
                    parent = json.loads(spec.read_text())["linux"]["cgroup_parent"]
                    for controller in os.listdir(cri.CGROUP_ROOT):
                        cri.remove_cgroup_tree(controller, parent)
            unmount_under(base)
            shutil.rmtree(base, ignore_errors=True)


def run(
    *,
    release_name: str,
    levels: list[int],
    samples: int,
    rounds: int,
    startup_reps: int,
    request_timeout: str,
    cri_timeout: int,
    peer_budget: float,
    seed: int,
) -> dict[str, Any]:
    rng = random.Random(seed)
    budget_ns = int(peer_budget * 1e9)
    out: dict[str, Any] = {
        "machine": machine(),
        "levels": {},
        "rounds": rounds,
        "samples": samples,
        "request_timeout": request_timeout,
        "per_pod": PER_POD,
        "cri_timeout_s": cri_timeout,
        "peer_budget_s": peer_budget,
    }
    with private_containerd(release_name, request_timeout) as (ctd, work):
        # crictl's deadline for each CRI call: the kubelet's --runtime-request-timeout
        crictl_yaml = ctd.layout.base / "crictl.yaml"
        crictl_yaml.write_text(
            re.sub(r"timeout: \d+", f"timeout: {cri_timeout}", crictl_yaml.read_text())
        )
        out["release"] = f"{ctd.release.name} {ctd.release.version}"
        # 1. start-up on the empty runtime
        ext: dict[str, list[float]] = {p: [] for p in PLUGINS}
        pre: dict[str, list[float]] = {p: [] for p in PREREGISTERED}
        for _ in range(startup_reps):
            order = list(PLUGINS)
            rng.shuffle(order)
            for p in order:
                with attached(p, ctd, work) as info:
                    if "sync_error" in info:
                        raise RuntimeError(f"{p}: {info['sync_error']}")
                    ext[p].append(info["registered_s"])
        for _ in range(startup_reps):
            order = list(PREREGISTERED)
            rng.shuffle(order)
            for p in order:
                pre[p].append(preregistered_startup(p, ctd, work))
        out["startup_ms"] = {
            "external": {p: sorted(round(v * 1000, 1) for v in ext[p]) for p in PLUGINS},
            "preregistered": {p: sorted(round(v * 1000, 1) for v in pre[p]) for p in pre},
            "load": load_note(),
        }
        print(json.dumps(out["startup_ms"]), file=sys.stderr, flush=True)
        # 2. the levels
        live = 0
        for n in levels:
            t_fill = time.monotonic()
            fill(ctd, live, n)
            live = n
            times: dict[str, list[int]] = {p: [] for p in PEERS}
            sync: dict[str, list[float]] = {p: [] for p in PLUGINS}
            rss: dict[str, list[int]] = {p: [] for p in PLUGINS}
            failed: dict[str, list[str]] = {p: [] for p in PEERS}
            sync_errors: dict[str, list[str]] = {p: [] for p in PLUGINS}
            per_round = [samples // rounds + (r < samples % rounds) for r in range(rounds)]
            for r in range(rounds):
                order = list(PEERS)
                rng.shuffle(order)
                for p in order:
                    with contextlib.ExitStack() as stack:
                        if p != "none":
                            info = stack.enter_context(attached(p, ctd, work))
                            if "sync_error" in info:  # not connected: nothing to probe
                                sync_errors[p].append(info["sync_error"])
                                continue
                            sync[p].append(info["sync_s"])
                        spent = 0
                        for i in range(per_round[r]):
                            dt, err = probe(ctd, f"{n}-{p}-{r}-{i}")
                            times[p].append(dt)
                            spent += dt
                            if err:
                                failed[p].append(err)
                            if spent > budget_ns:
                                break  # this peer is too slow for every sample
                        if p != "none":
                            rss[p].append(rss_kib(info["pid"]))
            level: dict[str, Any] = {
                p: summary_us(times[p]) if times[p] else {"n": 0} for p in PEERS
            }
            for p in PEERS:
                level[p]["over_2s"] = sum(t > 2_000_000_000 for t in times[p])
                level[p]["failed"] = len(failed[p])
                level[p]["errors"] = sorted(set(failed[p]))
            level["sync_ms"] = {p: [round(v * 1000, 1) for v in sync[p]] for p in PLUGINS}
            level["sync_errors"] = sync_errors
            level["rss_kib"] = {p: max(rss[p], default=0) for p in PLUGINS}
            level["level_s"] = round(time.monotonic() - t_fill, 1)
            level["load"] = load_note()
            out["levels"][str(n)] = level
            print(json.dumps({n: level}), file=sys.stderr, flush=True)
    return out


def _cell(r: dict[str, Any], samples: int | None) -> str:
    """p50 / p99 in ms, with the sample count when short and the failures."""
    if not r["n"]:
        return "n/a"
    text = f"{r['p50_us'] / 1000:,.1f} / {r['p99_us'] / 1000:,.1f}"
    notes = []
    if samples and r["n"] < samples:
        notes.append(f"n={r['n']}")
    if r.get("failed"):
        notes.append(f"{r['failed']} failed")
    return text + (f" ({', '.join(notes)})" if notes else "")


def _ms(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{percentile(values, 50):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def table(result: dict[str, Any]) -> str:
    rel = result["release"]
    rows = [
        f"**crictl create through {rel}, ms (wall clock), p50 / p99**",
        "",
        f"| live | no plugin | {' | '.join(PLUGINS)} | NRI cost p50: "
        f"{' / '.join(PLUGINS)} | load |",
        "|---|---|" + "---|" * len(PLUGINS) + "---|---|",
    ]
    for n, r in result["levels"].items():
        cells = [_cell(r[p], result.get("samples")) for p in PEERS]
        base = r["none"]["p50_us"]
        cost = " / ".join(
            f"{(r[p]['p50_us'] - base) / 1000:+,.1f}" if r[p]["n"] else "n/a" for p in PLUGINS
        )
        rows.append(f"| {n:>5} | " + " | ".join(cells) + f" | {cost} | {r['load']} |")
    rows += [
        "",
        f"**Synchronize through {rel} (containerd's log), ms, median (range)**",
        "",
        f"| live | {' | '.join(PLUGINS)} | nri-resmgr / nri-plugins |",
        "|---|" + "---|" * len(PLUGINS) + "---|",
    ]
    for n, r in result["levels"].items():
        s = r["sync_ms"]
        ours, theirs = s.get("nri-resmgr", []), s.get("nri-plugins", [])
        ratio = (
            f"{percentile(ours, 50) / max(percentile(theirs, 50), 1e-3):.2g}"
            if ours and theirs
            else "n/a"
        )
        errors = r.get("sync_errors", {})
        cells = [
            _ms(s[p]) + (f" ({len(errors[p])} failed)" if errors.get(p) else "") for p in PLUGINS
        ]
        rows.append(f"| {n:>5} | " + " | ".join(cells) + f" | {ratio} |")
    rows += [
        "",
        "**Resident memory (VmRSS) after the probes, MiB**",
        "",
        f"| live | {' | '.join(PLUGINS)} | nri-resmgr / nri-plugins |",
        "|---|" + "---|" * len(PLUGINS) + "---|",
    ]
    for n, r in result["levels"].items():
        m = r["rss_kib"]
        rows.append(
            f"| {n:>5} | "
            + " | ".join(f"{m[p] / 1024:.1f}" for p in PLUGINS)
            + (
                f" | {m['nri-resmgr'] / m['nri-plugins']:.2g} |"
                if m.get("nri-plugins") and "nri-resmgr" in m
                else " | n/a |"
            )
        )
    st = result["startup_ms"]
    rows += [
        "",
        f"**Process start to registered, empty runtime, {rel}, ms, median (range)**",
        "",
        '| peer | external (exec to "registered") | pre-registered (launch to '
        '"synchronization success") |',
        "|---|---|---|",
    ]
    for p in PLUGINS:
        pre = st["preregistered"].get(p)
        rows.append(f"| {p} | {_ms(st['external'][p])} | {_ms(pre) if pre else 'not run'} |")
    return "\n".join(rows)


def main() -> int:
    global PEERS, PLUGINS  # --skip narrows these; the run and the tables iterate over them
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--release",
        default="containerd-2",
        choices=sorted([*ctdmod.RELEASES, criomod.CRIO.name]),
        help="a containerd release, or crio (CRI-O 1.36, tests/e2e/crio.py)",
    )
    ap.add_argument("--levels", default="10,100,1000")
    ap.add_argument("--samples", type=int, default=30, help="probes per peer and level")
    ap.add_argument("--rounds", type=int, default=3, help="turns per peer and level")
    ap.add_argument("--startup-reps", type=int, default=5)
    ap.add_argument(
        "--request-timeout",
        default="120s",
        help="containerd's plugin_request_timeout (its default is 2s)",
    )
    ap.add_argument(
        "--cri-timeout",
        type=int,
        default=120,
        help="crictl's per-call deadline, s (the kubelet's runtime-request-timeout is 2 min)",
    )
    ap.add_argument(
        "--peer-budget",
        type=float,
        default=90,
        help="probe time per peer, level and round, s, after which that peer stops early",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--skip", default="", help="peers to leave out, comma-separated (e.g. nri-plugins)"
    )
    ap.add_argument("--out", default="bench/out/containerd.json")
    ns = ap.parse_args()
    skip = {x for x in ns.skip.split(",") if x}
    if not skip <= set(PLUGINS):
        ap.error(f"--skip takes plugins among {', '.join(PLUGINS)}; got {ns.skip!r}")
    PEERS = tuple(p for p in PEERS if p not in skip)
    PLUGINS = PEERS[1:]
    if os.geteuid() != 0:
        print("bench.containerd_rt: containerd and runc need root", file=sys.stderr)
        return 2
    levels = [int(x) for x in ns.levels.split(",")]
    if levels != sorted(levels) or ns.rounds < 1 or ns.samples < ns.rounds:
        ap.error("--levels must rise; --samples must be at least --rounds (>= 1)")
    result = run(
        release_name=ns.release,
        levels=levels,
        samples=ns.samples,
        rounds=ns.rounds,
        startup_reps=ns.startup_reps,
        request_timeout=ns.request_timeout,
        cri_timeout=ns.cri_timeout,
        peer_budget=ns.peer_budget,
        seed=ns.seed,
    )
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
