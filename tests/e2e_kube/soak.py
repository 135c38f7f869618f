"""Upgrades under churn and the soak on the real node: the runners and their command.

Theory of operation
-------------------
Both runners work on the node of tests/e2e_kube/node.py with the chart installed (the
static policy, CPU 0 reserved), and judge only what the kernel shows
(tests/e2e_kube/churn.py: `settle` after every step, violations kept with the step).

* `run_upgrades(count)`: `Churn` creates and deletes pods on a thread while the main thread
  runs `count` rolling updates of the DaemonSet, cycling through the three kinds an operator
  ships: a new image tag (the same image tagged anew in containerd), a new configuration
  and a new chart version (a copy of the chart with its version bumped); each also bumps a
  pod annotation, so every one is a rolling update. The report has the windows without a
  connected daemon from containerd's log (length, containers created and refused in them),
  the violations after each upgrade, and the pods' start-up seconds during the upgrades
  against the others.
* `run_soak(minutes)`: one step about every few seconds, a pod of a random QoS class
  created or one deleted; once a minute, in turn, a fault: the configuration changed live
  (`helm upgrade` of `policyConfig`, waited for by its ConfigApplied or ConfigRejected
  Event), `helm upgrade` with a new pod template, the daemon `kill -9` (restarted by the
  kubelet, or, when the kubelet holds it in crash back-off, by deleting its pod), and
  containerd restarted; each waits for containerd's "connected and synchronized". After
  every step the invariants; the daemon's vital signs sampled each step.

The command runs the pytest scenario that drives them (the node's fixtures are pytest's):

    sudo python -m tests.e2e_kube.soak --minutes 60        # the one-hour soak
    sudo python -m tests.e2e_kube.soak --upgrades 10       # the upgrade measurement

Each writes its report as JSON to `.cache/e2e/soak/` and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from nri_resmgr.kube.client import KubeError
from tests.e2e import containerd as ctdmod
from tests.e2e_kube import churn
from tests.e2e_kube.image import Image
from tests.e2e_kube.node import Node
from tests.support.requirements import REPO, online_cpus

NAMESPACE = "kube-system"
RELEASE = "nri-resmgr"
PLUGIN = "90-resmgr"
CHART = REPO / "charts" / "nri-resmgr"
REPORTS = ctdmod.CACHE / "soak"
DS_PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
CONFIG_EVENTS = f"/api/v1/namespaces/{NAMESPACE}/events"


def write_report(kind: str, report: dict[str, Any]) -> Path:
    REPORTS.mkdir(parents=True, exist_ok=True)
    path = REPORTS / f"{kind}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return path


# -- operator's actions ------------------------------------------------------------------


def helm_upgrade(node: Node, doc: dict[str, Any], *, chart: Path = CHART, roll: bool) -> None:
    """`helm upgrade` to the values `doc`; with `roll`, waits for the DaemonSet's rollout."""
    path = node.base / "soak-values.yaml"
    path.write_text(yaml.safe_dump(doc))
    wait = ["--wait", "--timeout", "300s"] if roll else []
    node.run(
        "helm", "upgrade", RELEASE, str(chart), "--namespace", NAMESPACE, "-f", str(path),
        *wait, timeout=360,
    )  # fmt: skip
    if roll:
        node.run(
            "kubectl", "-n", NAMESPACE, "rollout", "status", "daemonset/nri-resmgr",
            "--timeout=300s", timeout=360,
        )  # fmt: skip


def wait_daemon(node: Node, *, other_than: int | None = None, timeout: float = 180) -> int:
    """Wait until one daemon is Ready (another process than `other_than`); its pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = churn.daemon_pid(node)
        if pid is not None and pid != other_than and churn.daemon_ip(node) is not None:
            return pid
        time.sleep(0.5)
    raise AssertionError(f"no Ready daemon within {timeout:g} s:\n{node.ctd.log_tail(30)}")


def log_offset(node: Node) -> int:
    """Where containerd's log ends now (for `wait_synchronized`)."""
    return node.ctd.layout.log.stat().st_size


