"""OCI image archives built from Debian's busybox-static, so the e2e suite pulls nothing.

An archive is an OCI image layout in a tar (`oci-layout`, `index.json`, `blobs/sha256/...`)
holding one uncompressed layer: `/bin/busybox` and symlinks for the applets the tests use.
`index.json` names the manifest with both `org.opencontainers.image.ref.name` and
`io.containerd.image.name`, so `ctr -n k8s.io images import` registers it under the full
reference that the CRI plugin (sandbox image) and crictl use.

Everything is deterministic (fixed mtimes, sorted entries), so the digests depend only on
the busybox binary.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "sleep", "cat", "ls", "echo", "true", "grep", "mkdir", "ps", "kill")
_MTIME = 1_700_000_000


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    info.mtime = _MTIME
    tar.addfile(info)


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = _MTIME
    tar.addfile(info, io.BytesIO(data))


def _add_symlink(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    info.mode = 0o777
    info.mtime = _MTIME
    tar.addfile(info)


def rootfs_layer(busybox: bytes) -> bytes:
    """An uncompressed layer tar: /bin/busybox, applet links, and the usual empty dirs."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "var", "var/run"):
            _add_dir(tar, d)
        _add_file(tar, "bin/busybox", busybox, 0o755)
        for applet in APPLETS:
            _add_symlink(tar, f"bin/{applet}", "busybox")
        _add_file(tar, "etc/passwd", b"root:x:0:0:root:/:/bin/sh\n")
        _add_file(tar, "etc/group", b"root:x:0:\n")
    return buf.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return digest


def oci_archive(ref: str, layer: bytes, cmd: list[str]) -> bytes:
    """A tar of an OCI image layout with one linux/amd64 image named `ref`."""
    blobs: dict[str, bytes] = {}
    layer_digest = _blob(blobs, layer)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "created": "2023-11-14T22:13:20Z",
            "config": {"Cmd": cmd, "Env": ["PATH=/bin"], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            "history": [{"created": "2023-11-14T22:13:20Z", "created_by": "nri-resmgr e2e"}],
        },
        sort_keys=True,
    ).encode()
    config_digest = _blob(blobs, config)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest,
                    "size": len(layer),
                }
            ],
        },
        sort_keys=True,
    ).encode()
    manifest_digest = _blob(blobs, manifest)
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": manifest_digest,
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": ref,
                        "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[-1],
                    },
                }
            ],
        },
        sort_keys=True,
    ).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add_file(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add_file(tar, "index.json", index)
        _add_dir(tar, "blobs")
        _add_dir(tar, "blobs/sha256")
        for digest in sorted(blobs):
            _add_file(tar, f"blobs/sha256/{digest.split(':', 1)[1]}", blobs[digest])
    return buf.getvalue()


def build_images(out_dir: Path, *, sandbox_ref: str, test_ref: str) -> list[Path]:
    """Write the sandbox (pause) and test image archives; return their paths."""
    busybox = BUSYBOX.read_bytes()
    layer = rootfs_layer(busybox)
    tag = hashlib.sha256(layer).hexdigest()[:12]
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = {
        out_dir / f"pause-{tag}.tar": (sandbox_ref, ["/bin/sleep", "2147483647"]),
        out_dir / f"busybox-{tag}.tar": (test_ref, ["/bin/sleep", "2147483647"]),
    }
    for path, (ref, cmd) in wanted.items():
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(oci_archive(ref, layer, cmd))
            tmp.rename(path)
    return list(wanted)
