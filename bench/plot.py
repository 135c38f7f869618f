"""Plot the benchmark results (docs/benchmarks/*.png) from the JSON the benchmarks write.

Usage: python -m bench.plot [--results DIR] [--out docs/benchmarks/overview.png]

DIR holds roundtrip.json, decision.json and peers.json (default bench/out). A missing
file leaves its panels out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

PEER_LABELS = {
    "go-noop": "Go stub no-op",
    "nri-plugins": "nri-plugins topology-aware",
    "nri-resmgr": "nri-resmgr topology-aware",
}
COLORS = {"go-noop": "#7f7f7f", "nri-plugins": "#1f77b4", "nri-resmgr": "#d62728"}


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def plot_roundtrip(ax: Axes, rt: dict[str, Any]) -> None:
    labels = {"go-inproc": "Go stub\nin-process", "go-external": "Go stub\nexternal",
              "python": "Python\nnri_api", "python-candidate": "Python\ncandidate"}
    peers = list(rt["summary"])
    x = range(len(peers))
    p50 = [rt["summary"][p]["p50_us"] for p in peers]
    p99 = [rt["summary"][p]["p99_us"] for p in peers]
    ax.bar([i - 0.2 for i in x], p50, width=0.4, label="p50", color="#1f77b4")
    ax.bar([i + 0.2 for i in x], p99, width=0.4, label="p99", color="#ff7f0e")
    ax.set_xticks(list(x), [labels.get(p, p) for p in peers])
    ax.set_yscale("log")
    ax.set_ylabel("µs (log)")
    ax.set_title(f"No-op CreateContainer round trip\n({rt['requests']} requests each, "
                 f"NRI {rt['nri_version']})")
    ax.legend()


def plot_levels(ax: Axes, peers: dict[str, Any], kind: str) -> None:
    levels = peers["createcontainer"]["levels"]
    xs = [int(n) for n in levels]
    for p, label in PEER_LABELS.items():
        ys = [levels[n][p][kind]["p50_us"] / 1000 for n in levels]
        y99 = [levels[n][p][kind]["p99_us"] / 1000 for n in levels]
        ax.plot(xs, ys, "o-", color=COLORS[p], label=f"{label} p50")
        ax.plot(xs, y99, "x--", color=COLORS[p], alpha=0.5, label=f"{label} p99")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("live containers")
    ax.set_ylabel("ms (log)")
    ax.set_title(f"CreateContainer round trip, {kind} probe\n(through the real NRI adaptation)")
    ax.legend(fontsize=7)


def plot_decision(ax: Axes, dec: dict[str, Any]) -> None:
    levels = dec["decision"]
    xs = [int(n) for n in levels]
    for kind, color in (("shared", "#2ca02c"), ("exclusive", "#9467bd")):
        ax.plot(xs, [levels[n][kind]["cpu"]["p50_us"] / 1000 for n in levels], "o-",
                color=color, label=f"decision CPU p50, {kind}")
        if "roundtrip" in dec:
            rt = dec["roundtrip"]
            ax.plot(xs, [rt[n][kind]["p50_us"] / 1000 for n in rt], "s--", color=color,
                    alpha=0.6, label=f"round trip p50, {kind}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("live containers")
    ax.set_ylabel("ms (log)")
    ax.set_title("nri-resmgr topology-aware: decision and round trip\n(224-thread machine)")
    ax.legend(fontsize=7)


def plot_misc(ax: Axes, peers: dict[str, Any]) -> None:
    names = list(PEER_LABELS)
    groups: list[tuple[str, list[float | None]]] = []
    if "startup" in peers:
        st = peers["startup"]

        def med(v: list[float] | None) -> float | None:
            return sorted(v)[len(v) // 2] if v else None

        groups.append(("start→registered\nexternal (ms)",
                       [med(st["external_ms"][p]) for p in names]))
        groups.append(("start→registered\npre-registered (ms)",
                       [med(st["preregistered_ms"].get(p)) for p in names]))
    if "synchronize" in peers:
        sy = peers["synchronize"]
        groups.append((f"Synchronize {sy['containers']}\ncontainers (ms)",
                       [sy["median_ms"][p] for p in names]))
    if "createcontainer" in peers:
        rss = peers["createcontainer"]["rss_kib"]
        groups.append((f"RSS after {peers['createcontainer']['rss_at']}\ncontainers (MiB)",
                       [rss[p] / 1024 for p in names]))
    width = 0.8 / len(names)
    for j, p in enumerate(names):
        xs: list[float] = []
        ys: list[float] = []
        for i, (_g, vals) in enumerate(groups):
            v = vals[j]
            if v is not None:
                xs.append(i + (j - 1) * width)
                ys.append(v)
        bars = ax.bar(xs, ys, width=width, color=COLORS[p], label=PEER_LABELS[p])
        ax.bar_label(bars, fmt="%.0f", fontsize=6)
    ax.set_xticks(range(len(groups)), [g for g, _ in groups], fontsize=8)
    ax.set_yscale("log")
    ax.set_title("Start-up, Synchronize, memory")
    ax.legend(fontsize=7)


def plot_containerd(ax: Axes, ctd: dict[str, Any]) -> None:
    peers = ("none", *PEER_LABELS)
    labels = {"none": "no plugin", **PEER_LABELS}
    colors = {"none": "#bcbd22", **COLORS}
    levels = list(ctd["levels"])
    width = 0.8 / len(peers)
    for j, p in enumerate(peers):
        xs = [i + (j - 1.5) * width for i in range(len(levels))]
        ys = [ctd["levels"][n][p]["p50_us"] / 1000 for n in levels]
        bars = ax.bar(xs, ys, width=width, color=colors[p], label=labels[p])
        ax.bar_label(bars, fmt="%.0f", fontsize=6)
    ax.set_xticks(range(len(levels)), [f"{n} live" for n in levels])
    ax.set_yscale("log")
    ax.set_ylabel("ms (log)")
    ax.set_title(f"crictl create through {ctd['release']}, p50\n(shared probe; "
                 "wall clock incl. crictl and containerd)")
    ax.legend(fontsize=7)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--results", default="bench/out")
    ap.add_argument("--out", default="docs/benchmarks/overview.png")
    ns = ap.parse_args()
    res = Path(ns.results)
    rt, dec, peers, ctd = (
        _load(res / f)
        for f in ("roundtrip.json", "decision.json", "peers.json", "containerd.json")
    )
    fig, axes = plt.subplots(2, 3, figsize=(18, 10))
    a = axes.flatten()
    if rt:
        plot_roundtrip(a[0], rt)
    if dec:
        plot_decision(a[1], dec)
    if peers and "createcontainer" in peers:
        plot_levels(a[3], peers, "shared")
        plot_levels(a[4], peers, "exclusive")
    if peers:
        plot_misc(a[2], peers)
    if ctd:
        plot_containerd(a[5], ctd)
    else:
        a[5].axis("off")
    note = []
    for name, r in (("round trip", rt), ("decision", dec), ("peers", peers),
                    ("containerd", ctd)):
        if r:
            m = r["machine"]
            note.append(f"{name}: {m['when']}, {m['cpus']} CPUs ({m['cpu']}), "
                        f"{m['load_before']}")
    fig.text(0.01, 0.005, "   |   ".join(note), fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
