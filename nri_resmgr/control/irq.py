"""Interrupt affinities in procfs: what the balloons policy's interrupt wishes become.

Theory of operation: `IrqFiles` reads ``interrupts`` and ``irq/N/smp_affinity_list`` under
a procfs mount point (``/proc``, or a synthetic tree, `write_synthetic_proc`) and writes
the affinities `nri_resmgr.policy.irq_affinity.plan_affinities` wants:

- the interrupts (`parse_interrupts`) are read once, when first needed: interrupts are
  not expected to come and go while the daemon runs;
- an interrupt's *original* affinity is read before anything is written to it, and what
  was written since is remembered, so only differences are written: a file is written
  when the plan changes it, and not again while it stays;
- with no interrupt wishes configured, nothing is read at all (until something was
  written, which then goes back to its original); `restore` puts back every original
  (the daemon stops);
- a write the kernel refuses is logged naming the interrupt, never raised: EIO (an
  interrupt the kernel manages itself), EPERM, EACCES and EROFS mark the interrupt
  read-only and it is not tried again; any other error is retried at the next change;
- `check_claims` rejects a configuration whose claim names an interrupt
  ``controllableInterrupts`` denies (`irq_affinity.denied_claims`), as nri-plugins does.

One instance lives as long as the daemon, across reconfigurations, so the originals it
read stay the originals.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from nri_resmgr.model import ConfigError, ResmgrError
from nri_resmgr.ops.logs import get_logger
from nri_resmgr.policy.irq_affinity import Interrupt, IrqUse, denied_claims, plan_affinities
from nri_resmgr.topology.cpuset import CPUSet, IDSet, IDSetError

__all__ = ["IrqFiles", "parse_interrupts", "write_synthetic_proc"]

#: write errors after which an interrupt's affinity is not tried again
READ_ONLY_ERRNOS = frozenset({errno.EIO, errno.EPERM, errno.EACCES, errno.EROFS})


def parse_interrupts(text: str) -> tuple[Interrupt, ...]:
    """The numbered interrupts of a ``/proc/interrupts`` text, by number.

    A line is ``N:``, one counter per CPU, then the chip, hardware IRQ and device names;
    the description is those names joined by single spaces.  Lines of named interrupts
    (``NMI:``, ``LOC:``, ...) and the CPU header are skipped.
    """
    out: dict[int, Interrupt] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2 or not fields[0].endswith(":"):
            continue
        head = fields[0][:-1]
        if not head.isdecimal():
            continue
        rest = fields[1:]
        start = next((i for i, f in enumerate(rest) if not f.isdecimal()), len(rest))
        out[int(head)] = Interrupt(int(head), " ".join(rest[start:]))
    return tuple(out[n] for n in sorted(out))


def _write_text(path: Path, text: str) -> None:
    path.write_text(text)


class IrqFiles:
    """Interrupt affinities under a procfs mount point (module docstring)."""

    def __init__(
        self,
        proc: str | Path,
        *,
        write: Callable[[Path, str], None] = _write_text,
        log: Any = None,
    ) -> None:
        #: the procfs mount point (``/proc`` on a host)
        self.proc = Path(proc)
        self._write = write
        if log is None:
            log = get_logger("irq")
        self.log = log
        self._irqs: tuple[Interrupt, ...] | None = None
        #: affinities as found before anything was written (None: unreadable)
        self._originals: dict[int, CPUSet | None] = {}
        #: affinities written since, as the files hold them now
        self._written: dict[int, CPUSet] = {}
        self._read_only: set[int] = set()

    def affinity_path(self, number: int) -> Path:
        return self.proc / "irq" / str(number) / "smp_affinity_list"

    def interrupts(self) -> tuple[Interrupt, ...]:
        """The machine's numbered interrupts (read once); OSError if unreadable."""
        if self._irqs is None:
            self._irqs = parse_interrupts((self.proc / "interrupts").read_text())
        return self._irqs

    def _original(self, number: int) -> CPUSet | None:
        if number not in self._originals:
            path = self.affinity_path(number)
            try:
                self._originals[number] = IDSet.parse(path.read_text().strip())
            except (OSError, IDSetError) as exc:
                self.log.warning(
                    "irq affinity not read", irq=number, path=str(path), error=str(exc)
                )
                self._originals[number] = None
        return self._originals[number]

    def originals(self, irqs: Iterable[Interrupt]) -> dict[int, CPUSet]:
        """The original affinities of `irqs` that could be read."""
        out: dict[int, CPUSet] = {}
        for irq in irqs:
            got = self._original(irq.number)
            if got is not None:
                out[irq.number] = got
        return out

    def check_claims(
        self,
        use: IrqUse,
        *,
        subject: str = "policy balloons",
        error: type[ResmgrError] = ConfigError,
    ) -> None:
        """`error` (a ConfigError for a configuration's claims, an AnnotationError for a
        container's) when a claim of `use` names an interrupt it denies."""
        if not use.controllable or not any(patterns for _, patterns in use.claims):
            return
        try:
            irqs = self.interrupts()
        except OSError as exc:
            raise error(
                f"controllableInterrupts: claims cannot be checked: {self.proc / 'interrupts'} "
                f"is unreadable: {exc}"
            ) from exc
        problems = denied_claims(use, irqs)
        if problems:
            raise error(f"{subject}: " + "; ".join(problems))

    def current(self) -> dict[int, CPUSet]:
        """Every interrupt's affinity as its file holds it now (unreadable ones left out)."""
        out: dict[int, CPUSet] = {}
        for irq in self.interrupts():
            try:
                out[irq.number] = IDSet.parse(self.affinity_path(irq.number).read_text().strip())
            except (OSError, IDSetError):
                continue
        return out

    def apply(self, use: IrqUse) -> dict[int, CPUSet]:
        """Write the affinities `use` plans that differ from the files; what was written."""
        if not use.configured and not self._written:
            return {}
        try:
            irqs = self.interrupts()
        except OSError as exc:
            self.log.warning(
                "interrupts not read", path=str(self.proc / "interrupts"), error=str(exc)
            )
            return {}
        wanted = plan_affinities(use, irqs, self.originals(use.controlled(irqs)))
        return self._write_all(wanted, irqs)

    def restore(self) -> dict[int, CPUSet]:
        """Put back the original affinity of every interrupt written to; what was written."""
        back = {n: self._originals[n] for n in self._written}
        return self._write_all({n: c for n, c in back.items() if c is not None}, self._irqs or ())

    def _write_all(
        self, wanted: Mapping[int, CPUSet], irqs: Iterable[Interrupt]
    ) -> dict[int, CPUSet]:
        names = {i.number: i.description for i in irqs}
        done: dict[int, CPUSet] = {}
        for number in sorted(wanted):
            cpus = wanted[number]
            original = self._originals.get(number)
            now = self._written.get(number, original)
            if cpus == now or number in self._read_only or not cpus:
                continue
            try:
                self._write(self.affinity_path(number), str(cpus))
            except OSError as exc:
                read_only = exc.errno in READ_ONLY_ERRNOS
                if read_only:
                    self._read_only.add(number)
                self.log.warning(
                    "irq affinity not set",
                    irq=number,
                    description=names.get(number, ""),
                    cpus=str(cpus),
                    error=str(exc),
                    retried=not read_only,
                )
                continue
            if cpus == original:
                self._written.pop(number, None)
            else:
                self._written[number] = cpus
            done[number] = cpus
            self.log.info(
                "irq affinity set", irq=number, description=names.get(number, ""), cpus=str(cpus)
            )
        return done


