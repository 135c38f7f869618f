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

from rich.console import Console
from rich.table import Table
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


def _containers(view: NodeView) -> Table:
    table = Table(title="containers", title_justify="left")
    for col in (
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
    ):
        table.add_column(col, overflow="fold")
    for i, c in enumerate(view.containers, 1):
        table.add_row(
            str(i),
            Text(shown(c.key)),
            c.qos,
            c.kind or "-",
            Text(shown(c.pool) or "-"),
            c.cpus or "-",
            c.mems or "-",
            Text(shown(c.rdt_class) or "-"),
            Text(shown(c.blockio_class) or "-"),
            Text("\n".join(f"{shown(k)}={shown(v)}" for k, v in c.annotations) or "-"),
        )
    return table


def _memory(view: NodeView, containers: dict[str, int]) -> Table:
    table = Table(title="memory", title_justify="left")
    for col in ("node", "kind", "size", "near cpu node", "pinned containers (#)"):
        table.add_column(col, overflow="fold")
    for m in view.memory:
        pinned = ",".join(str(containers[c]) for c in m.pinned if c in containers)
        table.add_row(
            str(m.node), m.kind, format_bytes(m.memory_bytes), str(m.attached_to), pinned or "-"
        )
    return table


def _balloons(view: NodeView, containers: dict[str, int]) -> Table:
    table = Table(title="balloons", title_justify="left")
    for col in ("#", "balloon", "type", "cpus", "shared idle", "mems", "containers (#)"):
        table.add_column(col, overflow="fold")
    for i, b in enumerate(view.balloons, 1):
        members = ",".join(str(containers[c]) for c in b.containers if c in containers)
        table.add_row(
            str(i),
            Text(shown(b.name)),
            Text(shown(b.type)),
            b.cpus or "-",
            b.shared_idle_cpus or "-",
            b.mems or "-",
            members or "-",
        )
    return table


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
    console.print(_containers(view))
    console.print(_memory(view, containers))
    if view.balloons:
        console.print(_balloons(view, containers))
    return out.getvalue()
