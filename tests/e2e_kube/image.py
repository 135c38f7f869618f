"""The nri-resmgr container image, built by tools/build-image.sh and cached by content.

The archive lands in `.cache/image/<key>/nri-resmgr.oci.tar`, where the key hashes every
input of the build that can change what runs: the Containerfile, its ignore file, the
build script, pyproject.toml and the package sources. (README.md goes in too, as the
wheel's long description; it is left out of the key so that editing the docs does not
rebuild the image.) A second call with the same sources returns the cached archive
without running the build (about two minutes). The Debian rootfs under each image, which
does not depend on our sources, is kept in `.cache/image/debian-rootfs/` for a week
(tools/build-image.sh's BASE_CACHE), so a source change reruns only pip: what makes the
arm64 image, whose rootfs is made under emulation, affordable to rebuild.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.requirements import REPO, require

CACHE = REPO / ".cache" / "image"
#: tools/build-image.sh's BASE_CACHE: each architecture's Debian rootfs, reused for 7 days
BASE_CACHE = CACHE / "debian-rootfs"
SCRIPT = REPO / "tools" / "build-image.sh"
#: where the test image is stored in containerd; the chart gets it through
#: image.repository / image.tag (a name without a registry means docker.io/library/)
REPOSITORY = "nri-resmgr"
_INPUTS = ("Containerfile", ".containerignore", "tools/build-image.sh", "pyproject.toml")
_SOURCES = ("nri_api", "nri_resmgr")


class ImageBuildError(RuntimeError):
    """tools/build-image.sh failed; the message carries the tail of its output."""


@dataclass(frozen=True, slots=True)
class Image:
    archive: Path
    repository: str
    tag: str
    seconds: float  # how long the build took (0 when it came from the cache)

    @property
    def ref(self) -> str:
        """The full reference containerd stores after `ctr images import`."""
        return f"docker.io/library/{self.repository}:{self.tag}"

    @property
    def size(self) -> int:
        """Bytes of the archive (the compressed layers plus a few KB of JSON)."""
        return self.archive.stat().st_size


def _sources() -> list[Path]:
    files = [REPO / name for name in _INPUTS]
    for top in _SOURCES:
        for path in (REPO / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.append(path)
    return sorted(files)


def image_key() -> str:
    h = hashlib.sha256()
    for path in _sources():
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def host_arch() -> str:
    """This machine's Debian architecture (amd64, arm64), as build-image.sh names it."""
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)


def emulated(arch: str) -> bool:
    """Whether binfmt_misc runs `arch` binaries here through qemu-user."""
    qemu = {"arm64": "aarch64", "amd64": "x86_64"}[arch]
    handler = Path(f"/proc/sys/fs/binfmt_misc/qemu-{qemu}")
    return handler.exists() and handler.read_text().startswith("enabled")


def build_image(arch: str | None = None) -> Image:
    """Build (once per source tree and architecture) the image as an OCI archive and
    return it; another architecture than this machine's is built under qemu-user."""
    require(os.geteuid() == 0, "building the image needs root (mmdebstrap, buildah)")
    for tool in ("mmdebstrap", "buildah"):
        require(shutil.which(tool), f"{tool} is not installed (Debian package {tool})")
    arch = arch or host_arch()
    if arch != host_arch():
        require(
            emulated(arch),
            f"building the {arch} image on {host_arch()} needs qemu-user emulation "
            "(tools/install-test-deps.sh installs qemu-user-static and binfmt-support)",
        )
    key = image_key()
    out = CACHE / (key if arch == host_arch() else f"{key}-{arch}")
    archive = out / "nri-resmgr.oci.tar"
    image = Image(archive, REPOSITORY, f"test-{key}", 0.0)
    if archive.exists():
        return image
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.exists():
            return image
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        started = time.monotonic()
        proc = subprocess.run(
            ["sh", str(SCRIPT), "-t", f"{REPOSITORY}:{image.tag}",
             "-o", str(tmp / archive.name), "--arch", arch],
            cwd=REPO,
            capture_output=True,
            text=True,
            # the Debian rootfs does not depend on our sources: kept between builds
            env={**os.environ, "BASE_CACHE": os.environ.get("BASE_CACHE", str(BASE_CACHE))},
            timeout=1800 if arch == host_arch() else 5400,
        )
        if proc.returncode != 0:
            raise ImageBuildError(
                f"tools/build-image.sh exited with {proc.returncode}: {proc.stderr[-3000:]}"
            )
        seconds = round(time.monotonic() - started, 1)
        (tmp / "BUILD.json").write_text(json.dumps({"seconds": seconds}))
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return Image(archive, REPOSITORY, image.tag, seconds)
