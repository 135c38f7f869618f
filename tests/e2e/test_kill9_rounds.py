"""Issue 24's kill -9 rounds on a real containerd: restarts exact, or moved with a cause.

The daemon (static, CPU 0 reserved, on the 2-CPU machine class of `test_daemon.py`) is
killed at one of `KILL9_POINTS` per round, in turn, and restarted; between, pods are
created while it is down (containerd fails open) and removed.  Every round asserts the
restart rule on the kernel's cpusets (`resmgr.assert_restart_rule`: no overlap) and
that every container whose cpuset changed has a ``synchronize`` decision in the
daemon's log saying why (``moved: <cause>``).  The run's tally (points, restored or
rebuilt, causes) is printed and written to ``NRI_RESMGR_KILL9_REPORT``; the default
suite runs a few rounds, the long run (docs/e2e.md) 500.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nri_resmgr.policy.kit.rebuild import RESTORED
from tests.e2e import cri
from tests.e2e.containerd import Containerd
from tests.e2e.resmgr import STATIC, Daemon, assert_restart_rule, running_daemon, settled_cpusets
from tests.e2e.resmgr import daemon as daemon  # the fixture

#: rounds of `test_kill9_rounds`: a short run in the default suite; the long run
#: (docs/e2e.md) sets NRI_RESMGR_KILL9_ROUNDS=500
KILL9_ROUNDS = int(os.environ.get("NRI_RESMGR_KILL9_ROUNDS", "5"))
#: where the daemon is killed, one per round in turn (`test_kill9_rounds`)
KILL9_POINTS = ("mid-decision", "after-reply", "mid-write", "records-lost", "idle")


def _sync_reasons(text: str) -> dict[str, str]:
    """The reason of each container's synchronize decision line in the daemon's log, and
    of the whole rebuild under "" (its ``rebuilt`` line)."""
    out = {}
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("event") == "synchronize" and "id" in doc:
            out[str(doc["id"])] = str(doc.get("reason", ""))
        if isinstance(doc, dict) and doc.get("event") == "rebuilt":
            out[""] = str(doc.get("reason", ""))
    return out


def _cause(reason: str) -> str:
    """A move's reason without the names in it: its clauses' heads."""
    clauses = reason.removeprefix("moved: ").split(";")
    heads = (c.split(":")[0].split("(")[0].strip() for c in clauses)
    return "; ".join(dict.fromkeys(h for h in heads if not h.startswith("pod ")))


def test_kill9_rounds(containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]) -> None:
    """Issue 24: kill -9 at every point, `KILL9_ROUNDS` times (static, CPU 0 reserved).

    Each round kills the daemon at one of `KILL9_POINTS`: while a CreateContainer is in
    flight (at a random moment of the decision, the record's write and the reply), right
    after a creation was answered, with a torn record file left beside the records (what
    a kill mid-write leaves), with the records gone, or idle.  While it is down, pods are
    created (containerd fails open) and removed.  After the restart: the restart rule
    holds in the kernel's cpusets (no overlap), and every container whose cpuset changed
    has a synchronize decision saying why (``moved: <cause>``).  The tally of points,
    restores and causes is printed, and written to NRI_RESMGR_KILL9_REPORT if set.
    """
    rng = random.Random(int(os.environ.get("NRI_RESMGR_KILL9_SEED", "24")))
    ctd = containerd
    d = running_daemon(daemon, STATIC)
    records = ctd.layout.base / "resmgr-state" / "placements.jsonl"
    live: list[tuple[cri.Container, cri.QoS]] = []
    tally: Counter[str] = Counter()
    made = 0

    def create() -> None:
        nonlocal made
        made += 1
        qos = rng.choice([cri.QoS.GUARANTEED, cri.QoS.BURSTABLE, cri.QoS.BURSTABLE])
        res = cri.GUARANTEED_1CPU if qos is cri.QoS.GUARANTEED else cri.BURSTABLE_SMALL
        pod = cri.run_pod(ctd, f"k{made}", qos=qos)
        c, _ = cri.create_container(ctd, pod, "app", resources=res, check=False)
        if c is None:  # refused (no free CPU), or the daemon died answering
            cri.remove_pod(ctd, pod)
            return
        cri.start_container(ctd, c)
        live.append((c, qos))

    def remove() -> None:  # never the anchor, live[0]
        c, _ = live.pop(rng.randrange(1, len(live)))
        cri.remove_pod(ctd, c.pod)

    # a shared container that stays: the rule's check needs one shared pool to read
    anchor = cri.run_pod(ctd, "anchor", qos=cri.QoS.BURSTABLE)
    live.append((cri.run_container(ctd, anchor, "app", resources=cri.BURSTABLE_SMALL),
                 cri.QoS.BURSTABLE))  # fmt: skip

    for r in range(KILL9_ROUNDS):
        point = KILL9_POINTS[r % len(KILL9_POINTS)]
        tally[point] += 1
        while len(live) > 5:
            remove()
        if point == "mid-decision":
            flight = threading.Thread(target=create)
            flight.start()
            time.sleep(rng.uniform(0.0, 0.4))
            d.kill9()
            flight.join()
        else:
            if point == "after-reply":
                create()
            d.kill9()
        if point == "mid-write" and records.exists():
            data = records.read_bytes()
            records.with_name(records.name + ".tmp").write_bytes(data[: rng.randrange(len(data))])
        if point == "records-lost":
            records.unlink(missing_ok=True)
        for _ in range(rng.randint(0, 2)):  # fail-open creations while down
            create()
        if len(live) > 1 and rng.random() < 0.3:
            remove()
        before = settled_cpusets(ctd, [c for c, _ in live])
        seen = len(d.output())
        d.start()
        d.wait_synced(d.starts)
        after, _ = assert_restart_rule(ctd, live, d)  # 0 overlaps, or this fails
        reasons = _sync_reasons(d.output()[seen:])
        for c, _ in live:
            why = reasons.get(c.id, "")
            if before[c.id] != after[c.id]:
                assert why.startswith("moved: "), (
                    f"round {r} ({point}): {c.pod.name} moved {sorted(before[c.id])} -> "
                    f"{sorted(after[c.id])} without a cause; its decision: {why!r}"
                )
                tally["moves"] += 1
                tally["cause: " + _cause(why)] += 1
        tally[f"{point}: " + ("restored" if RESTORED in reasons[""] else "rebuilt")] += 1
    report = json.dumps({"rounds": KILL9_ROUNDS, "overlaps": 0, "unexplained": 0, **tally})
    print("kill9 rounds:", report)
    if out := os.environ.get("NRI_RESMGR_KILL9_REPORT"):
        Path(out).write_text(report + "\n")
    assert d.proc is not None and d.proc.alive()

