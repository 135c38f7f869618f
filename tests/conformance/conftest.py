"""Fixtures of the conformance tests: a fake runtime per NRI version.

`runtime` is parametrized over every NRI release in `harness.VERSIONS`; each test
gets a freshly spawned fake runtime in its own short /tmp directory (not yet
started: the test installs pre-registered plugins first, then calls start()).
The Go binaries are built once per version and cached under .cache/conformance/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.harness import GoRuntime, short_tempdir
from tests.conformance.harness_build import VERSIONS, build_harness

pytestmark = pytest.mark.conformance


@pytest.fixture(params=list(VERSIONS), ids=list(VERSIONS))
def nri_version(request: pytest.FixtureRequest) -> str:
    version: str = request.param
    return version


@pytest.fixture
def runtime(nri_version: str, tmp_path: Path) -> Iterator[GoRuntime]:
    binary = build_harness(nri_version)
    with (
        short_tempdir() as dir,
        GoRuntime(
            version=nri_version, dir=dir, binary=binary, stderr_path=tmp_path / "harness.stderr"
        ) as rt,
    ):
        yield rt


@pytest.fixture(params=["external", "preregistered"])
def mode(request: pytest.FixtureRequest) -> str:
    """How the Python plugin under test attaches to the runtime."""
    value: str = request.param
    return value
