#!/usr/bin/env python3
"""Conformance test plugin: a container adjustment validator (NRI v0.10+).

Settings (JSON; the conf.d file when pre-registered, `--settings` when external):

  record       path of a JSON-lines file (required)
  reject_cpus  reject any adjustment that pins the container to exactly these CPUs

It also subscribes to CreateContainer (recording only), so it is a valid plugin on
runtimes before v0.10 too, where validation does not exist and the stub drops the
VALIDATE_CONTAINER_ADJUSTMENT subscription. Each VALIDATE record has the container,
the adjusted cpuset, the owner of the cpuset CPUs field and the plugins consulted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    import nri_api  # noqa: F401
except ImportError:  # launched with an empty environment from a source checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from nri_api import api
from nri_api.stub import OnClose, Plugin, RuntimeInfo

# Field.CPUSetCPUs in the NRI schema (v0.10+).
FIELD_CPUSET_CPUS = 21


def reject_reason(cpus: str) -> str:
    return f"cpuset {cpus} is reserved"


class Validator(Plugin):
    """Rejects adjustments that pin containers to the reserved CPUs."""

    def __init__(self, *, settings: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings: dict[str, Any] = dict(settings or {})

    def record(self, event: str, **fields: Any) -> None:
        line = {"event": event, "plugin": self.full_name, "pid": os.getpid(), **fields}
        with open(self.settings["record"], "a", encoding="utf-8") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")

    def configure(self, config: str, runtime: RuntimeInfo) -> None:
        if config:
            self.settings.update(json.loads(config))
        self.record("CONFIGURE", nri_version=str(runtime.nri_version))

    def create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        self.record("CREATE_CONTAINER", pod=pod.id, container=container.id)

    def validate_container_adjustment(
        self, request: api.ValidateContainerAdjustmentRequest
    ) -> str | None:
        cpus = request.adjust.linux.resources.cpu.cpus
        owners = request.owners.owners.get(request.container.id)
        owner = owners.simple.get(FIELD_CPUSET_CPUS, "") if owners is not None else ""
        self.record(
            "VALIDATE_CONTAINER_ADJUSTMENT",
            pod=request.pod.id,
            container=request.container.id,
            cpus=cpus,
            cpus_owner=owner,
            plugins=[f"{p.index}-{p.name}" for p in request.plugins],
        )
        if cpus and cpus == self.settings.get("reject_cpus"):
            return reject_reason(cpus)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="NRI conformance validator plugin")
    parser.add_argument("--socket")
    parser.add_argument("--idx")
    parser.add_argument("--name")
    parser.add_argument("--settings", default="{}", help="settings as a JSON object")
    args = parser.parse_args(argv)
    plugin = Validator(
        settings=json.loads(args.settings),
        name=args.name,
        idx=args.idx,
        socket_path=args.socket,
        on_close=OnClose.EXIT,
    )
    return plugin.run()


if __name__ == "__main__":
    sys.exit(main())
