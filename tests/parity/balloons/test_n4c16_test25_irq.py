"""n4c16/test25-irq: ``irqClaim`` and ``irqMode`` (sink, isolate) steer interrupt
affinities; a claim on an interrupt ``controllableInterrupts`` denies is refused.

Their VM's ``/proc`` is a synthetic procfs here, with the interrupts their script looks
up (ttyS0, rtc0 and acpi, numbered as on a qemu PC) and a few others; as their
``cleanup`` does, every affinity starts as all 16 CPUs before each configuration is
launched.  Each ``verify-irq-cpus`` reads the ``smp_affinity_list`` files after the
step, as theirs reads the VM's.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from nri_resmgr.control.irq import write_synthetic_proc
from nri_resmgr.model import ConfigError
from nri_resmgr.topology.cpuset import IDSet
from tests.parity.balloons._sim import BALLOON, Run, Script, config, simulate
from tests.parity.ports import port

TTYS0, RTC0, ACPI = 4, 8, 9
IRQS = {
    0: "IO-APIC   2-edge      timer",
    1: "IO-APIC   1-edge      i8042",
    TTYS0: "IO-APIC   4-edge      ttyS0",
    RTC0: "IO-APIC   8-edge      rtc0",
    ACPI: "IO-APIC   9-fasteoi   acpi",
    24: "PCI-MSI 49152-edge      virtio0-config",
}
ALL_CPUS = IDSet.parse("0-15")

HEAD = """
reservedResources:
  cpu: 1000m
pinCPU: true
pinMemory: true
"""
CLAIM = config(
    HEAD
    + """
balloonTypes:
  - name: claimer
    minCPUs: 2
    maxCPUs: 2
    irqClaim:
      - "*ttyS0*"
      - "*rtc0*"
"""
)
ISOLATE = config(
    HEAD
    + """
balloonTypes:
  - name: isolate
    minCPUs: 2
    maxCPUs: 2
    irqMode: isolate
"""
)
SINK = config(
    HEAD
    + """
balloonTypes:
  - name: claimer
    minCPUs: 2
    maxCPUs: 2
    irqClaim:
      - "*ttyS0*"
      - "*rtc0*"
  - name: sink
    minCPUs: 2
    maxCPUs: 2
    irqMode: sink
"""
)
DEDICATED_CLAIM = config(
    HEAD
    + """
balloonTypes:
  - name: dedicated-claimer
    minCPUs: 2
    maxCPUs: 2
    irqClaim:
      - "ttyS" # should not match
      - "*rtc0*"
    irqMode: isolate
"""
)
DENIED_CLAIM = config(
    HEAD
    + """
controllableInterrupts: [ "*rtc0*" ]
balloonTypes:
  - name: claimer
    minCPUs: 2
    maxCPUs: 2
    irqClaim:
      - "*ttyS0*"
      - "*rtc0*"
"""
)


def launch(tmp_path: Path, script: Script, conf: dict[str, object]) -> Run:
    """helm-launch after their ``cleanup``: every interrupt on all 16 CPUs."""
    proc = write_synthetic_proc(tmp_path / "proc", IRQS, cpus=16, affinity="0-15")
    return simulate(script, conf, proc_root=str(proc))


def irq_cpus(run: Run, step: int, irq: int) -> IDSet:
    """Their ``irq-cpu-ids``: the interrupt's affinity after `step`."""
    return IDSet.parse(run.at(step).step.irqs[irq])


def test_irq_claim(tmp_path: Path) -> None:
    s = Script()
    pod0 = s.create(annotations={BALLOON: "claimer"})
    run = launch(tmp_path, s, CLAIM)
    claimer = run.at(pod0).cpus("pod0c0")
    assert len(claimer) == 2
    assert irq_cpus(run, pod0, TTYS0) == claimer
    assert irq_cpus(run, pod0, RTC0) == claimer
    assert irq_cpus(run, pod0, ACPI) == ALL_CPUS


def test_irq_mode_isolate(tmp_path: Path) -> None:
    s = Script(pods=1)
    pod1 = s.create(annotations={BALLOON: "isolate"})
    run = launch(tmp_path, s, ISOLATE)
    isolate = run.at(pod1).cpus("pod1c0")
    assert len(isolate) == 2
    assert irq_cpus(run, pod1, RTC0) == ALL_CPUS - isolate
    # not in their verify, but the same rule: every unclaimed interrupt leaves them
    assert irq_cpus(run, pod1, TTYS0) == ALL_CPUS - isolate


@port("balloons/n4c16/test25-irq")
def test_irq_mode_sink() -> None:
    """Their one ``verify`` (no expressions: it refreshes their sets) after the sink pod."""
    with tempfile.TemporaryDirectory(prefix="parity-irq-") as tmp:
        tmp_path = Path(tmp)
        s = Script(pods=2)
        pod2 = s.create(annotations={BALLOON: "sink"})
        pod3 = s.create(annotations={BALLOON: "claimer"})
        gone = s.delete("pod2")
        run = launch(tmp_path, s, SINK)
        run.verify(pod2)
        sink = run.at(pod2).cpus("pod2c0")
        for irq in (TTYS0, RTC0, ACPI):
            assert irq_cpus(run, pod2, irq) == sink

        p = run.at(pod3)
        sink, claimer = p.cpus("pod2c0"), p.cpus("pod3c0")
        assert sink.isdisjoint(claimer)
        assert irq_cpus(run, pod3, TTYS0) == claimer
        assert irq_cpus(run, pod3, RTC0) == claimer
        assert irq_cpus(run, pod3, ACPI) == sink

        # no sink present anymore
        assert irq_cpus(run, gone, TTYS0) == claimer
        assert irq_cpus(run, gone, RTC0) == claimer
        assert irq_cpus(run, gone, ACPI) == ALL_CPUS


def test_no_sink_no_claimer_leaves_affinities_alone(tmp_path: Path) -> None:
    """Their first verify with the sink configuration runs before any pod."""
    s = Script(pods=2)
    other = s.create(annotations={BALLOON: "default"})
    run = launch(tmp_path, s, SINK)
    assert irq_cpus(run, other, TTYS0) == ALL_CPUS


def test_dedicated_claim(tmp_path: Path) -> None:
    s = Script(pods=4)
    pod4 = s.create(annotations={BALLOON: "dedicated-claimer"})
    run = launch(tmp_path, s, DEDICATED_CLAIM)
    claimer = run.at(pod4).cpus("pod4c0")
    assert len(claimer) == 2
    assert irq_cpus(run, pod4, RTC0) == claimer
    assert irq_cpus(run, pod4, TTYS0) == ALL_CPUS - claimer  # "ttyS" matches nothing
    assert irq_cpus(run, pod4, ACPI) == ALL_CPUS - claimer


def test_denied_irq_claim(tmp_path: Path) -> None:
    s = Script(pods=5)
    s.create(annotations={BALLOON: "claimer"})
    with pytest.raises(ConfigError) as exc:
        launch(tmp_path, s, DENIED_CLAIM)
    # theirs: "denied interrupt: irq N (...) denied but matched by user pattern ..."
    message = str(exc.value)
    assert "denied interrupt" in message
    assert "claim '*ttyS0*' matches irq 4 (IO-APIC 4-edge ttyS0)" in message
    assert "'*rtc0*' matches" not in message