def write_synthetic_proc(
    proc: str | Path,
    irqs: Mapping[int, str],
    *,
    cpus: int,
    affinity: str | Mapping[int, str] = "",
) -> Path:
    """A procfs tree under `proc` with the interrupts `irqs` (number -> the chip and
    device names, as ``/proc/interrupts`` shows them after the counters), one zero counter
    per CPU of `cpus`, and each interrupt's ``smp_affinity_list`` (`affinity`: one list for
    all, or per interrupt; default every CPU).  Returns `proc`."""
    root = Path(proc)
    root.mkdir(parents=True, exist_ok=True)
    header = " " * 4 + "".join(f"{'CPU' + str(c):>11}" for c in range(cpus))
    lines = [header]
    for number in sorted(irqs):
        counters = "".join(f"{0:>11}" for _ in range(cpus))
        lines.append(f"{number:>3}:{counters}   {irqs[number]}")
    lines.append("NMI:" + "".join(f"{0:>11}" for _ in range(cpus)) + "   Non-maskable interrupts")
    (root / "interrupts").write_text("\n".join(lines) + "\n")
    every = f"0-{cpus - 1}" if cpus > 1 else "0"
    for number in irqs:
        mine = affinity.get(number, every) if isinstance(affinity, Mapping) else affinity or every
        d = root / "irq" / str(number)
        d.mkdir(parents=True, exist_ok=True)
        (d / "smp_affinity_list").write_text(mine + "\n")
    return root
