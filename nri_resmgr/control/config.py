"""The `control:` section of the configuration, in one model.

Theory of operation: `control.rdt` and `control.blockio` each hold the class *selection*
settings (`enable`, `usePodQoSAsDefaultClass`, `defaultClass`, see `classes`) next to the
class *definitions* (`partitions`/`options`/`monitorPods` for RDT, `classes` for block
I/O).  `RdtConfig` and `BlockIOConfig` extend `ClassSelection`, so a `ControlConfig` is a
`ClassConfig` and goes straight to `select_classes`, while its parts go to
`RdtController` and `BlockIOController`.  `control.cpu` holds CPU class definitions
(`nri_resmgr.policy.cpu_classes.CPUControlConfig`, nri-plugins' older place for them),
the base that a policy's own ``cpuClasses`` override.  ``control.memoryPolicy`` and
``control.memoryQos`` hold nri-plugins' memory-policy and memory-qos plugin
configurations (`mempolicy`, `memqos`); a section left out is a component switched off.
``control.sgxEpc.enable`` switches on their sgx-epc plugin's annotation (`sgxepc`).

Every model here comes from a configuration module (`blockio_config`, `memory_config`,
`resctrl.config`, `policy.cpu_classes`), never from a controller's: validating a
configuration loads no controller, and `wiring` loads one only when its section is on.
"""

from __future__ import annotations

from pydantic import Field

from nri_resmgr.control.blockio_config import BlockIOConfig
from nri_resmgr.control.classes import ClassConfig
from nri_resmgr.control.memory_config import MemoryPolicyConfig, MemoryQoSConfig, SgxEpcConfig
from nri_resmgr.control.resctrl.config import RdtConfig
from nri_resmgr.policy.cpu_classes import CPUControlConfig


class ControlConfig(ClassConfig):
    """`control: {rdt: RdtConfig, blockio: BlockIOConfig, cpu: CPUControlConfig,
    memoryPolicy: MemoryPolicyConfig, memoryQos: MemoryQoSConfig, sgxEpc: SgxEpcConfig}`."""

    rdt: RdtConfig = Field(default_factory=RdtConfig)
    blockio: BlockIOConfig = Field(default_factory=BlockIOConfig)
    cpu: CPUControlConfig = Field(default_factory=CPUControlConfig)
    memory_policy: MemoryPolicyConfig | None = None
    memory_qos: MemoryQoSConfig | None = None
    sgx_epc: SgxEpcConfig = Field(default_factory=SgxEpcConfig)
