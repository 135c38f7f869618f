"""A topology record (`topology.record`) reads back the topology it was written from."""

from __future__ import annotations

import json

import pytest

from nri_resmgr.topology.load import load_topology
from nri_resmgr.topology.record import RecordError, from_record, to_record
from tests.support.requirements import require_topologies


@pytest.mark.parametrize(
    "source",
    [
        "two-socket",
        "hbm-server",
        "hybrid-desktop",
        "packages=1,cores=4,threads=2,offline=3,isolated=5-6",
        "packages=2,nodes=2,cores=3,threads=2,numbering=qemu",
    ],
)
def test_record_round_trip(source: str) -> None:
    topo = load_topology(source)
    again = load_topology(json.loads(json.dumps(to_record(topo))))
    assert again == topo
    assert again.source == topo.source
    assert [again.node(n).cpus for n in again.nodes] == [topo.node(n).cpus for n in topo.nodes]


def test_record_of_real_machines() -> None:
    root = require_topologies()
    archives = sorted(root.glob("*.tar*"))[:3]
    assert archives, f"{root}: expected machine snapshots"
    for path in archives:
        topo = load_topology(path)
        assert from_record(to_record(topo)) == topo, path.name


@pytest.mark.parametrize(
    ("change", "found"),
    [
        (lambda r: r.pop("nodes"), "nodes"),
        (lambda r: r["cpu_records"][0].__setitem__(3, 99), "node 99"),
        (lambda r: r["cpu_records"][0].__setitem__(0, -1), "expected ids"),
        (lambda r: r.__setitem__("extra", 1), "extra"),
    ],
    ids=["no-nodes", "unknown-node", "negative-id", "unknown-key"],
)
def test_bad_record_names_what_is_wrong(change: object, found: str) -> None:
    rec = json.loads(json.dumps(to_record(load_topology("two-socket"))))
    change(rec)  # type: ignore[operator]
    with pytest.raises(RecordError, match="topology record") as err:
        from_record(rec)
    assert found in str(err.value)
