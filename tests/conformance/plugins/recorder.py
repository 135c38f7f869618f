#!/usr/bin/env python3
"""Conformance test plugin: records every event it sees, answers deterministically.

Runs pre-registered (the runtime execs it with the socket on fd 3; its settings then
come from the config file, i.e. `ConfigureRequest.config`) or external (`--socket`,
`--idx`, `--name`, settings from `--settings JSON`). Settings (JSON object):

  record        path of a JSON-lines file; one line per event seen (required)
  events        event names (NRI `Event` enum) to subscribe to; default: every hook
  log_file      stub log file (or `--log-file`, which also works when pre-registered:
                stdout/stderr are discarded then)

Each record has "event", "plugin" (NN-name), "pid" and, per event, "pod" and
"container" (CREATE_CONTAINER also "cpus": the container's cpuset CPUs as received),
for CONFIGURE the config and runtime, for SYNCHRONIZE the pod and container ids.
A lost connection records "CLOSED".

CreateContainer replies (all deterministic, from the container):
  * cpuset CPUs from annotation `cpuset.conformance.nri/container.<name>`,
  * env `RECORDED_BY=<NN-name>` and annotation `conformance.nri/recorded-by=<NN-name>`,
  * updates of other containers from annotation `create-update.conformance.nri`
    (`<id>=<cpus>[;<id>=<cpus>...]`),
  * a container named `fail-me` fails with `recorder <NN-name>: refusing container fail-me`,
  * a container named `slow-me` makes the reply wait `slow_seconds` (setting, default 5),
  * a container named `big` also gets 200 env vars `BIG_000..BIG_199` (a reply > 4096 bytes).
UpdateContainer replies with an update of the container itself to the CPUs of annotation
`update-cpus.conformance.nri` (if present); StopContainer with the updates of annotation
`stop-update.conformance.nri` (same form as create-update). Synchronize returns an update
to the CPUs of annotation `sync-cpus.conformance.nri` for each container that has it, and
sends the same updates once more with UpdateContainers: called inside the hook (the stub
defers it until the hook returned), or, with setting `report_update_result`, from a task
outside any hook, recording the ids the runtime reported failed (UPDATE_CONTAINERS_RESULT).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    import nri_api  # noqa: F401
except ImportError:  # launched with an empty environment from a source checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from nri_api import api
from nri_api.builders import Adjustment, Update
from nri_api.events import Event
from nri_api.stub import OnClose, Plugin, RuntimeInfo

CPUSET_ANNOTATION = "cpuset.conformance.nri/container.{name}"
RECORDED_BY_ANNOTATION = "conformance.nri/recorded-by"
RECORDED_BY_ENV = "RECORDED_BY"
CREATE_UPDATE_ANNOTATION = "create-update.conformance.nri"
UPDATE_CPUS_ANNOTATION = "update-cpus.conformance.nri"
STOP_UPDATE_ANNOTATION = "stop-update.conformance.nri"
SYNC_CPUS_ANNOTATION = "sync-cpus.conformance.nri"
FAIL_NAME = "fail-me"
SLOW_NAME = "slow-me"
BIG_NAME = "big"
BIG_ENV_COUNT = 200


def fail_message(full_name: str) -> str:
    return f"recorder {full_name}: refusing container {FAIL_NAME}"


def big_env(index: int) -> tuple[str, str]:
    return f"BIG_{index:03d}", f"value-{index:03d}-" + "x" * 40


def parse_updates(text: str) -> list[tuple[str, str]]:
    """`"id1=0-1;id2=3"` -> [("id1", "0-1"), ("id2", "3")]."""
    pairs = []
    for item in filter(None, text.split(";")):
        cid, sep, cpus = item.partition("=")
        if not sep:
            raise ValueError(f"update spec {item!r}: expected <container-id>=<cpus>")
        pairs.append((cid, cpus))
    return pairs


class Recorder(Plugin):
    """Records events to a JSON-lines file; see the module docstring."""

    def __init__(self, *, settings: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings: dict[str, Any] = dict(settings or {})
        self._pending_sync_updates: list[Update] = []

    # -- recording --

    def record(self, event: str, **fields: Any) -> None:
        path = self.settings.get("record")
        if not path:
            return
        line = {"event": event, "plugin": self.full_name, "pid": os.getpid(), **fields}
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")

    def _ids(
        self, event: Event, pod: api.PodSandbox, container: api.Container | None = None
    ) -> None:
        fields: dict[str, Any] = {"pod": pod.id}
        if container is not None:
            fields["container"] = container.id
        self.record(event.name, **fields)

    # -- hooks --

    def configure(self, config: str, runtime: RuntimeInfo) -> Iterable[Event] | None:
        if config:
            self.settings.update(json.loads(config))
        self.record(
            "CONFIGURE",
            config=config,
            runtime_name=runtime.name,
            runtime_version=runtime.version,
            nri_version=str(runtime.nri_version),
            pre_registered=self.pre_registered,
            env={k: v for k, v in os.environ.items() if k.startswith("NRI_PLUGIN_")},
            request_timeout=runtime.request_timeout,
        )
        events = self.settings.get("events")
        if events is None:
            return None
        return [Event[name] for name in events]

    async def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> list[Update]:
        self.record(
            "SYNCHRONIZE",
            pods=[p.id for p in pods],
            containers=[c.id for c in containers],
        )
        updates = [
            Update(c.id).set_cpuset(c.annotations[SYNC_CPUS_ANNOTATION])
            for c in containers
            if SYNC_CPUS_ANNOTATION in c.annotations
        ]
        if updates and self.settings.get("report_update_result"):
            # Outside any hook (a fresh context): waits for the runtime's answer.
            asyncio.get_running_loop().create_task(
                self._send_and_report(updates), context=contextvars.Context()
            )
        elif updates:
            # Deferred by the stub until this hook has returned.
            await self.update_containers(updates)
        return updates

    async def _send_and_report(self, updates: list[Update]) -> None:
        failed = await self.update_containers(updates)
        self.record("UPDATE_CONTAINERS_RESULT", failed=[u.container_id for u in failed or []])

    def on_close(self) -> None:
        self.record("CLOSED")

    def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._ids(Event.RUN_POD_SANDBOX, pod)

    def stop_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._ids(Event.STOP_POD_SANDBOX, pod)

    def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._ids(Event.REMOVE_POD_SANDBOX, pod)

    def update_pod_sandbox(
        self, pod: api.PodSandbox, overhead: api.LinuxResources, resources: api.LinuxResources
    ) -> None:
        self._ids(Event.UPDATE_POD_SANDBOX, pod)

    def post_update_pod_sandbox(self, pod: api.PodSandbox) -> None:
        self._ids(Event.POST_UPDATE_POD_SANDBOX, pod)

    async def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> tuple[Adjustment, list[Update]]:
        # Also note the cpuset the container arrives with: plugins with a lower index
        # have already adjusted it.
        self.record(
            Event.CREATE_CONTAINER.name,
            pod=pod.id,
            container=container.id,
            cpus=container.linux.resources.cpu.cpus,
        )
        if container.name == SLOW_NAME:
            await asyncio.sleep(float(self.settings.get("slow_seconds", 5)))
        if container.name == FAIL_NAME:
            raise RuntimeError(fail_message(self.full_name))
        adj = Adjustment()
        adj.add_env(RECORDED_BY_ENV, self.full_name)
        adj.add_annotation(RECORDED_BY_ANNOTATION, self.full_name)
        cpus = container.annotations.get(CPUSET_ANNOTATION.format(name=container.name))
        if cpus:
            adj.set_cpuset(cpus)
        if container.name == BIG_NAME:
            for i in range(BIG_ENV_COUNT):
                adj.add_env(*big_env(i))
        spec = container.annotations.get(CREATE_UPDATE_ANNOTATION, "")
        updates = [Update(cid).set_cpuset(cpus) for cid, cpus in parse_updates(spec)]
        return adj, updates

    def post_create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self._ids(Event.POST_CREATE_CONTAINER, pod, container)

    def start_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self._ids(Event.START_CONTAINER, pod, container)

    def post_start_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self._ids(Event.POST_START_CONTAINER, pod, container)

    def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> list[Update]:
        self._ids(Event.UPDATE_CONTAINER, pod, container)
        cpus = container.annotations.get(UPDATE_CPUS_ANNOTATION)
        return [Update(container.id).set_cpuset(cpus)] if cpus else []

    def post_update_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self._ids(Event.POST_UPDATE_CONTAINER, pod, container)

    def stop_container(self, pod: api.PodSandbox, container: api.Container) -> list[Update]:
        self._ids(Event.STOP_CONTAINER, pod, container)
        spec = container.annotations.get(STOP_UPDATE_ANNOTATION, "")
        return [Update(cid).set_cpuset(cpus) for cid, cpus in parse_updates(spec)]

    def remove_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self._ids(Event.REMOVE_CONTAINER, pod, container)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="NRI conformance recorder plugin")
    parser.add_argument("--socket")
    parser.add_argument("--idx")
    parser.add_argument("--name")
    parser.add_argument("--settings", default="{}", help="settings as a JSON object")
    parser.add_argument("--reconnect", action="store_true")
    parser.add_argument(
        "--log-file", help="the stub's log (stdout/stderr are discarded when pre-registered)"
    )
    args = parser.parse_args(argv)
    settings = json.loads(args.settings)
    if args.log_file:
        settings["log_file"] = args.log_file
    plugin = Recorder(
        settings=settings,
        name=args.name,
        idx=args.idx,
        socket_path=args.socket,
        on_close=OnClose.RECONNECT if args.reconnect else OnClose.EXIT,
        log_file=settings.get("log_file"),
    )
    return plugin.run()


if __name__ == "__main__":
    sys.exit(main())
