"""The picture of the node in a terminal, with `rich`.

Theory of operation: `render_text(view)` returns the text `nri-resmgr show` prints: the
hardware tree (package, die, NUMA node, L3 group) with every core's threads as cells
``<cpu> <tag>``, where the tag says what holds the CPU (``res`` reserved, ``shr``
shared, ``idl`` idle, ``off`` offline, ``c<N>`` the container numbered N in the
containers table, ``b<N>`` balloon N; a ``*`` marks a kernel-isolated CPU); then the
containers (CPUs, memory nodes, RDT and block I/O class), each NUMA node's memory with
its pinned containers, and the balloons.  With `color` the cells are coloured by holder
(ANSI codes); without, the text is plain.  Every name goes through `text.shown` and into
`rich.text.Text` values, never into markup, so a pod name can neither style the output
nor reach the terminal as an escape sequence.  Pure: the text is made in memory.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from nri_resmgr.topology.render import format_bytes
from nri_resmgr.view.model import CPUCell, Holder, NodeView, cell_tag
from nri_resmgr.view.text import shown

__all__ = ["render_text"]

_PALETTE = ("cyan", "magenta", "blue", "bright_green", "bright_magenta", "bright_cyan")
_STYLE = {
    Holder.RESERVED: "bold yellow",
    Holder.SHARED: "green",
    Holder.IDLE: "dim",
    Holder.OFFLINE: "dim red",
}


def _numbers(view: NodeView) -> tuple[dict[str, int], dict[str, int]]:
    """Container id -> its row number, balloon name -> its number (both from 1)."""
    return (
        {c.id: i for i, c in enumerate(view.containers, 1)},
        {b.name: i for i, b in enumerate(view.balloons, 1)},
    )


def _style(cell: CPUCell, containers: dict[str, int], balloons: dict[str, int]) -> str:
    if cell.holder in (Holder.EXCLUSIVE, Holder.ISOLATED):
        return "bold " + _PALETTE[containers.get(cell.owner, 0) % len(_PALETTE)]
    if cell.holder is Holder.BALLOON:
        return _PALETTE[balloons.get(cell.owner, 0) % len(_PALETTE)]
    return _STYLE[cell.holder]


def _tree(view: NodeView, containers: dict[str, int], balloons: dict[str, int]) -> Tree:
    head = Text(f"{shown(view.machine)}  policy {shown(view.policy)}", style="bold")
    if view.title:
        head.append(f"  {shown(view.title)}")
    root = Tree(head)
    memory = {m.node: m for m in view.memory}
    for pkg, dies in view.packages:
        p = root.add(f"package {pkg}")
        for die, nodes in dies:
            d = p.add(f"die {die}")
            for node, l3s in nodes:
                m = memory.get(node)
                size = f"  {format_bytes(m.memory_bytes)} {m.kind}" if m is not None else ""
                n = d.add(f"node {node}{size}")
                for l3, cores in l3s:
                    line = Text(f"L3 {l3}: ")
                    for i, threads in enumerate(cores):
                        if i:
                            line.append(" | ", style="dim")
                        for j, cpu in enumerate(threads):
                            cell = view.cpus[cpu]
                            tag = cell_tag(cell, containers, balloons)
                            line.append(
                                ("," if j else "") + f"{cpu}:{tag}",
                                style=_style(cell, containers, balloons),
                            )
                    n.add(line)
    return root


def _grid(
    title: str, header: Sequence[str], rows: Sequence[Sequence[str]], styles: Sequence[str] = ()
) -> Text:
    """A plain table: a title, a header and rows in aligned columns (terminal cells).

    Made as one `Text`, not a `rich.table.Table`: a table's layout measures every cell
    again and again (5 s for 1,000 containers); this is one pass.  `styles` colours the
    first column of each row.
    """
    widths = [cell_len(h) for h in header]
    for row in rows:
        widths = [max(w, cell_len(c)) for w, c in zip(widths, row, strict=True)]
    out = Text(title + "\n", style="bold")

    def line(cells: Sequence[str], first: str = "", rest: str = "") -> None:
        for i, (cell, width) in enumerate(zip(cells, widths, strict=True)):
            pad = " " * (width - cell_len(cell)) if i < len(cells) - 1 else ""
            out.append(("  " if i else "") + cell + pad, style=first if i == 0 else rest)
        out.append("\n")

    line(header, "bold", "bold")
    for i, row in enumerate(rows):
        line(row, styles[i] if i < len(styles) else "")
    return out


def _containers(view: NodeView) -> Text:
    rows = [
        (
            str(i),
            shown(c.key),
            c.qos,
            c.kind or "-",
            shown(c.pool) or "-",
            c.cpus or "-",
            c.mems or "-",
            shown(c.rdt_class) or "-",
            shown(c.blockio_class) or "-",
            "; ".join(f"{shown(k)}={shown(v)}" for k, v in c.annotations) or "-",
        )
        for i, c in enumerate(view.containers, 1)
    ]
    header = (
        "#",
        "namespace/pod/container",
        "qos",
        "kind",
        "pool",
        "cpus",
        "mems",
        "rdt",
        "blockio",
        "annotations",
    )
    styles = [_PALETTE[i % len(_PALETTE)] for i in range(1, len(rows) + 1)]
    return _grid("containers", header, rows, styles)


def _memory(view: NodeView, containers: dict[str, int]) -> Text:
    rows = [
        (
            str(m.node),
            m.kind,
            format_bytes(m.memory_bytes),
            str(m.attached_to),
            ",".join(str(n) for n in sorted(containers[c] for c in m.pinned if c in containers))
            or "-",
        )
        for m in view.memory
    ]
    header = ("node", "kind", "size", "near cpu node", "pinned containers (#)")
    return _grid("memory", header, rows)


def _balloons(view: NodeView, containers: dict[str, int]) -> Text:
    rows = [
        (
            str(i),
            shown(b.name),
            shown(b.type),
            b.cpus or "-",
            b.shared_idle_cpus or "-",
            b.mems or "-",
            ",".join(str(n) for n in sorted(containers[c] for c in b.containers if c in containers))
            or "-",
        )
        for i, b in enumerate(view.balloons, 1)
    ]
    header = ("#", "balloon", "type", "cpus", "shared idle", "mems", "containers (#)")
    return _grid("balloons", header, rows)


def render_text(view: NodeView, *, color: bool = False, width: int = 120) -> str:
    """The picture as terminal text, ANSI-coloured when `color` (module docstring)."""
    out = io.StringIO()
    console = Console(
        file=out,
        width=width,
        force_terminal=color,
        color_system="standard" if color else None,
        no_color=not color,
        highlight=False,
        emoji=False,
        markup=False,
    )
    containers, balloons = _numbers(view)
    console.print(_tree(view, containers, balloons))
    legend = "tags: res reserved, shr shared, idl idle, off offline, cN container N, bN balloon N"
    console.print(Text(legend + ", * kernel-isolated", style="dim"))
    if view.conflicts:
        console.print(Text(f"CPUs held exclusively twice: {view.conflicts}", style="bold red"))
    for grid in (_containers(view), _memory(view, containers)) + (
        (_balloons(view, containers),) if view.balloons else ()
    ):
        console.print(grid, no_wrap=True, crop=False, end="")
    return out.getvalue()
