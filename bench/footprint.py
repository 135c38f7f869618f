"""The daemon's memory on a small (edge) node, through the real NRI adaptation.

Usage: python -m bench.footprint [--containers 50] [--policy topology-aware] [--out FILE]

The node is a synthetic 4-CPU machine (one package, one NUMA node, 4 cores without
hyperthreads, 4 GiB) written as sysfs by `write_sysfs`; the daemon, `nri-resmgr run`
(`bench/plugins/resmgr.py`), is an external plugin of the fake runtime around the real NRI
library v0.12.2 (tests/conformance/harness). Measured from /proc/PID/status:

1. ``python -c pass`` (the interpreter alone: the floor of any Python daemon);
2. the daemon registered and synchronized with an empty runtime;
3. after `--containers` containers were created and started, one pod each: two Guaranteed
   with 1 CPU, then Burstable 10m and BestEffort ones alternately (what fits 4 CPUs with
   750m reserved);

each as VmRSS (resident now), VmHWM (the peak so far) and RssAnon (the part a fork cannot
share: the daemon's own heap). Also the modules the daemon imported before it connected,
by top-level package and their count, to find imports its path does not need.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import load_note, machine
from bench.workload import container_for, running
from nri_resmgr.topology.synthetic import write_sysfs
from tests.conformance.harness import go_runtime
from tests.conformance.harness_pods import make_pod

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "bench" / "plugins" / "resmgr.py"
VERSION = "v0.12.2"
SMALL_NODE = {"packages": 1, "dies": 1, "nodes": 1, "cores": 4, "threads": 1, "memory": "4G"}
POLICIES: dict[str, dict[str, Any]] = {
    "topology-aware": {"reservedResources": {"cpu": "750m"}},
    "static": {"reservedSystemCPUs": "0"},
    "balloons": {"reservedResources": {"cpu": "750m"}, "pinCPU": True},
}
#: the probe of tests/unit/resmgr/test_startup_imports.py: sys.modules where run connects
_MODULES_PROBE = """
import json, sys
import nri_api.stub
async def probe(self):
    print(json.dumps(sorted(sys.modules)))
    return 0
nri_api.stub.Plugin.serve = probe
from nri_resmgr.cli import main
sys.exit(main(sys.argv[1:]))
"""


def status_kib(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM and RssAnon of a process, KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in ("VmRSS", "VmHWM", "RssAnon"):
            out[key] = int(line.split()[1])
    return out


def interpreter_floor() -> dict[str, int]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    time.sleep(1.5)
    try:
        return status_kib(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def small_workload(n: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    for i in range(n):
        kind = "guaranteed" if i < 2 else ("burstable-small" if i % 2 else "besteffort")
        qos = "burstable" if kind == "burstable-small" else kind
        pod = make_pod(name=f"edge{i}", namespace="bench", qos=qos)
        out.append((pod, container_for(pod, kind, "app")))
    return out


def modules_at_connect(root: Path, config: Path, state: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _MODULES_PROBE, "run", "--sysfs-root", str(root),
         "--config", str(config), "--state-dir", str(state)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={"NRI_PLUGIN_NAME": "resmgr", "NRI_PLUGIN_IDX": "90", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"bench: the import probe failed:\n{out.stderr[-2000:]}")
    modules = json.loads(out.stdout.splitlines()[-1])
    top = Counter(m.split(".")[0] for m in modules)
    return {"count": len(modules), "by_package": dict(top.most_common(25))}


def measure(n: int, policy: str) -> dict[str, Any]:
    result: dict[str, Any] = {"machine": machine(), "node": SMALL_NODE, "policy": policy,
                              "containers": n, "nri": VERSION}  # fmt: skip
    result["interpreter_kib"] = interpreter_floor()
    with go_runtime(VERSION) as rt:
        root = rt.dir / "root"
        write_sysfs(SMALL_NODE, root)
        config = rt.dir / "resmgr.json"
        config.write_text(json.dumps({
            "policy": policy, "policyConfig": POLICIES[policy],
            "log": {"level": "info", "format": "json", "file": str(rt.dir / "resmgr.log")},
        }))  # fmt: skip
        rt.start()
        proc = rt.start_external(PLUGIN, idx="90", name="resmgr", args=[
            "--sysfs-root", str(root), "--config", str(config),
            "--state-dir", str(rt.dir / "state")])  # fmt: skip
        rt.wait_synced(timeout=60)
        time.sleep(1)
        result["idle_kib"] = status_kib(proc.pid)
        placed = 0
        for pod, ctr in small_workload(n):
            rt.run_pod(pod)
            reply = rt.create_container(pod, ctr)
            rt.start_container(pod, running(ctr))
            placed += bool(reply.get("adjust", {}).get("linux", {}).get("resources", {})
                           .get("cpu", {}).get("cpus"))  # fmt: skip
        time.sleep(1)
        result["loaded_kib"] = status_kib(proc.pid)
        result["placed"] = placed
        result["modules_at_connect"] = modules_at_connect(root, config, rt.dir / "probe-state")
    result["load_after"] = load_note()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=50)
    parser.add_argument("--policy", choices=sorted(POLICIES), default="topology-aware")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = measure(args.containers, args.policy)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
