"""Shared fixtures of the integration tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from nri_resmgr.topology.model import Topology
from tests.k8s.cluster import Cluster, control_plane
from tests.support.daemon import MACHINE, discovered
from tests.support.requirements import REPO

NRT_CRD = REPO / "charts" / "nri-resmgr" / "crds" / "noderesourcetopologies.yaml"


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One real control plane (etcd + kube-apiserver) with the NRT CRD, for the session."""
    with control_plane(tmp_path_factory.mktemp("k8s")) as c:
        c.apply_yaml(NRT_CRD)
        yield c


@pytest.fixture(scope="module")
def topology() -> Topology:
    """The daemon tests' machine (`MACHINE`), read back through discovery."""
    return discovered(MACHINE)


@pytest.fixture
def sock_path() -> Iterator[str]:
    """A socket path in a fresh directory under /tmp (short: the AF_UNIX path limit)."""
    directory = tempfile.mkdtemp(prefix="nri-", dir="/tmp")
    try:
        yield os.path.join(directory, "nri.sock")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
