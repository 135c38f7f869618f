"""Go-built peer programs that more than one test module (or tests.build_peers) uses.

nri-plugins: containers/nri-plugins' topology-aware and balloons plugins, built unchanged
from the public Go module at `NRI_PLUGINS_VERSION`. Their go.mod replaces the nested
`pkg/topology` module by a relative path, which Go ignores in a dependency, and the module
proxy refuses the nested module itself, so the build writes a throw-away wrapper module
whose `replace` points at the unchanged source in
``../shared/third_party/nri-plugins-v0.14.0-topology`` (see its README; the environment
variable NRI_PLUGINS_TOPOLOGY_DIR names another copy). The binaries are cached under
``.cache/nri-plugins/VERSION-KEY/``, KEY a hash over the version, that tree's files and the
Go version, so a clean clone builds them once and a change of any input builds anew.
Nothing of nri-plugins is copied into the repository.

Usage: ``python3 -m tests.peers nri-plugins`` builds them and prints the directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.requirements import REPO, SHARED, go_binary, require, require_go

HELM_VERSION = "v3.19.0"

NRI_PLUGINS_MODULE = "github.com/containers/nri-plugins"
NRI_PLUGINS_VERSION = "v0.14.0"
NRI_PLUGINS_CACHE = REPO / ".cache" / "nri-plugins"
#: the plugins built, by the name we use: (their command package, the binary's name)
NRI_PLUGINS = {
    "topology-aware": ("cmd/plugins/topology-aware", "nri-resource-policy-topology-aware"),
    "balloons": ("cmd/plugins/balloons", "nri-resource-policy-balloons"),
}


def build_helm() -> str:
    """The helm binary: `.cache/bin/helm` built from its Go module (pinned), or one on PATH."""
    cached = REPO / ".cache" / "bin" / "helm"
    if cached.exists():
        return str(cached)
    found = shutil.which("helm")
    if found:
        return found
    go = require_go()
    env = dict(os.environ, GOBIN=str(cached.parent), CGO_ENABLED="0")
    out = subprocess.run(
        [go, "install", f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    require(out.returncode == 0, f"building helm {HELM_VERSION} failed: {out.stderr[-2000:]}")
    return str(cached)


@dataclass(frozen=True, slots=True)
class NriPlugins:
    """The built nri-plugins binaries."""

    version: str
    topology_aware: Path
    balloons: Path

    def binary(self, policy: str) -> Path:
        """The binary of `policy` ("topology-aware" or "balloons")."""
        if policy == "topology-aware":
            return self.topology_aware
        if policy == "balloons":
            return self.balloons
        raise ValueError(f"nri-plugins policy {policy!r}: expected one of {', '.join(NRI_PLUGINS)}")


def nri_plugins_topology_dir() -> Path:
    """Where the unchanged `pkg/topology` of nri-plugins is (NRI_PLUGINS_TOPOLOGY_DIR or
    ../shared/third_party)."""
    given = os.environ.get("NRI_PLUGINS_TOPOLOGY_DIR")
    if given:
        return Path(given)
    return SHARED / "third_party" / f"nri-plugins-{NRI_PLUGINS_VERSION}-topology"


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _go_output(go: str, *args: str) -> str:
    return subprocess.run(
        [go, *args], capture_output=True, text=True, check=True, timeout=600
    ).stdout.strip()


def _wrapper_gomod(src: Path, topo: Path) -> str:
    """A go.mod requiring nri-plugins at its own dependency versions, with its replaces."""
    own = (src / "go.mod").read_text()
    go_line = next(line for line in own.splitlines() if line.startswith("go "))
    requires = own.split("require (", 1)[1].split(")", 1)[0]
    kept = "\n".join(line for line in requires.splitlines() if "pkg/topology" not in line)
    return (
        "module nri-resmgr-tests/nri-plugins-wrapper\n\n"
        f"{go_line}\n\n"
        f"require {NRI_PLUGINS_MODULE} {NRI_PLUGINS_VERSION}\n\n"
        f"require ({kept}\n)\n\n"
        "replace (\n"
        f"\t{NRI_PLUGINS_MODULE}/pkg/topology v0.0.0 => {topo}\n"
        "\tgithub.com/opencontainers/runtime-tools => "
        "github.com/opencontainers/runtime-tools v0.0.0-20221026201742-946c877fa809\n"
        ")\n"
    )


class NriPluginsBuildError(RuntimeError):
    """nri-plugins could not be built here: no Go, no nested topology source, a failed
    build; the message says which."""


def build_nri_plugins() -> NriPlugins:
    """`make_nri_plugins()` for a test: skips it (fails under NRI_RESMGR_STRICT=1) with the
    reason where they cannot be built here."""
    try:
        return make_nri_plugins()
    except NriPluginsBuildError as exc:
        require(False, str(exc))
        raise


def make_nri_plugins() -> NriPlugins:
    """Build (or reuse) nri-plugins' topology-aware and balloons plugins; raise
    `NriPluginsBuildError` where that cannot be done here."""
    go = go_binary()
    if go is None:
        raise NriPluginsBuildError("the Go toolchain is not installed (needed for nri-plugins)")
    topo = nri_plugins_topology_dir().resolve()
    if not (topo / "topology.go").is_file():
        raise NriPluginsBuildError(
            f"{topo}/topology.go is absent: nri-plugins' nested pkg/topology module lives in "
            "../shared/third_party (or set NRI_PLUGINS_TOPOLOGY_DIR)"
        )
    go_version = _go_output(go, "env", "GOVERSION")
    key = hashlib.sha256(
        f"{NRI_PLUGINS_VERSION}\0{_tree_digest(topo)}\0{go_version}".encode()
    ).hexdigest()[:16]
    out = NRI_PLUGINS_CACHE / f"{NRI_PLUGINS_VERSION}-{key}"
    built = NriPlugins(
        NRI_PLUGINS_VERSION, *(out / binary for _pkg, binary in NRI_PLUGINS.values())
    )
    if built.topology_aware.is_file() and built.balloons.is_file():
        return built
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if built.topology_aware.is_file() and built.balloons.is_file():
            return built
        module = f"{NRI_PLUGINS_MODULE}@{NRI_PLUGINS_VERSION}"
        download = json.loads(_go_output(go, "mod", "download", "-json", module))
        src = Path(download["Dir"])
        wrap = out / "wrap"
        wrap.mkdir(exist_ok=True)
        (wrap / "go.mod").write_text(_wrapper_gomod(src, topo))
        (wrap / "go.sum").write_bytes((src / "go.sum").read_bytes())
        env = dict(os.environ, GOFLAGS="-mod=mod")
        for pkg, binary in NRI_PLUGINS.values():
            tmp = out / f".{binary}.{os.getpid()}"
            proc = subprocess.run(
                [go, "build", "-buildvcs=false", "-o", str(tmp), f"{NRI_PLUGINS_MODULE}/{pkg}"],
                cwd=wrap,
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=3600,
            )
            if proc.returncode != 0:
                raise NriPluginsBuildError(
                    f"building nri-plugins {NRI_PLUGINS_VERSION} {pkg} failed (go build exit "
                    f"{proc.returncode}): {proc.stderr[-2000:]}"
                )
            tmp.rename(out / binary)
    return built


def main(argv: list[str]) -> int:
    if argv != ["nri-plugins"]:
        print("usage: python3 -m tests.peers nri-plugins", file=sys.stderr)
        return 2
    try:
        built = make_nri_plugins()
    except NriPluginsBuildError as exc:
        print(f"nri-plugins: not built: {exc}", file=sys.stderr)
        return 1
    print(built.topology_aware.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
