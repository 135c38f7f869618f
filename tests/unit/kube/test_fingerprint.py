"""The pods fingerprint: XXH64 against the spec's values, the fingerprint against the
pod sets k8stopologyawareschedwg/podfingerprint publishes with their signatures
(testdata/compat-*.txt and .sign: namespace and name of each pod, and the sign)."""

from __future__ import annotations

import random

import pytest

from nri_resmgr.kube.fingerprint import pods_fingerprint, xxh64


@pytest.mark.parametrize(
    ("data", "seed", "digest"),
    [
        pytest.param(b"", 0, 0xEF46DB3751D8E999, id="empty"),
        pytest.param(b"a", 0, 0xD24EC4F1A98C6E5B, id="one-byte"),
        pytest.param(b"abc", 0, 0x44BC2CF5AD770999, id="three-bytes"),
        pytest.param(
            b"Nobody inspects the spammish repetition", 0, 0xFBCEA83C8A378BF1, id="stripes"
        ),
    ],
)
def test_xxh64_spec_values(data: bytes, seed: int, digest: int) -> None:
    assert xxh64(data, seed) == digest


def _pods(text: str) -> list[tuple[str, str]]:
    return [(line.split()[0], line.split()[1]) for line in text.strip().splitlines()]


TINY = _pods("""
production jaeger-dpgjk
production nginx-rt684
production envoy-g9m22
""")
SMALL = _pods("""
analytics controller-69dkj
kube-public subscriber-tq6v7
kube-public transformer-hfbng
kube-public validator-c6pn5
kube-system proxy-wszrd
middleware processor-jkrl4
network gateway-vsll5
network importer-kzdfr
network importer-q5vt9
staging prometheus-bwgbn
""")
MEDIUM = _pods("""
development importer-kxqpk
development processor-424xv
development transformer-84vpn
development jaeger-6g6n9
development publisher-cq98w
development subscriber-24lpk
development collector-zvl28
development watcher-bj7b6
development transformer-mk7qw
development mongodb-b5pxs
development watcher-4qzlg
development publisher-ftpnk
development fluentd-fs9j8
development jaeger-flvh4
development manager-l6n55
development grafana-q7sdf
development prometheus-qds9v
development collector-b7fx4
development consumer-l94c8
development redis-k7rmn
""")


@pytest.mark.parametrize(
    ("pods", "sign"),
    [
        pytest.param(TINY, "pfp0v001607b76a0e9d3aeb4", id="tiny-3pods-1ns"),
        pytest.param(SMALL, "pfp0v001567144e4a561bb5a", id="small-10pods-3ns"),
        pytest.param(MEDIUM, "pfp0v00111a79869f24a9528", id="medium-20pods-1ns"),
    ],
)
def test_published_vectors_in_any_order(pods: list[tuple[str, str]], sign: str) -> None:
    assert pods_fingerprint(pods) == sign
    shuffled = list(pods)
    random.Random(12345).shuffle(shuffled)
    assert pods_fingerprint(shuffled) == sign


def test_namespace_and_name_are_not_interchangeable() -> None:
    assert pods_fingerprint([("a", "b")]) != pods_fingerprint([("b", "a")])
    assert pods_fingerprint([]) != pods_fingerprint([("a", "b")])
