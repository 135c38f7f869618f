"""The node and control-plane commands of Kubernetes, built from their Go module.

tests/k8s/node is one wrapper module (like tests/k8s/apiserver) with four command packages
whose `main.go` is the upstream `cmd/<name>` main of k8s.io/kubernetes at the pinned release:
the kubelet, kube-controller-manager, kube-scheduler and kubectl. One `go build` builds the
four (the packages they share compile once) into `.cache/k8s/node-<key>/`, where the key
hashes the module's files and the build recipe; a second call returns the cached paths.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from tests.support.requirements import REPO, require_go

MODULE = Path(__file__).resolve().parent / "node"
CACHE = REPO / ".cache" / "k8s"
VERSION = "v1.34.4"
COMMANDS = ("kubelet", "kube-controller-manager", "kube-scheduler", "kubectl")
#: the release a binary reports (`--version`, /version, the Node's kubeletVersion); without
#: them every component says v0.0.0-master and helm refuses the chart's kubeVersion
VERSION_LDFLAGS = (
    f"-X k8s.io/component-base/version.gitVersion={VERSION}",
    "-X k8s.io/component-base/version.gitMajor=1",
    f"-X k8s.io/component-base/version.gitMinor={VERSION.split('.')[1]}",
    "-X k8s.io/component-base/version.gitTreeState=clean",
    "-X k8s.io/client-go/pkg/version.gitVersion=" + VERSION,
)
_LDFLAGS = ("-s", "-w", *VERSION_LDFLAGS)
_ENV = {"CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly -buildvcs=false"}


class ComponentBuildError(RuntimeError):
    """`go build` of the wrapper module failed; the message carries its output's tail."""


def _key(go: str) -> str:
    h = hashlib.sha256()
    for path in sorted([MODULE / "go.mod", MODULE / "go.sum", *MODULE.glob("*/main.go")]):
        h.update(str(path.relative_to(MODULE)).encode() + b"\0" + path.read_bytes() + b"\0")
    go_version = subprocess.run([go, "version"], capture_output=True, text=True).stdout
    recipe = {"ldflags": _LDFLAGS, "env": _ENV, "go": go_version, "commands": COMMANDS}
    h.update(json.dumps(recipe, sort_keys=True).encode())
    return h.hexdigest()[:16]


def build_node_components() -> dict[str, Path]:
    """Build (once) and return {command: binary} for the kubelet, controller manager,
    scheduler and kubectl. `BUILD.json` beside them records the build's seconds."""
    go = require_go()
    out = CACHE / f"node-{_key(go)}"
    paths = {c: out / c for c in COMMANDS}
    if all(p.exists() for p in paths.values()):
        return paths
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".build-node.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all(p.exists() for p in paths.values()):
            return paths
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        env = {**os.environ, **_ENV}
        started = time.monotonic()
        proc = subprocess.run(
            [
                go,
                "build",
                "-trimpath",
                "-ldflags",
                " ".join(_LDFLAGS),
                "-o",
                f"{tmp}/",
                *(f"./{c}" for c in COMMANDS),
            ],
            cwd=MODULE,
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if proc.returncode != 0:
            raise ComponentBuildError(
                f"go build of Kubernetes {VERSION} node commands in {MODULE} failed: "
                f"{proc.stderr[-3000:]}"
            )
        (tmp / "BUILD.json").write_text(
            json.dumps(
                {"version": VERSION, "seconds": round(time.monotonic() - started, 1), "go": go},
                indent=2,
            )
        )
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return paths
