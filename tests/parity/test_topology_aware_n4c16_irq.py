"""topology-aware/n4c16/test25-irq: the ``irq-affinity`` annotation claims interrupts for a
container's exclusive CPUs or masks them away; what is not allowed is refused.

Their VM's ``/proc`` is a synthetic procfs here (`control.irq.write_synthetic_proc`), with
the interrupts their script looks up (ttyS0, rtc0, numbered as on a qemu PC) and a few
others; as their ``cleanup`` does, every affinity starts as all 16 CPUs before each
launch.  Each of their ``verify-irq-cpus`` reads the ``smp_affinity_list`` files after
the step, as theirs reads the VM's; each ``wait-pod-waiting-reason ... CreateContainerError``
and its grep is the container's refusal here, its message checked.  Their script has no
``verify`` expression (their checks are all ``verify-irq-cpus`` and greps), so the port
evaluates none (`tests.parity.upstream`).  Their pods are ``CPU=2 CONTCOUNT=4 create
guaranteed``: four 2-CPU Guaranteed containers; with 750m reserved on 16 CPUs, c0 and c1
get exclusive CPUs and so do c2 and c3 (the annotations name c0 and c1 only).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from nri_resmgr.control.irq import write_synthetic_proc
from nri_resmgr.topology.cpuset import IDSet
from tests.parity.balloons._sim import Run, Script, simulate
from tests.parity.machines import N4C16, helm_config
from tests.parity.ports import port

IRQ_AFFINITY = "irq-affinity.resource-policy.nri.io"
TTYS0, RTC0 = 4, 8
IRQS = {
    0: "IO-APIC   2-edge      timer",
    1: "IO-APIC   1-edge      i8042",
    TTYS0: "IO-APIC   4-edge      ttyS0",
    RTC0: "IO-APIC   8-edge      rtc0",
    9: "IO-APIC   9-fasteoi   acpi",
    24: "PCI-MSI 49152-edge      virtio0-config",
}
ALL_CPUS = IDSet.parse("0-15")


def launch(tmp: Path, script: Script, **config: object) -> Run:
    """helm-launch topology-aware (their ``COLOCATE_PODS=false``) after their
    ``cleanup``: every interrupt on all 16 CPUs."""
    proc = write_synthetic_proc(tmp / "proc", IRQS, cpus=16, affinity="0-15")
    return simulate(
        script, helm_config(**config), topology=N4C16, policy="topology-aware", proc_root=str(proc)
    )


def irq_cpus(run: Run, step: int, irq: int) -> IDSet:
    """Their ``irq-cpu-ids``: the interrupt's affinity after `step`."""
    return IDSet.parse(run.at(step, errors=True).step.irqs[irq])


def guaranteed(s: Script, annotations: dict[str, str], *, cpu: str = "2", count: int = 4) -> int:
    """Their ``[ANN0=... ANN1=...] CPU=cpu CONTCOUNT=count create guaranteed``."""
    return s.create(
        contcount=count,
        cpureq=cpu,
        cpulim=cpu,
        memreq="100M",
        memlim="100M",
        annotations=annotations,
    )


def ann(pod: str, ctr: int, text: str) -> dict[str, str]:
    return {f"{IRQ_AFFINITY}/container.{pod}c{ctr}": text}


def refusal(run: Run, step: int, ctr: str) -> str:
    """Their ``kubectl get pods ... .state`` of a container in CreateContainerError."""
    errors = [e for e in run.result.steps[step].errors if ctr in e]
    assert len(errors) == 1, (ctr, run.result.steps[step].errors)
    return errors[0]


