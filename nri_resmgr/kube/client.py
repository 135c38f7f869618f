"""A small Kubernetes REST client: just what node reporting and configuration need.

Theory of operation: the daemon makes few, simple API calls (get/list/watch ConfigMaps,
server-side apply of one NodeResourceTopology object, create Events), so instead of a
large client library it speaks HTTPS+JSON with `http.client` directly.  Calls are
blocking; the asyncio shell runs them with `asyncio.to_thread`.  Credentials come from the
in-cluster service account, a kubeconfig (server, CA, bearer token or client certificate),
or are given explicitly (tests against a real kube-apiserver).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeError(Exception):
    """An API call failed; `status` is the HTTP status (0 for transport errors)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class KubeCredentials:
    server: str
    token: str | None = None
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    insecure: bool = False


def _materialize(data_b64: str) -> str:
    """Write base64 kubeconfig data to a private temp file and return its path."""
    fd, path = tempfile.mkstemp(prefix="nri-resmgr-kube-")
    with os.fdopen(fd, "wb") as f:
        f.write(base64.b64decode(data_b64))
    return path


def load_kubeconfig(path: str | Path) -> KubeCredentials:
    """Credentials of the current context of a kubeconfig file."""
    doc = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    ctx_name = doc.get("current-context")
    contexts = {c["name"]: c["context"] for c in doc.get("contexts") or []}
    if ctx_name not in contexts:
        raise KubeError(0, f"kubeconfig {path}: current-context {ctx_name!r} not found")
    ctx = contexts[ctx_name] or {}
    clusters = {c["name"]: c["cluster"] for c in doc.get("clusters") or []}
    cluster = clusters.get(ctx.get("cluster")) or {}
    if not cluster.get("server"):
        raise KubeError(
            0,
            f"kubeconfig {path}: context {ctx_name!r} names cluster {ctx.get('cluster')!r}, "
            "expected a cluster entry with a server URL",
        )
    user = {u["name"]: u["user"] for u in doc.get("users") or []}.get(ctx.get("user")) or {}
    ca = cluster.get("certificate-authority")
    if cluster.get("certificate-authority-data"):
        ca = _materialize(cluster["certificate-authority-data"])
    cert, key = user.get("client-certificate"), user.get("client-key")
    if user.get("client-certificate-data"):
        cert = _materialize(user["client-certificate-data"])
    if user.get("client-key-data"):
        key = _materialize(user["client-key-data"])
    token = user.get("token")
    if user.get("tokenFile"):
        token = Path(user["tokenFile"]).read_text(encoding="utf-8").strip()
    return KubeCredentials(
        server=cluster["server"],
        token=token,
        ca_file=ca,
        client_cert=cert,
        client_key=key,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
    )


def in_cluster_credentials() -> KubeCredentials | None:
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT", "443"),
    )
    if not host or not (SA_DIR / "token").exists():
        return None
    if ":" in host:
        host = f"[{host}]"
    return KubeCredentials(
        server=f"https://{host}:{port}",
        token=(SA_DIR / "token").read_text(encoding="utf-8").strip(),
        ca_file=str(SA_DIR / "ca.crt"),
    )


class KubeClient:
    """Blocking JSON-over-HTTPS calls against one API server."""

    def __init__(self, creds: KubeCredentials, *, timeout: float = 10.0) -> None:
        self.creds = creds
        self.timeout = timeout
        url = urllib.parse.urlsplit(creds.server)
        if url.scheme not in ("https", "http"):
            raise KubeError(0, f"API server {creds.server!r}: expected an https:// URL")
        self._scheme = url.scheme
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl: ssl.SSLContext | None = None
        if url.scheme == "https":
            ctx = ssl.create_default_context(cafile=creds.ca_file)
            if creds.insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if creds.client_cert:
                ctx.load_cert_chain(creds.client_cert, creds.client_key)
            self._ssl = ctx

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(
                self._host, self._port, context=self._ssl, timeout=timeout
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "nri-resmgr"}
        if self.creds.token:
            headers["Authorization"] = f"Bearer {self.creds.token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One API call; returns the decoded JSON body, raises KubeError on failure."""
        if query:
            path = f"{path}?{urllib.parse.urlencode(query)}"
        data = json.dumps(body).encode() if body is not None else None
        conn = self._connection(self.timeout)
        try:
            conn.request(
                method,
                path,
                body=data,
                headers=self._headers(content_type if data is not None else None),
            )
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise KubeError(0, f"{method} {path}: {exc}") from exc
        finally:
            conn.close()
        try:
            decoded = json.loads(raw) if raw else {}
        except ValueError:
            decoded = {"message": raw[:200].decode("utf-8", "replace")}
        if resp.status >= 400:
            raise KubeError(
                resp.status, f"{method} {path}: {resp.status} {decoded.get('message', resp.reason)}"
            )
        if not isinstance(decoded, dict):
            raise KubeError(resp.status, f"{method} {path}: expected a JSON object")
        return decoded

    def apply(self, path: str, obj: Mapping[str, Any], *, manager: str) -> dict[str, Any]:
        """Server-side apply: create or update `obj` at `path` in one request."""
        return self.request(
            "PATCH",
            path,
            body=obj,
            content_type="application/apply-patch+yaml",
            query={"fieldManager": manager, "force": "true"},
        )

    def watch(
        self,
        path: str,
        *,
        resource_version: str = "",
        timeout_seconds: int = 300,
        query: Mapping[str, str] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Stream watch events (`{"type": ..., "object": ...}`) until the server ends it."""
        q = {"watch": "1", "timeoutSeconds": str(timeout_seconds), **(query or {})}
        if resource_version:
            q["resourceVersion"] = resource_version
        full = f"{path}?{urllib.parse.urlencode(q)}"
        conn = self._connection(timeout_seconds + 30)
        try:
            conn.request("GET", full, headers=self._headers(None))
            resp = conn.getresponse()
            if resp.status >= 400:
                raise KubeError(resp.status, f"watch {path}: {resp.status} {resp.read()[:200]!r}")
            while True:
                line = resp.readline()
                if not line:
                    return
                if line.strip():
                    event = json.loads(line)
                    if isinstance(event, dict):
                        yield event
        except (OSError, http.client.HTTPException) as exc:
            raise KubeError(0, f"watch {path}: {exc}") from exc
        finally:
            conn.close()
