"""Fixtures of the image and real-node suite.

Everything here is marked `e2e`. The containerd fixtures are the e2e suite's own (the same
cached builds, private paths and cleanup), but `release` here covers the containerd
releases only: the node and the image tests drive containerd (`ctr images import`, its
shim, its CRI config), so CRI-O, which tests/e2e also runs, is not a runtime of theirs.
`nri_image` builds the image once per source tree (tests/e2e_kube/image.py); `node` is a
real single-node Kubernetes (tests/e2e_kube/node.py) for a module's scenarios.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import containerd as ctdmod
from tests.e2e.conftest import (  # noqa: F401 - fixtures re-exported to this directory
    RELEASE_IDS,
    _built,
    containerd,
    containerd_bins,
    crictl_bin,
    e2e_host,
    image_archives,
    processes,
    short_tmp,
)
from tests.e2e_kube.image import Image, build_image
from tests.e2e_kube.node import Node, kube_node
from tests.k8s.components import build_node_components
from tests.peers import build_helm
from tests.support.requirements import require, require_go, require_two_cpus

#: per-test timeout: the first test may build the image and Kubernetes cold
TIMEOUT = 3600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(TIMEOUT))


@pytest.fixture(
    scope="session",
    params=[r.name for r in ctdmod.CONTAINERD_RELEASES],
    ids=[RELEASE_IDS[r.name] for r in ctdmod.CONTAINERD_RELEASES],
)
def release(request: pytest.FixtureRequest) -> ctdmod.Release:
    """The containerd releases (the e2e suite's fixture of this name also covers CRI-O)."""
    return next(r for r in ctdmod.CONTAINERD_RELEASES if r.name == request.param)


@pytest.fixture(scope="session")
def nri_image(e2e_host: str) -> Image:  # noqa: F811 - the fixture imported above
    return build_image()


@pytest.fixture(scope="module")
def node(
    request: pytest.FixtureRequest,
    e2e_host: str,  # noqa: F811 - the fixtures imported above
    release: ctdmod.Release,
    crictl_bin: Path,  # noqa: F811
    image_archives: list[Path],  # noqa: F811
) -> Iterator[Node]:
    """A real single-node Kubernetes, once per module and containerd release (ids ctd1.7
    and ctd2, like tests/e2e); its logs are kept under the module's and release's name."""
    require_two_cpus()
    require(
        Path("/usr/lib/cni/bridge").exists(),
        "Debian's containernetworking-plugins is not installed (/usr/lib/cni/bridge)",
    )
    go = require_go()
    k8s = build_node_components()
    helm = Path(build_helm())
    bins = ctdmod.build(release, go)
    module = request.module.__name__.rsplit(".", 1)[-1]
    with kube_node(
        release=release,
        ctd_bins=bins,
        crictl=crictl_bin,
        images=image_archives,
        k8s=k8s,
        helm=helm,
        run=f"{module}-{RELEASE_IDS[release.name]}",
    ) as n:
        yield n
