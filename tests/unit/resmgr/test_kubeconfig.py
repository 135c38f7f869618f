"""Kubeconfig parsing: the shapes kubectl writes, including empty lists written as null."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from nri_resmgr.kube.client import KubeError, load_kubeconfig

FULL = """\
apiVersion: v1
kind: Config
current-context: node
contexts:
- name: other
  context: {cluster: far, user: nobody}
- name: node
  context: {cluster: local, user: admin}
clusters:
- name: far
  cluster: {server: "https://far:6443"}
- name: local
  cluster:
    server: "https://127.0.0.1:6443"
    certificate-authority-data: %s
users:
- name: admin
  user: {token: s3cret}
"""


def test_current_context_picks_its_cluster_and_user(tmp_path: Path) -> None:
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(FULL % base64.b64encode(b"PEM").decode())
    creds = load_kubeconfig(cfg)
    assert creds.server == "https://127.0.0.1:6443"
    assert creds.token == "s3cret"
    assert creds.ca_file is not None and Path(creds.ca_file).read_bytes() == b"PEM"


def test_null_users_list_means_no_user(tmp_path: Path) -> None:
    # `kubectl config view` writes empty sections as null
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(
        "current-context: c\n"
        "contexts: [{name: c, context: {cluster: k}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://k:6443',"
        " insecure-skip-tls-verify: true}}]\n"
        "users: null\n"
    )
    creds = load_kubeconfig(cfg)
    assert (creds.server, creds.token, creds.insecure) == ("https://k:6443", None, True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("contexts: null\ncurrent-context: c\n", "current-context 'c' not found"),
        ("current-context: c\ncontexts: [{name: c, context: {cluster: gone}}]\nclusters: null\n",
         "names cluster 'gone', expected a cluster entry with a server URL"),
        ("current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
         "clusters: [{name: k, cluster: {}}]\n",
         "names cluster 'k', expected a cluster entry with a server URL"),
    ],
)
def test_broken_kubeconfig_names_the_file_and_what_is_missing(
    tmp_path: Path, text: str, expected: str
) -> None:
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(text)
    with pytest.raises(KubeError) as err:
        load_kubeconfig(cfg)
    assert str(cfg) in str(err.value) and expected in str(err.value)
