"""A real, minimal Kubernetes control plane for tests: etcd + kube-apiserver.

etcd is Debian's `etcd-server`; kube-apiserver is built from its Go module by the wrapper
module in tests/k8s/apiserver (cached under .cache/k8s/, keyed by a hash of that module).
The API server runs on 127.0.0.1 with a self-signed serving certificate it generates, a
static admin token, AlwaysAllow authorization and no controllers: exactly enough to read
and write objects, watch them, and serve CRDs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nri_resmgr.kube.client import KubeClient, KubeCredentials, KubeError
from tests.k8s.components import VERSION_LDFLAGS
from tests.support.requirements import REPO, require, require_go

MODULE = Path(__file__).resolve().parent / "apiserver"
CACHE = REPO / ".cache" / "k8s"
TOKEN = "nri-resmgr-test-admin-token"


def _digest() -> str:
    h = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        h.update((MODULE / name).read_bytes())
    h.update(" ".join(VERSION_LDFLAGS).encode())
    return h.hexdigest()[:16]


def build_kube_apiserver() -> Path:
    """Build (once) and return the kube-apiserver binary."""
    binary = CACHE / f"kube-apiserver-{_digest()}"
    if binary.exists():
        return binary
    go = require_go()
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_suffix(".tmp")
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=readonly")
    out = subprocess.run(
        [go, "build", "-ldflags", " ".join(VERSION_LDFLAGS), "-o", str(tmp), "."],
        cwd=MODULE,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    require(out.returncode == 0, f"building kube-apiserver failed: {out.stderr[-3000:]}")
    tmp.rename(binary)
    return binary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class Cluster:
    client: KubeClient
    creds: KubeCredentials
    dir: Path

    def kubeconfig(self) -> Path:
        path = self.dir / "kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "t",
                            "cluster": {
                                "server": self.creds.server,
                                "certificate-authority": self.creds.ca_file,
                            },
                        }
                    ],
                    "users": [{"name": "t", "user": {"token": TOKEN}}],
                    "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
                    "current-context": "t",
                }
            )
        )
        return path

    def apply_yaml(self, path: Path) -> None:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "CustomResourceDefinition":
                self.create_crd(doc)

    def create_crd(self, crd: dict[str, Any]) -> None:
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        self.client.request("POST", base, body=crd)
        name = crd["metadata"]["name"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = self.client.request("GET", f"{base}/{name}")
            # a fresh CRD may come back with "conditions": null
            listed = (got.get("status") or {}).get("conditions") or []
            conds = {c["type"]: c["status"] for c in listed}
            if conds.get("Established") == "True":
                # the new resource path may still 404 for a moment
                group, version = crd["spec"]["group"], crd["spec"]["versions"][0]["name"]
                plural = crd["spec"]["names"]["plural"]
                with contextlib.suppress(KubeError):
                    self.client.request("GET", f"/apis/{group}/{version}/{plural}")
                    return
            time.sleep(0.2)
        raise TimeoutError(f"CRD {name} not established within 60 s")


def _wait_ready(client: KubeClient, procs: list[subprocess.Popen[bytes]], log: Path) -> None:
    deadline = time.monotonic() + 180
    last = ""
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(
                    f"control plane process exited ({p.args!r}); log:\n{log.read_text()[-3000:]}"
                )
        try:
            client.request("GET", "/readyz")
            client.request("GET", "/api/v1/namespaces/default")
            return
        except KubeError as exc:
            last = str(exc)
        time.sleep(0.5)
    raise TimeoutError(f"kube-apiserver not ready in 180 s: {last}\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def control_plane(
    workdir: Path, *, address: str = "127.0.0.1", authorization: str = "AlwaysAllow",
    service_accounts: bool = False,
    extra_args: Sequence[str] = (),
) -> Iterator[Cluster]:  # fmt: skip
    """Start etcd and kube-apiserver in `workdir`; stop both afterwards.

    The defaults serve object tests: AlwaysAllow and no ServiceAccount admission. A real
    node (tests/e2e_kube) asks for `authorization="Node,RBAC"`, `service_accounts=True`
    (pods get their projected token), an `address` its pods can reach, and `extra_args`.
    """
    etcd = shutil.which("etcd") or "/usr/bin/etcd"
    require(os.path.exists(etcd), "etcd is not installed (Debian package etcd-server)")
    openssl = shutil.which("openssl")
    require(openssl, "openssl is not installed")
    assert openssl is not None
    apiserver = build_kube_apiserver()
    workdir.mkdir(parents=True, exist_ok=True)
    client_port, peer_port, api_port = _free_port(), _free_port(), _free_port()
    log = workdir / "control-plane.log"
    key = workdir / "sa.key"
    subprocess.run([openssl, "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    (workdir / "tokens.csv").write_text(f'{TOKEN},admin,admin,"system:masters"\n')
    procs: list[subprocess.Popen[bytes]] = []
    with open(log, "ab") as out:
        try:
            procs.append(
                subprocess.Popen(
                    [
                        etcd,
                        "--data-dir",
                        str(workdir / "etcd"),
                        "--name",
                        "t",
                        "--listen-client-urls",
                        f"http://127.0.0.1:{client_port}",
                        "--advertise-client-urls",
                        f"http://127.0.0.1:{client_port}",
                        "--listen-peer-urls",
                        f"http://127.0.0.1:{peer_port}",
                        "--initial-advertise-peer-urls",
                        f"http://127.0.0.1:{peer_port}",
                        "--initial-cluster",
                        f"t=http://127.0.0.1:{peer_port}",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=dict(os.environ, ETCD_UNSUPPORTED_ARCH=os.uname().machine),
                )
            )
            procs.append(
                subprocess.Popen(
                    [
                        str(apiserver),
                        f"--etcd-servers=http://127.0.0.1:{client_port}",
                        f"--bind-address={address}",
                        f"--advertise-address={address}",
                        f"--secure-port={api_port}",
                        f"--cert-dir={workdir / 'certs'}",
                        f"--token-auth-file={workdir / 'tokens.csv'}",
                        f"--authorization-mode={authorization}",
                        f"--service-account-key-file={key}",
                        f"--service-account-signing-key-file={key}",
                        "--service-account-issuer=https://kubernetes.default.svc",
                        "--service-cluster-ip-range=10.96.0.0/24",
                        "--enable-priority-and-fairness=false",
                        *(
                            []
                            if service_accounts
                            else ["--disable-admission-plugins=ServiceAccount"]
                        ),
                        "--storage-backend=etcd3",
                        "--v=1",
                        *extra_args,
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
            cert = workdir / "certs" / "apiserver.crt"
            deadline = time.monotonic() + 120
            while not cert.exists() and time.monotonic() < deadline:
                if procs[1].poll() is not None:
                    break
                time.sleep(0.2)
            creds = KubeCredentials(
                server=f"https://{address}:{api_port}", token=TOKEN, ca_file=str(cert)
            )
            client = KubeClient(creds, timeout=30)
            _wait_ready(client, procs, log)
            yield Cluster(client=client, creds=creds, dir=workdir)
        finally:
            # nothing here is worth a graceful shutdown: the data dir is thrown away
            for p in reversed(procs):
                p.kill()
            for p in reversed(procs):
                p.wait()
