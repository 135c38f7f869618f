"""Build (cached) and run a private CRI-O for the e2e suite.

Theory of operation
-------------------
CRI-O is built like the containerd releases (`tests/e2e/containerd.py`): a wrapper Go
module, `tests/e2e/build/crio/`, requires one cri-o release and imports `cmd/crio`, and
`containerd.build` compiles it into `.cache/e2e/bin/crio-<key>/`. Unlike containerd it is
a cgo build (libseccomp, containers/storage's overlay driver), with CRI-O's own build tags
less what this machine has no use for (btrfs, devicemapper, ostree, gpgme). The same
module holds `load-image/`, a small command that copies the suite's OCI archives into
CRI-O's store with the containers/image and storage releases CRI-O itself vendors: CRI-O
has no CRI call that reads a local archive. `pinns`, CRI-O's namespace pinner, is C: it is
compiled with `cc` from the cri-o module's own `pinns/src` into the same cache. `conmon`
and `runc` are Debian's.

`Crio` is a `Containerd` (same `Layout`, crictl, log and process handling) whose config is
a private `crio.conf`: storage (`root`, `runroot`), state, exits, attach and namespace
dirs, the CRI socket and the NRI socket all under the test's short temp dir, the
cgroupfs manager with conmon in the pod cgroup, the runc wrapper of the containerd runs
(same slow-create fault switch), and the NRI plugin and plugin config dirs of
`nri-resmgr install --root`. NRI itself is switched on by the drop-in that
`nri-resmgr enable-nri --runtime crio` writes into the private `crio.conf.d/`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import signal
import subprocess
from pathlib import Path

from nri_resmgr import cli
from tests.e2e import containerd as ctd
from tests.e2e import cri
from tests.e2e.containerd import Containerd, Release
from tests.e2e.layout import Layout, unmount_under

#: CRI-O's Makefile tags (hack/*_tag.sh) as they come out on this host, plus the graph
#: drivers this machine cannot use
_CGO_TAGS = (
    "containers_image_ostree_stub", "containers_image_openpgp", "seccomp",
    "exclude_graphdriver_btrfs", "exclude_graphdriver_devicemapper", "btrfs_noversion",
)  # fmt: skip

CRIO = Release(
    name="crio",
    module="github.com/cri-o/cri-o",
    version="1.36.3",
    commands=("github.com/cri-o/cri-o/cmd/crio", "./load-image"),
    ldflags=("-X github.com/cri-o/cri-o/internal/version.buildCommit=nri-resmgr-e2e",),
    cgo_tags=",".join(_CGO_TAGS),
    sources=("load-image/main.go",),
)

#: conmon is Debian's (CRI-O's container monitor; containerd's shim has no CRI-O use)
CONMON = Path("/usr/bin/conmon")


def _module_dir(go: str) -> Path:
    """The cri-o module's directory in the Go module cache (downloaded by the build)."""
    r = subprocess.run(
        [go, "list", "-mod=mod", "-m", "-f", "{{.Dir}}", CRIO.module],
        cwd=ctd.BUILD_DIR / CRIO.name, capture_output=True, text=True, check=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )  # fmt: skip
    return Path(r.stdout.strip())