def wait_synchronized(node: Node, offset: int, started: float, *, timeout: float = 180) -> float:
    """Wait until containerd's log, after byte `offset`, says the daemon connected and
    synchronized; the seconds since `started` (a time.monotonic())."""

    def synced() -> bool:
        with open(node.ctd.layout.log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        return f'plugin \\"{PLUGIN}\\" connected and synchronized' in text

    node.wait_for(synced, timeout=timeout, what=f"{PLUGIN} synchronized again")
    return time.monotonic() - started


def _config_outcomes(node: Node) -> int:
    items = node.cluster.client.request(
        "GET",
        CONFIG_EVENTS,
        query={"fieldSelector": "involvedObject.name=nri-resmgr-config.default"},
    )["items"]
    return sum(
        int(e.get("count") or 1)
        for e in items
        if e.get("reason") in ("ConfigApplied", "ConfigRejected")
    )


def new_image_tag(node: Node, image: Image, n: int) -> str:
    """The image tagged anew in containerd (as a release would push it); the new tag."""
    refs = node.run("ctr", "-n", "k8s.io", "images", "ls", "-q").stdout.split()
    # containerd holds a short name normalized (docker.io/library/NAME:TAG)
    (source,) = [r for r in refs if r.rsplit("/", 1)[-1] == f"{image.repository}:{image.tag}"]
    tag = f"{image.tag}-u{n}"
    target = f"{source.rsplit(':', 1)[0]}:{tag}"
    node.run("ctr", "-n", "k8s.io", "images", "tag", "--force", source, target)
    return tag


def new_chart_version(node: Node, n: int) -> Path:
    dest = node.base / f"chart-u{n}"
    shutil.copytree(CHART, dest)
    meta = yaml.safe_load((dest / "Chart.yaml").read_text())
    major, minor, _ = str(meta["version"]).split(".", 2)
    meta["version"] = f"{major}.{minor}.{100 + n}"
    (dest / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return dest


class Operator:
    """The release's values as the runs change them, and the changes themselves."""

    def __init__(self, node: Node, image: Image, base: dict[str, Any]) -> None:
        self.node, self.image = node, image
        self.doc: dict[str, Any] = json.loads(json.dumps(base))
        self.rev = 0
        self.upgrades = 0

    def _rolled(self) -> dict[str, Any]:
        self.rev += 1
        self.doc["podAnnotations"] = {"soak-rev": str(self.rev)}
        return self.doc

    def upgrade(self, kind: str) -> None:
        """One rolling update of the given kind: image, configuration or chart."""
        self.upgrades += 1
        doc, chart = self._rolled(), CHART
        if kind == "image":
            doc["image"] = {**doc["image"], "tag": new_image_tag(self.node, self.image, self.rev)}
        elif kind == "configuration":
            pin = doc["policyConfig"].get("pinMemory", True)
            doc["policyConfig"] = {**doc["policyConfig"], "pinMemory": not pin}
        else:
            chart = new_chart_version(self.node, self.rev)
        helm_upgrade(self.node, doc, chart=chart, roll=True)

    def reload(self) -> str:
        """A configuration change applied live (no new pod): CPU 0 or 1 reserved in turn."""
        before = _config_outcomes(self.node)
        reserved = "1" if self.doc["policyConfig"].get("reservedSystemCPUs") == "0" else "0"
        self.doc["policyConfig"] = {**self.doc["policyConfig"], "reservedSystemCPUs": reserved}
        helm_upgrade(self.node, self.doc, roll=False)
        self.node.wait_for(
            lambda: _config_outcomes(self.node) > before,
            timeout=180,
            what=f"a ConfigApplied or ConfigRejected Event for reservedSystemCPUs {reserved}",
        )
        return reserved

    def kill9(self) -> str:
        """SIGKILL the daemon; the kubelet restarts it, or its pod is deleted when the
        kubelet holds the container in crash back-off."""
        pid = wait_daemon(self.node)
        offset, started = log_offset(self.node), time.monotonic()
        os.kill(pid, signal.SIGKILL)
        try:
            wait_daemon(self.node, other_than=pid, timeout=25)
            took = wait_synchronized(self.node, offset, started)
            return f"restarted by the kubelet; synchronized again after {took:.1f} s"
        except AssertionError:
            for p in self.node.cluster.client.request(
                "GET", DS_PODS, query={"labelSelector": "app.kubernetes.io/name=nri-resmgr"}
            )["items"]:
                self.node.cluster.client.request("DELETE", f"{DS_PODS}/{p['metadata']['name']}")
            wait_daemon(self.node, other_than=pid)
            took = wait_synchronized(self.node, offset, started)
            return f"in crash back-off: its pod deleted; synchronized again after {took:.1f} s"

    def restart_containerd(self) -> str:
        offset, started = log_offset(self.node), time.monotonic()
        self.node.ctd.restart()
        took = wait_synchronized(self.node, offset, started)
        wait_daemon(self.node)
        return f"restarted; the daemon synchronized again after {took:.1f} s"


# -- the runs ----------------------------------------------------------------------------

UPGRADE_KINDS = ("image", "configuration", "chart")


def run_upgrades(
    node: Node, image: Image, base: dict[str, Any], count: int, seed: int
) -> dict[str, Any]:
    online = online_cpus()
    op = Operator(node, image, base)
    since = time.time()
    spans: list[tuple[float, float]] = []
    per_upgrade: list[dict[str, Any]] = []
    with churn.Churn(node, random.Random(seed), prefix="up") as pods:
        time.sleep(20)  # start-up times without an upgrade, for the comparison
        for i in range(count):
            kind = UPGRADE_KINDS[i % len(UPGRADE_KINDS)]
            t0 = time.time()
            op.upgrade(kind)
            t1 = time.time()
            spans.append((t0, t1))
            settled = churn.settle(node, online)
            per_upgrade.append(
                {"kind": kind, "seconds": round(t1 - t0, 1), "settled_in": settled.seconds,
                 "violations": settled.violations}
            )  # fmt: skip
            time.sleep(10)
        time.sleep(20)
    windows = churn.plugin_windows(node.ctd.log_text(), PLUGIN, since)
    last = churn.settle(node, online)
    # every pod still there runs in the end (a refused creation is retried by the kubelet)
    left = _pods_not_running(node, timeout=330)

    def during(t: float) -> bool:
        return any(a <= t <= b + 5 for a, b in spans)

    return {
        "what": f"{count} rolling updates of the DaemonSet under pod churn, real kubelet "
        f"v1.34.4 + containerd {node.ctd.release.version}",
        "seed": seed,
        "runtime_requires_plugin": "default_validator" in node.ctd.layout.config.read_text(),
        "upgrades": per_upgrade,
        "windows": [{**asdict(w), "seconds": round(w.seconds, 3)} for w in windows],
        "longest_window": round(max((w.seconds for w in windows), default=0.0), 3),
        "created_in_windows": sum(w.created for w in windows),
        "refused_in_windows": sum(w.refused for w in windows),
        "violations": [v for u in per_upgrade for v in u["violations"]] + last.violations,
        "pods_not_running_at_end": left,
        "startup": churn.delays(pods.started, during),
        "churn_errors": pods.errors[:20],
        "load1": float(Path("/proc/loadavg").read_text().split()[0]),
    }


def _pods_not_running(node: Node, *, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        items = node.cluster.client.request("GET", churn.PODS)["items"]
        pending = sorted(
            p["metadata"]["name"]
            for p in items
            if (p.get("status") or {}).get("phase") != "Running"
            and not p["metadata"].get("deletionTimestamp")
        )
        if not pending or time.monotonic() > deadline:
            return pending
        time.sleep(2)


FAULT_ERRORS = (AssertionError, KubeError, ctdmod.ContainerdError, subprocess.SubprocessError)
FAULTS = ("live reload", "helm upgrade", "kill -9", "containerd restart")


def run_soak(
    node: Node, image: Image, base: dict[str, Any], minutes: float, seed: int
) -> dict[str, Any]:
    online = online_cpus()
    op = Operator(node, image, base)
    rng = random.Random(seed)
    pods = churn.Churn(node, rng, prefix="soak", keep=6)
    live: list[churn.Started] = []
    start = time.monotonic()
    end = start + minutes * 60
    next_fault = start + 60
    steps = 0
    faults: list[dict[str, Any]] = []
    found: list[dict[str, Any]] = []
    vitals: list[churn.Vitals] = []
    longest_settle = 0.0
    while time.monotonic() < end:
        steps += 1
        what: str
        if time.monotonic() >= next_fault:
            fault = FAULTS[len(faults) % len(FAULTS)]
            t0 = time.monotonic()
            try:
                if fault == "kill -9":
                    outcome = op.kill9()
                elif fault == "containerd restart":
                    outcome = op.restart_containerd()
                elif fault == "live reload":
                    outcome = f"reservedSystemCPUs {op.reload()}"
                else:
                    op.upgrade(UPGRADE_KINDS[op.upgrades % len(UPGRADE_KINDS)])
                    outcome = "rolled out"
            except FAULT_ERRORS as exc:
                outcome = f"FAILED: {exc}"
            faults.append(
                {"step": steps, "fault": fault, "outcome": outcome[:300],
                 "seconds": round(time.monotonic() - t0, 1)}
            )  # fmt: skip
            next_fault += 60
            what = fault
            print(f"{time.strftime('%H:%M:%S')} step {steps}: {faults[-1]}", flush=True)
        else:
            try:
                pods.step(live)
                what = "churn"
            except KubeError as exc:
                what = f"churn failed: {exc}"
        pods.observe()
        settled = churn.settle(node, online)
        longest_settle = max(longest_settle, settled.seconds)
        if settled.violations:
            cpusets = {c.name: sorted(c.cpus) for c in settled.containers}
            print(f"step {steps} after {what}: {settled.violations}", flush=True)
            found.append(
                {"step": steps, "after": what, "violations": settled.violations,
                 "cpusets": cpusets}
            )  # fmt: skip
        sample = churn.sample_daemon(node)
        if sample is not None:
            vitals.append(sample)
        time.sleep(rng.uniform(0.5, 2.0))
    for s in live:
        node.cluster.client.request(
            "DELETE", f"{churn.PODS}/{s.name}", body={"gracePeriodSeconds": 0}
        )
    final = churn.settle(node, online)
    if final.violations:
        found.append({"step": steps + 1, "after": "cleanup", "violations": final.violations})
    return {
        "what": f"{minutes:g}-minute soak, real kubelet v1.34.4 + containerd "
        f"{node.ctd.release.version}, static policy, CPU 0 reserved",
        "seed": seed,
        "steps": steps,
        "pods_created": len(pods.started),
        "faults": faults,
        "faults_failed": [f for f in faults if f["outcome"].startswith("FAILED")],
        "violations": found,
        "longest_settle_seconds": longest_settle,
        "vitals_first": asdict(vitals[0]) if vitals else None,
        "vitals_last": asdict(vitals[-1]) if vitals else None,
        "rss_kib_max": max((v.rss_kib for v in vitals), default=0),
        "fds_max": max((v.fds for v in vitals), default=0),
        "healthz_seconds_max": max((v.healthz_seconds for v in vitals), default=0.0),
        "slowest_decision_bucket": max((v.slowest_decision for v in vitals), default=0.0),
        "samples": len(vitals),
        "daemons": _per_daemon(vitals),
        "startup_seconds_max": max((s.seconds or 0.0 for s in pods.started), default=0.0),
        "load1": float(Path("/proc/loadavg").read_text().split()[0]),
    }


def _per_daemon(vitals: list[churn.Vitals]) -> list[dict[str, Any]]:
    """RSS and fds at the first and last sample of each daemon process (a restart starts
    a new one), and how long it was sampled."""
    out: list[dict[str, Any]] = []
    for v in vitals:
        if not out or out[-1]["pid"] != v.pid:
            out.append({"pid": v.pid, "first": v.at, "rss_kib": [v.rss_kib, v.rss_kib],
                        "fds": [v.fds, v.fds], "samples": 0})  # fmt: skip
        d = out[-1]
        d["rss_kib"][1], d["fds"][1], d["samples"] = v.rss_kib, v.fds, d["samples"] + 1
        d["minutes"] = round((v.at - d["first"]) / 60, 1)
    return out


# -- the command -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.e2e_kube.soak",
        description="The soak or the upgrade measurement on the real kubelet node (root).",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--minutes", type=float, help="soak for this long")
    what.add_argument("--upgrades", type=int, help="this many rolling updates under churn")
    parser.add_argument("--seed", type=int, default=None, help="random seed (printed)")
    parser.add_argument(
        "--slot", type=int, default=1,
        help="the node's network and cgroup slot (tests/e2e_kube/node.py); 0 is the suite's",
    )  # fmt: skip
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    print(f"seed {seed}", flush=True)
    env = {**os.environ, "NRI_RESMGR_KUBE_SLOT": str(args.slot), "NRI_RESMGR_SOAK_SEED": str(seed)}
    if args.minutes is not None:
        env["NRI_RESMGR_SOAK_MINUTES"] = str(args.minutes)
        target = "tests/e2e_kube/test_soak.py"
    else:
        env["NRI_RESMGR_UPGRADES"] = str(args.upgrades)
        target = "tests/e2e_kube/test_upgrades.py"
    timeout = str(int(3600 + 60 * (args.minutes or 0) + 120 * (args.upgrades or 0)))
    return subprocess.call(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", target,
         "-o", f"timeout={timeout}"],
        cwd=REPO, env=env,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
