"""Interrupt affinities in a synthetic procfs: parsing, only differences written, refused
writes logged, originals restored, denied claims rejected."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import structlog

from nri_resmgr.control.irq import IrqFiles, parse_interrupts, write_synthetic_proc
from nri_resmgr.model import ConfigError
from nri_resmgr.policy.irq_affinity import Interrupt, IrqBalloon, IrqMode, IrqUse
from nri_resmgr.topology.cpuset import IDSet

IRQS = {
    4: "IO-APIC   4-edge      ttyS0",
    8: "IO-APIC   8-edge      rtc0",
    9: "IO-APIC   9-fasteoi   acpi",
}
ALL = IDSet.parse("0-15")

REAL = """\
           CPU0       CPU1
  0:         44          0   IO-APIC   2-edge      timer
  8:          0          1   IO-APIC   8-edge      rtc0
 24:     123456         10   PCI-MSI 524288-edge      nvme0q0
NMI:          0          0   Non-maskable interrupts
LOC:     123123     456456   Local timer interrupts
ERR:          0
"""


def test_parse_interrupts_keeps_numbered_lines_with_their_description() -> None:
    assert parse_interrupts(REAL) == (
        Interrupt(0, "IO-APIC 2-edge timer"),
        Interrupt(8, "IO-APIC 8-edge rtc0"),
        Interrupt(24, "PCI-MSI 524288-edge nvme0q0"),
    )


def test_synthetic_tree_reads_back(tmp_path: Path) -> None:
    proc = write_synthetic_proc(tmp_path / "proc", IRQS, cpus=16, affinity={9: "3"})
    files = IrqFiles(proc)
    assert [i.description for i in files.interrupts()] == [
        "IO-APIC 4-edge ttyS0",
        "IO-APIC 8-edge rtc0",
        "IO-APIC 9-fasteoi acpi",
    ]
    assert files.originals(files.interrupts()) == {4: ALL, 8: ALL, 9: IDSet.parse("3")}
    assert files.current() == {4: ALL, 8: ALL, 9: IDSet.parse("3")}


def affinity(proc: Path, number: int) -> str:
    return (proc / "irq" / str(number) / "smp_affinity_list").read_text().strip()


def claim(cpus: str, *patterns: str) -> IrqUse:
    return IrqUse(
        allowed=ALL,
        balloons=(IrqBalloon("c[0]", IDSet.parse(cpus), claims=patterns),),
        configured=True,
    )


class Recorder:
    """Records writes, refusing those to interrupts in `refuse` with `err`."""

    def __init__(self, refuse: set[int] | None = None, err: int = errno.EIO) -> None:
        self.writes: list[tuple[str, str]] = []
        self.refuse = refuse or set()
        self.err = err

    def __call__(self, path: Path, text: str) -> None:
        number = int(path.parent.name)
        self.writes.append((path.parent.name, text))
        if number in self.refuse:
            raise OSError(self.err, "refused", str(path))
        path.write_text(text)


def test_only_differences_are_written_and_originals_come_back(tmp_path: Path) -> None:
    proc = write_synthetic_proc(tmp_path / "proc", IRQS, cpus=16, affinity={9: "3"})
    rec = Recorder()
    files = IrqFiles(proc, write=rec)
    assert files.apply(claim("2-3", "*rtc0*")) == {8: IDSet.parse("2-3")}
    assert affinity(proc, 8) == "2-3" and affinity(proc, 4) == "0-15" and affinity(proc, 9) == "3"
    assert files.apply(claim("2-3", "*rtc0*")) == {}  # nothing changed: nothing written
    files.apply(claim("6-7", "*rtc0*", "4"))
    assert (affinity(proc, 4), affinity(proc, 8)) == ("6-7", "6-7")
    # the claimer goes: its interrupts get their originals back
    files.apply(IrqUse(allowed=ALL, configured=True))
    assert (affinity(proc, 4), affinity(proc, 8)) == ("0-15", "0-15")
    assert rec.writes == [("8", "2-3"), ("4", "6-7"), ("8", "6-7"), ("4", "0-15"), ("8", "0-15")]


def test_restore_puts_back_what_was_written(tmp_path: Path) -> None:
    proc = write_synthetic_proc(tmp_path / "proc", IRQS, cpus=16, affinity={8: "1"})
    files = IrqFiles(proc)
    files.apply(
        IrqUse(
            allowed=ALL,
            balloons=(IrqBalloon("s[0]", IDSet.parse("4-5"), mode=IrqMode.SINK),),
            configured=True,
        )
    )
    assert {affinity(proc, n) for n in IRQS} == {"4-5"}
    assert files.restore() == {4: ALL, 8: IDSet.parse("1"), 9: ALL}
    assert (affinity(proc, 4), affinity(proc, 8), affinity(proc, 9)) == ("0-15", "1", "0-15")
    assert files.restore() == {}


def test_nothing_is_read_without_interrupt_wishes(tmp_path: Path) -> None:
    files = IrqFiles(tmp_path / "no-proc-here")
    assert files.apply(IrqUse(allowed=ALL)) == {}  # no wishes configured: no IO at all


def test_a_refused_write_is_logged_naming_the_irq_and_not_retried(tmp_path: Path) -> None:
    proc = write_synthetic_proc(tmp_path / "proc", IRQS, cpus=16)
    rec = Recorder(refuse={8})
    with structlog.testing.capture_logs() as logs:
        files = IrqFiles(proc, write=rec, log=structlog.get_logger())
        assert files.apply(claim("2-3", "*rtc0*", "*ttyS0*")) == {4: IDSet.parse("2-3")}
    refused = [e for e in logs if e["event"] == "irq affinity not set"]
    assert refused and refused[0]["irq"] == 8 and refused[0]["description"] == "IO-APIC 8-edge rtc0"
    assert refused[0]["retried"] is False
    files.apply(claim("6-7", "*rtc0*", "*ttyS0*"))
    assert rec.writes == [("4", "2-3"), ("8", "2-3"), ("4", "6-7")]  # 8 not tried again
    assert affinity(proc, 8) == "0-15"


def test_another_write_error_is_retried_at_the_next_change(tmp_path: Path) -> None:
    proc = write_synthetic_proc(tmp_path / "proc", IRQS, cpus=16)
    rec = Recorder(refuse={8}, err=errno.EINVAL)
    files = IrqFiles(proc, write=rec, log=structlog.get_logger())
    files.apply(claim("2-3", "*rtc0*"))
    rec.refuse = set()
    files.apply(claim("2-3", "*rtc0*"))
    assert rec.writes == [("8", "2-3"), ("8", "2-3")]
    assert affinity(proc, 8) == "2-3"


def test_a_claim_on_a_denied_interrupt_is_a_config_error(tmp_path: Path) -> None:
    proc = write_synthetic_proc(tmp_path / "proc", IRQS, cpus=16)
    files = IrqFiles(proc)
    claims = (("balloonTypes[claimer].irqClaim", ("*ttyS0*", "*rtc0*")),)
    files.check_claims(IrqUse(allowed=ALL, claims=claims))
    files.check_claims(IrqUse(allowed=ALL, controllable=("*",), claims=claims))
    with pytest.raises(ConfigError, match=r"denied interrupt.*") as exc:
        files.check_claims(IrqUse(allowed=ALL, controllable=("*rtc0*",), claims=claims))
    assert "claim '*ttyS0*' matches irq 4 (IO-APIC 4-edge ttyS0)" in str(exc.value)
    assert "rtc0*' matches" not in str(exc.value)