def build_pinns(go: str) -> Path:
    """`pinns` from the pinned cri-o module's C sources, cached by their hash."""
    src = sorted((_module_dir(go) / "pinns" / "src").glob("*.[ch]"))
    if not src:
        raise ctd.BuildError(f"no pinns sources in the cri-o {CRIO.version} module")
    h = hashlib.sha256()
    for f in src:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    out = ctd.CACHE / "bin" / f"pinns-{h.hexdigest()[:16]}" / "pinns"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(ctd.CACHE / ".build-pinns.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():
            return out
        tmp = out.with_name("pinns.tmp")
        cmd = ["cc", "-std=c99", "-O2", "-Wall", "-static", "-o", str(tmp)]
        proc = subprocess.run(
            [*cmd, *(str(f) for f in src if f.suffix == ".c")], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise ctd.BuildError(f"building pinns failed:\n{proc.stderr[-4000:]}")
        tmp.rename(out)
    return out


def build(go: str) -> dict[str, Path]:
    """crio, load-image and pinns, each built once: {name: path}."""
    paths = ctd.build(CRIO, go)
    return {**paths, "pinns": build_pinns(go)}


def render_config(layout: Layout, pinns: Path) -> str:
    """crio.conf: every path private, cgroupfs, runc through the suite's wrapper."""
    b = layout.base
    return f"""
[crio]
root = "{layout.root}"
runroot = "{layout.state}"
storage_driver = "overlay"
log_dir = "{b}/pod-logs"
version_file = "{b}/crio-version"
version_file_persist = "{b}/crio-version-persist"
clean_shutdown_file = "{b}/crio-clean.shutdown"

[crio.api]
listen = "{layout.grpc_socket}"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
log_level = "debug"
selinux = false
seccomp_profile = ""
apparmor_profile = ""
hooks_dir = []
container_exits_dir = "{b}/exits"
container_attach_socket_dir = "{b}/attach"
namespaces_dir = "{b}/ns"
pinns_path = "{pinns}"
irqbalance_config_file = "{b}/irqbalance"
irqbalance_config_restore_file = "{b}/irqbalance-restore"
cdi_spec_dirs = []

[crio.runtime.runtimes.runc]
runtime_path = "{layout.runc_wrapper}"
runtime_type = "oci"
runtime_root = "{b}/runc"
monitor_path = "{CONMON}"
monitor_cgroup = "pod"

[crio.image]
pause_image = "{ctd.SANDBOX_IMAGE}"
pause_command = ""
signature_policy = "{b}/policy.json"
signature_policy_dir = "{b}/policies"
namespaced_auth_dir = "{b}/auth"
big_files_temporary_dir = "{b}/tmp"

[crio.network]
network_dir = "{b}/cni-conf"
plugin_dirs = ["{b}/cni-bin"]

[crio.metrics]
enable_metrics = false

[crio.nri]
nri_plugin_dir = "{layout.plugin_path}"
nri_plugin_config_dir = "{layout.plugin_config_path}"
"""


class Crio(Containerd):
    """One running private CRI-O; the `Containerd` interface, CRI-O underneath."""

    def __init__(
        self,
        binaries: dict[str, Path],
        crictl: Path,
        layout: Layout,
        *,
        request_timeout: str = "2s",
        registration_timeout: str = "5s",
    ) -> None:
        super().__init__(
            CRIO, binaries, crictl, layout,
            request_timeout=request_timeout, registration_timeout=registration_timeout,
        )  # fmt: skip

    @property
    def config_dir(self) -> Path:
        return self.layout.base / "crio.conf.d"

    @property
    def nri_dropin(self) -> Path:
        return self.config_dir / "10-enable-nri.conf"

    def write_config(self) -> None:
        b = self.layout.base
        for d in ("exits", "attach", "ns", "pod-logs", "tmp", "runc", "crio.conf.d"):
            (b / d).mkdir(parents=True, exist_ok=True)
        (b / "policy.json").write_text('{"default": [{"type": "insecureAcceptAnything"}]}\n')
        (b / "registries.conf").write_text("unqualified-search-registries = []\n")
        (b / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{self.layout.root}"\n'
            f'runroot = "{self.layout.state}"\n'
        )
        self.layout.config.write_text(render_config(self.layout, self.binaries["pinns"]))
        # NRI on through the product's own command, as an operator would do it
        rc = cli.main([
            "enable-nri", "--runtime", "crio", "--config", str(self.nri_dropin),
            "--socket-path", str(self.layout.nri_socket),
            "--registration-timeout", self.registration_timeout,
            "--request-timeout", self.request_timeout,
        ])  # fmt: skip
        if rc != 0:
            raise ctd.ContainerdError(f"nri-resmgr enable-nri --runtime crio exited with {rc}")

    def command(self) -> list[str]:
        return [
            str(self.binaries["crio"]),
            "--config", str(self.layout.config),
            "--config-dir", str(self.config_dir),
        ]  # fmt: skip

    def env(self) -> dict[str, str]:
        env = super().env()
        # containers/image and storage read these system files unless pointed elsewhere
        env["CONTAINERS_REGISTRIES_CONF"] = str(self.layout.base / "registries.conf")
        env["CONTAINERS_STORAGE_CONF"] = str(self.layout.base / "storage.conf")
        return env

    def import_image(self, archive: Path) -> None:
        name = _archive_ref(archive)
        r = subprocess.run(
            [
                str(self.binaries["load-image"]), "-root", str(self.layout.root),
                "-runroot", str(self.layout.state), "-driver", "overlay", str(archive), name,
            ],
            capture_output=True, text=True, env=self.env(), timeout=300,
        )  # fmt: skip
        if r.returncode != 0:
            raise ctd.ContainerdError(f"load-image {archive} failed: {r.stderr.strip()}")

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        raise ctd.ContainerdError("CRI-O has no ctr; use crictl")

    def remove_all_pods(self) -> None:
        cri.stop_now(self)  # CRI-O's StopPodSandbox would wait 30 s per pod
        super().remove_all_pods()

    def cleanup(self) -> None:
        """Remove every pod, stop CRI-O, then reap conmons and mounts it left."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.remove_all_pods()
        self.stop()
        _kill_conmons(self.layout)
        # a container outlives its killed conmon: reap by cgroup, then rmdir the leaves
        # (the e2e fixture does the same; the bench relies on this)
        for parent in pod_parents(self.layout):
            cri.kill_cgroup_tree("cpuset", parent)
            for controller in os.listdir(cri.CGROUP_ROOT):
                top = cri.CGROUP_ROOT / controller / parent.lstrip("/")
                for leaf in sorted(top.glob("crio-*/"), reverse=True):
                    with contextlib.suppress(OSError):
                        leaf.rmdir()
        unmount_under(self.layout.base)


def _archive_ref(archive: Path) -> str:
    """The image name an archive of tests/e2e/images.py carries."""
    import json
    import tarfile

    with tarfile.open(archive) as tar:
        f = tar.extractfile("index.json")
        assert f is not None, f"{archive}: no index.json"
        index = json.load(f)
    return str(index["manifests"][0]["annotations"]["io.containerd.image.name"])


def pod_parents(layout: Layout) -> list[str]:
    """The cgroup parents of the pods `cri.run_pod` made here (from their specs)."""
    import json

    out = []
    for spec in (layout.base / "specs").glob("pod-*.json"):
        with contextlib.suppress(ValueError, KeyError, OSError):
            out.append(str(json.loads(spec.read_text())["linux"]["cgroup_parent"]))
    return out


def _kill_conmons(layout: Layout) -> None:
    """SIGKILL every conmon whose command line names this CRI-O's paths."""
    marker = str(layout.base).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline and cmdline.split(b"\0", 1)[0].endswith(b"conmon"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


if __name__ == "__main__":  # python -m tests.e2e.crio: warm the cache
    import time

    from tests.support.requirements import go_binary

    go = go_binary()
    if go is None:
        raise SystemExit("no Go toolchain")
    t0 = time.monotonic()
    paths = ctd.build(CRIO, go, log=ctd.CACHE / "build-crio.log")
    paths["pinns"] = build_pinns(go)
    print(f"crio: {time.monotonic() - t0:.0f}s", *map(str, paths.values()))
