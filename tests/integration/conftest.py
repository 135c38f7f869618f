"""Shared fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._support import REPO
from tests.k8s.cluster import Cluster, control_plane

NRT_CRD = REPO / "charts" / "nri-resmgr" / "crds" / "noderesourcetopologies.yaml"


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One real control plane (etcd + kube-apiserver) with the NRT CRD, for the session."""
    with control_plane(tmp_path_factory.mktemp("k8s")) as c:
        c.apply_yaml(NRT_CRD)
        yield c