@port("topology-aware/n4c16/test25-irq")
def test25_irq_claims_and_masks() -> None:
    """pod0 (claims), pod1 (masks), pod2 (claim with mask-all, and a mask), each deleted
    and the affinities back to all CPUs; their ``verify-irq-cpus`` at each step."""
    with tempfile.TemporaryDirectory(prefix="parity-ta-irq-") as tmp:
        s = Script()
        pod0 = guaranteed(
            s, ann("pod0", 0, 'claim: [ "*ttyS0*" ]\n') | ann("pod0", 1, 'claim: [ "*rtc0*" ]\n')
        )
        gone0 = s.delete("pod0")
        pod1 = guaranteed(
            s, ann("pod1", 0, 'mask: [ "*ttyS0*" ]\n') | ann("pod1", 1, 'mask: [ "*rtc0*" ]\n')
        )
        gone1 = s.delete("pod1")
        pod2 = guaranteed(
            s,
            ann("pod2", 0, 'claim: [ "*ttyS0*" ]\nmask: [ "*" ]\n')
            | ann("pod2", 1, 'mask: [ "*rtc0*" ]\n'),
        )
        gone2 = s.delete("pod2")
        run = launch(Path(tmp), s)

    at0 = run.at(pod0)
    assert len(at0.cpus("pod0c0")) == 2 and len(at0.cpus("pod0c1")) == 2
    assert irq_cpus(run, pod0, TTYS0) == at0.cpus("pod0c0")
    assert irq_cpus(run, pod0, RTC0) == at0.cpus("pod0c1")
    assert irq_cpus(run, gone0, TTYS0) == ALL_CPUS
    assert irq_cpus(run, gone0, RTC0) == ALL_CPUS

    at1 = run.at(pod1)
    assert irq_cpus(run, pod1, TTYS0) == ALL_CPUS - at1.cpus("pod1c0")
    assert irq_cpus(run, pod1, RTC0) == ALL_CPUS - at1.cpus("pod1c1")
    assert irq_cpus(run, gone1, TTYS0) == ALL_CPUS
    assert irq_cpus(run, gone1, RTC0) == ALL_CPUS

    at2 = run.at(pod2)
    assert irq_cpus(run, pod2, TTYS0) == at2.cpus("pod2c0")
    assert irq_cpus(run, pod2, RTC0) == ALL_CPUS - at2.cpus("pod2c0") - at2.cpus("pod2c1")
    assert irq_cpus(run, gone2, TTYS0) == ALL_CPUS
    assert irq_cpus(run, gone2, RTC0) == ALL_CPUS


@port("topology-aware/n4c16/test25-irq")
def test25_irq_denials() -> None:
    """pods 3-7: refused as their CreateContainerError greps expect (worded as ours are:
    subject, expected, found), nothing moved; then, with ``controllableInterrupts:
    ["*rtc0*"]``, pod8's claim on ttyS0 is refused as a denied interrupt."""
    with tempfile.TemporaryDirectory(prefix="parity-ta-irq-") as tmp:
        s = Script(pods=3)
        claim = 'claim: [ "*ttyS0*" ]\n'
        pod3 = s.create(cpureq="", annotations=ann("pod3", 0, claim))  # besteffort
        pod4 = s.create(cpureq="1", cpulim="", annotations=ann("pod4", 0, claim))  # burstable
        pod5 = guaranteed(s, ann("pod5", 0, claim), cpu="250m", count=1)
        pod6 = guaranteed(s, ann("pod6", 0, "claim: xyzzy, foobar\n"), cpu="1", count=1)
        pod7 = guaranteed(
            s,
            ann("pod7", 0, 'claim: [ "*ttyS0*" ]\nmask: [ "*rtc0*" ]\nmode: xyzzy\n'),
            cpu="1",
            count=1,
        )
        run = launch(Path(tmp), s)
        s8 = Script(pods=8)
        pod8 = guaranteed(s8, ann("pod8", 0, claim), cpu="1", count=1)
        denied = launch(Path(tmp) / "denied", s8, controllableInterrupts=["*rtc0*"])

    assert "invalid IRQ affinity, QoS class BestEffort is not Guaranteed" in refusal(
        run, pod3, "pod3c0"
    )
    assert "invalid IRQ affinity, QoS class Burstable is not Guaranteed" in refusal(
        run, pod4, "pod4c0"
    )
    assert (
        "IRQ affinity (claim ['*ttyS0*'], mask [], mode mask-first) invalid without "
        "exclusive CPUs" in refusal(run, pod5, "pod5c0")
    )
    assert (
        "claim: expected a list of interrupt numbers or patterns; found 'xyzzy, foobar'"
        in refusal(run, pod6, "pod6c0")
    )
    assert "mode: expected one of mask-first, claim-first; found 'xyzzy'" in refusal(
        run, pod7, "pod7c0"
    )
    for step in (pod3, pod4, pod5, pod6, pod7):
        assert irq_cpus(run, step, TTYS0) == ALL_CPUS and irq_cpus(run, step, RTC0) == ALL_CPUS
    assert (
        "claim '*ttyS0*' matches irq 4 (IO-APIC 4-edge ttyS0), which controllableInterrupts "
        "['*rtc0*'] denies (denied interrupt)"
    ) in refusal(denied, pod8, "pod8c0")
    assert irq_cpus(denied, pod8, TTYS0) == ALL_CPUS
