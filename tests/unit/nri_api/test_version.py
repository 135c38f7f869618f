"""Inferring the runtime's NRI release: reported field, runtime tables, default.

The tables below restate NRI-FACTS §0 row by row: each row's first and last sampled
runtime release, plus the release just past each boundary.
"""

from __future__ import annotations

import pytest

from nri_api.events import NRIVersion
from nri_api.version import (
    DEFAULT_NRI_VERSION,
    Runtime,
    VersionSource,
    infer_runtime_nri_version,
    nri_version_of_runtime,
    parse_runtime_version,
    runtime_kind,
)

CRIO_031_PSEUDO = "v0.3.1-0.20230504231226-94185418e253"
CRIO_091_PSEUDO = "v0.9.1-0.20250219030224-e597e7849f24"

CONTAINERD = [
    # 1.7.0 to 1.7.6 -> v0.3.0
    ("1.7.0", "v0.3.0"),
    ("1.7.6", "v0.3.0"),
    # 1.7.7 to 1.7.13 -> v0.4.0
    ("1.7.7", "v0.4.0"),
    ("1.7.13", "v0.4.0"),
    # 1.7.14 to 1.7.15 -> v0.6.0
    ("1.7.14", "v0.6.0"),
    ("1.7.15", "v0.6.0"),
    # 1.7.16 to 1.7.25 -> v0.6.1
    ("1.7.16", "v0.6.1"),
    ("1.7.25", "v0.6.1"),
    # 1.7.26 to 1.7.34 -> v0.8.0
    ("1.7.26", "v0.8.0"),
    ("1.7.27", "v0.8.0"),
    ("1.7.34", "v0.8.0"),
    # 2.0.0 to 2.0.11 -> v0.8.0
    ("2.0.0", "v0.8.0"),
    ("2.0.11", "v0.8.0"),
    # 2.1.0 to 2.1.9 -> v0.8.0 (not v0.9)
    ("2.1.0", "v0.8.0"),
    ("v2.1.4", "v0.8.0"),
    ("2.1.9", "v0.8.0"),
    # 2.2.0 -> v0.10.0
    ("2.2.0", "v0.10.0"),
    # 2.2.1 to 2.2.7 -> v0.11.0
    ("2.2.1", "v0.11.0"),
    ("2.2.7", "v0.11.0"),
    # 2.3.0 to 2.3.4 -> v0.12.0
    ("2.3.0", "v0.12.0"),
    ("2.3.4", "v0.12.0"),
    # 2.4.0-beta.0 -> v0.12.1
    ("2.4.0-beta.0", "v0.12.1"),
    ("v2.4.0-beta.0", "v0.12.1"),
    # pre-releases fall back to the previous line
    ("2.2.0-rc.1", "v0.8.0"),
    ("2.3.0-rc.0", "v0.11.0"),
    ("2.4.0-alpha.1", "v0.12.0"),
    # newer than the table: the newest known row
    ("2.4.0", "v0.12.1"),
    ("3.0.0", "v0.12.1"),
    # git-describe builds count as the tag they follow
    ("v2.2.0-12-g0123abc", "v0.10.0"),
    # distribution suffixes that are not semantic versions are dropped
    ("1.7.24~ds1-1", "v0.6.1"),
]

CRIO = [
    # 1.26.0 to 1.26.1 -> v0.2.0
    ("1.26.0", "v0.2.0"),
    ("1.26.1", "v0.2.0"),
    # 1.26.2 to 1.26.3 -> v0.3.0
    ("1.26.2", "v0.3.0"),
    ("1.26.3", "v0.3.0"),
    # 1.26.4 -> v0.3.1 pseudo, but 1.27.0 -> v0.3.0 again
    ("1.26.4", CRIO_031_PSEUDO),
    ("1.27.0", "v0.3.0"),
    # 1.27.1 to 1.28.x -> v0.3.1 pseudo
    ("1.27.1", CRIO_031_PSEUDO),
    ("1.28.0", CRIO_031_PSEUDO),
    ("1.28.11", CRIO_031_PSEUDO),
    # 1.29.0 to 1.29.1 -> v0.5.0
    ("1.29.0", "v0.5.0"),
    ("1.29.1", "v0.5.0"),
    # 1.29.2 to 1.30.x -> v0.6.0
    ("1.29.2", "v0.6.0"),
    ("1.30.0", "v0.6.0"),
    ("1.30.14", "v0.6.0"),
    # 1.31.x -> v0.6.1
    ("1.31.0", "v0.6.1"),
    ("1.31.9", "v0.6.1"),
    # 1.32.x -> v0.9.0
    ("1.32.0", "v0.9.0"),
    ("1.32.5", "v0.9.0"),
    # 1.33.x -> v0.9.1 pseudo
    ("1.33.0", CRIO_091_PSEUDO),
    ("1.33.4", CRIO_091_PSEUDO),
    # 1.34.x -> v0.10.0
    ("1.34.0", "v0.10.0"),
    ("v1.34.2", "v0.10.0"),
    # 1.35.0 -> v0.11.0
    ("1.35.0", "v0.11.0"),
]


