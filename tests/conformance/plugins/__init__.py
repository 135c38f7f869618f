"""Python NRI plugins used by the conformance tests (built on nri_api only), and helpers.

`attach_recorder()` starts a fake runtime with the `recorder` plugin attached in the
given mode and returns a `RecorderHandle` to read back what the plugin saw.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conformance.harness import GoRuntime, Json, SyncResult, read_jsonl
from tests.conformance.harness_attach import attach_plugin

PLUGINS = Path(__file__).resolve().parent
RECORDER = PLUGINS / "recorder.py"


@dataclass
class RecorderHandle:
    """A recorder plugin attached to a fake runtime, and where its records go."""

    full_name: str
    record: Path
    settings: dict[str, Any]
    sync: SyncResult | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def records(self) -> list[Json]:
        return [r for r in read_jsonl(self.record) if r["plugin"] == self.full_name]

    def events(self, *, lifecycle_only: bool = False) -> list[tuple[str, ...]]:
        """(event, pod id[, container id]) per record; lifecycle_only drops CONFIGURE etc."""
        out: list[tuple[str, ...]] = []
        for r in self.records():
            if lifecycle_only and r["event"] in ("CONFIGURE", "SYNCHRONIZE", "CLOSED"):
                continue
            out.append(tuple([r["event"]] + [r[k] for k in ("pod", "container") if k in r]))
        return out

    def of(self, event: str) -> list[Json]:
        return [r for r in self.records() if r["event"] == event]


def recorder_settings(record: Path, **extra: Any) -> dict[str, Any]:
    return {"record": str(record), **extra}


def attach_recorder(
    rt: GoRuntime,
    *,
    mode: str,
    idx: str = "10",
    name: str = "recorder",
    pods: Sequence[Json] = (),
    containers: Sequence[Json] = (),
    events: Sequence[str] | None = None,
    reconnect: bool = False,
    request_timeout_ms: int | None = None,
    sync_timeout: float = 30.0,
    **settings: Any,
) -> RecorderHandle:
    """Start `rt` with a recorder attached (`mode` external or preregistered)."""
    record = rt.dir / f"{idx}-{name}.jsonl"
    conf = recorder_settings(record, **settings)
    if events is not None:
        conf["events"] = list(events)
    text = json.dumps(conf)
    log = ["--log-file", str(rt.dir / f"{idx}-{name}.log")]
    args = ["--settings", text, *log] + (["--reconnect"] if reconnect else [])
    sync = attach_plugin(
        rt,
        RECORDER,
        mode=mode,
        idx=idx,
        name=name,
        config=text,
        external_args=args,
        preregistered_args=log,
        pods=pods,
        containers=containers,
        request_timeout_ms=request_timeout_ms,
        sync_timeout=sync_timeout,
    )
    return RecorderHandle(full_name=f"{idx}-{name}", record=record, settings=conf, sync=sync)


def add_external_recorder(
    rt: GoRuntime,
    *,
    idx: str,
    name: str,
    events: Sequence[str] | None = None,
    reconnect: bool = False,
    **settings: Any,
) -> RecorderHandle:
    """Connect one more external recorder to an already started runtime and wait for its sync."""
    record = rt.dir / f"{idx}-{name}.jsonl"
    conf = recorder_settings(record, **settings)
    if events is not None:
        conf["events"] = list(events)
    log = ["--log-file", str(rt.dir / f"{idx}-{name}.log")]
    args = ["--settings", json.dumps(conf), *log] + (["--reconnect"] if reconnect else [])
    rt.start_external(RECORDER, idx=idx, name=name, args=args)
    sync = rt.wait_synced()
    return RecorderHandle(full_name=f"{idx}-{name}", record=record, settings=conf, sync=sync)
