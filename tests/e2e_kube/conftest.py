"""Fixtures of the image and real-node suite.

Everything here is marked `e2e`. The containerd fixtures are the e2e suite's own (the same
cached builds, private paths and cleanup); `nri_image` builds the image once per source
tree (tests/e2e_kube/image.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import (  # noqa: F401 - fixtures re-exported to this directory
    _built,
    containerd,
    containerd_bins,
    crictl_bin,
    e2e_host,
    image_archives,
    processes,
    release,
    short_tmp,
)
from tests.e2e_kube.image import Image, build_image

#: per-test timeout: the first test may build the image and Kubernetes cold
TIMEOUT = 3600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(TIMEOUT))


@pytest.fixture(scope="session")
def nri_image(e2e_host: str) -> Image:  # noqa: F811 - the fixture imported above
    return build_image()
