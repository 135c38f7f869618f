"""nri-plugins' topology-aware e2e suite on s8c4k, ported to the simulator.

Source: containers/nri-plugins test/e2e/policies.test-suite/topology-aware/s8c4k/.
The machine: 8 packages x 512 single-thread cores (4,096 possible CPUs); their test boots
with 3 CPUs and hot-plugs cpus 511, 1535 and 4095, so cpus 0-2,511 (package0), 1535
(package2) and 4095 (package7) are present.  Their config: colocatePods true.
"""

from __future__ import annotations

from tests.parity.machines import S8C4K, helm_config
from tests.parity.ports import port
from tests.parity.suite import Suite


@port("topology-aware/s8c4k/test01-sparse-4kcpus")
def test01_sparse_4kcpus() -> None:
    """s8c4k/test01-sparse-4kcpus: sparse CPU ids up to 4095 are all used and released.

    Their first check runs when ``cpus["pod0c0"]`` shows cpu4095 (else they look for a
    runc bug and skip); it must show it here, so that is asserted first.
    """
    s = Suite(S8C4K, helm_config(colocatePods=True))
    s.create("guaranteed", CPU="5000m")
    assert "cpu4095" in s.allowed().cpus["pod0c0"]
    s.verify('len(cpus["pod0c0"]) == 5')
    s.delete("pod0")
    s.create("burstable", CPUREQ="3100m", CPULIM="4000m")
    s.verify('len(packages["pod1c0"]) == 1 and len(cpus["pod1c0"]) == 4')
    s.create("burstable", CPUREQ="900m", CPULIM="1")
    s.verify('cpus["pod2c0"] == {"cpu4095"}')
    s.create("besteffort")
    s.delete("pod1", "pod2", "pod3")
    s.create("guaranteed", CPU="5000m")
    s.verify('len(cpus["pod4c0"]) == 5')