@pytest.mark.parametrize(("runtime_version", "nri"), CONTAINERD, ids=[r[0] for r in CONTAINERD])
def test_containerd_table(runtime_version: str, nri: str) -> None:
    assert nri_version_of_runtime("containerd", runtime_version) == NRIVersion.parse(nri)
    got = infer_runtime_nri_version(
        nri_version="", runtime_name="containerd", runtime_version=runtime_version
    )
    assert got.version == NRIVersion.parse(nri)
    assert got.source is VersionSource.RUNTIME_TABLE
    assert runtime_version in got.detail


@pytest.mark.parametrize(("runtime_version", "nri"), CRIO, ids=[r[0] for r in CRIO])
def test_crio_table(runtime_version: str, nri: str) -> None:
    assert nri_version_of_runtime("cri-o", runtime_version) == NRIVersion.parse(nri)


@pytest.mark.parametrize(
    ("runtime_name", "runtime_version"),
    [
        pytest.param("containerd", "1.6.33", id="containerd-1.6"),
        pytest.param("containerd", "1.7.0-rc.1", id="containerd-before-1.7.0"),
        pytest.param("cri-o", "1.25.4", id="crio-1.25"),
        pytest.param("containerd", "", id="no-version"),
        pytest.param("containerd", "devel", id="unparsable-version"),
        pytest.param("podman", "5.0.0", id="unknown-runtime"),
        pytest.param("", "", id="nothing"),
    ],
)
def test_unknown_falls_back_to_oldest(runtime_name: str, runtime_version: str) -> None:
    assert nri_version_of_runtime(runtime_name, runtime_version) is None
    got = infer_runtime_nri_version(
        nri_version="", runtime_name=runtime_name, runtime_version=runtime_version
    )
    assert got.version == DEFAULT_NRI_VERSION == NRIVersion(0, 3, 0)
    assert got.source is VersionSource.DEFAULT
    assert got.events_mask == 0x7FF
    assert "assuming the oldest" in got.detail


@pytest.mark.parametrize(
    ("reported", "expected", "mask"),
    [
        ("v0.12.2", "v0.12.2", 0x3FFF),
        ("0.12.0", "v0.12.0", 0x3FFF),
        ("v0.9.0", "v0.9.0", 0x7FF),
        ("v0.12.1-0.20260601000000-0123456789ab", "v0.12.1-0.20260601000000-0123456789ab", 0x3FFF),
    ],
)
def test_reported_version_wins(reported: str, expected: str, mask: int) -> None:
    # The runtime fields would say something else; the reported field must win.
    got = infer_runtime_nri_version(
        nri_version=reported, runtime_name="containerd", runtime_version="1.7.0"
    )
    assert got.version == NRIVersion.parse(expected)
    assert got.source is VersionSource.REPORTED
    assert got.events_mask == mask


@pytest.mark.parametrize("reported", ["", "unknown", "0.0.0-unknown", "(devel)"])
def test_placeholder_reported_version_uses_the_table(reported: str) -> None:
    got = infer_runtime_nri_version(
        nri_version=reported, runtime_name="containerd", runtime_version="v2.2.1"
    )
    assert got.source is VersionSource.RUNTIME_TABLE
    assert got.version == NRIVersion(0, 11, 0)
    assert got.events_mask == 0x3FFF


def test_garbage_reported_version_is_explained_not_raised() -> None:
    got = infer_runtime_nri_version(
        nri_version="banana", runtime_name="cri-o", runtime_version="1.34.0"
    )
    assert got.source is VersionSource.RUNTIME_TABLE
    assert got.version == NRIVersion(0, 10, 0)
    assert "'banana' is not a version" in got.detail


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("containerd", Runtime.CONTAINERD),
        ("Containerd ", Runtime.CONTAINERD),
        ("cri-o", Runtime.CRI_O),
        ("CRI-O", Runtime.CRI_O),
        ("crio", Runtime.CRI_O),
        ("docker", None),
    ],
)
def test_runtime_kind(name: str, kind: Runtime | None) -> None:
    assert runtime_kind(name) is kind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("v2.1.4", NRIVersion(2, 1, 4)),
        ("1.7.27", NRIVersion(1, 7, 27)),
        ("2.2.0-rc.1", NRIVersion(2, 2, 0, "rc.1")),
        ("1.7.24~ds1-1", NRIVersion(1, 7, 24)),
        ("2.0", NRIVersion(2, 0, 0)),
        ("nope", None),
        ("", None),
    ],
)
def test_parse_runtime_version(text: str, expected: NRIVersion | None) -> None:
    assert parse_runtime_version(text) == expected
