"""The picture of the node as one self-contained HTML page.

Theory of operation: `render_page(views)` returns a whole document: inline CSS, no
external script, font or image, so it works offline and from a file.  Each view is a
``<section class="view">``: the hardware tree (package, die, NUMA node, L3 group), each
core a box of its threads, each thread a ``<span class="cpu">`` coloured by what holds it
(``data-holder``, ``data-owner``); then the containers table (one row per container,
``data-container`` its id, the CPUs in a ``td.cpus``), memory per NUMA node with its
pinned containers, and the balloons.  With several views (the simulator's steps) a
``<select id="step">`` and a few lines of inline script show one at a time; with
`refresh` (the daemon's page) a ``<meta http-equiv="refresh">`` reloads it.

Every name (pod, container, namespace, pool, balloon, class, title) goes through
`text.for_html`: markup is shown as text, quotes cannot close an attribute, and control
and invisible characters appear as escapes.  The page never puts a name inside the
script, and a Content-Security-Policy lets the page load nothing and run only that
script.  Pure: the page is a string.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence

from nri_resmgr.topology.render import format_bytes
from nri_resmgr.view.model import CPUCell, Holder, NodeView, cell_tag
from nri_resmgr.view.text import for_html

__all__ = ["render_page"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:1em;color:#222;background:#fafafa}
h1{font-size:1.05em;margin:.2em 0} h2{font-size:1em;margin:.8em 0 .3em}
.tree ul{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:.4em}
.tree li{border:1px solid #ccc;border-radius:4px;padding:.15em .4em;background:#fff}
.tree li.l3row{border:none;padding:0;background:none}
.l3{display:flex;flex-wrap:wrap;gap:3px;align-items:center}
.core{display:inline-flex;border:1px solid #999;border-radius:3px;padding:1px;gap:1px}
.cpu{display:inline-block;min-width:3.6em;padding:1px 3px;font:12px monospace;
 text-align:center;border-radius:2px}
.cpu[data-holder=reserved]{background:#f2d16b} .cpu[data-holder=shared]{background:#a8dba8}
.cpu[data-holder=idle]{background:#eee;color:#888} .cpu[data-holder=offline]{background:#ccc;
 color:#a00;text-decoration:line-through} .cpu.isol{outline:2px dashed #b00}
table{border-collapse:collapse;font-size:13px;margin-bottom:.5em}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#eee} .legend span{margin-right:.6em} .conflict{color:#b00;font-weight:bold}
.hidden{display:none}
"""

_PALETTE = (
    "#7fb3e6",
    "#e69adb",
    "#9ad0e6",
    "#c3a6f0",
    "#f0a6a6",
    "#8fe6c3",
    "#e6c38f",
    "#b3b3f0",
    "#f0c3e6",
    "#a6e6f0",
)

_SCRIPT = """
var sel=document.getElementById('step');
function pick(){var v=sel.value,s=document.querySelectorAll('section.view');
for(var i=0;i<s.length;i++){s[i].classList.toggle('hidden',s[i].dataset.step!==v);}}
sel.addEventListener('change',pick);pick();
"""


#: what the page may load and run: its own inline style and its one script, nothing else
#: (an injected script or a request to anywhere is refused even if escaping failed)
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; "
    f"script-src 'sha256-{base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()}'"
)


def _colour(
    view: NodeView, cell: CPUCell, numbers: dict[str, int], balloons: dict[str, int]
) -> str:
    if cell.holder in (Holder.EXCLUSIVE, Holder.ISOLATED):
        return f' style="background:{_PALETTE[numbers.get(cell.owner, 0) % len(_PALETTE)]}"'
    if cell.holder is Holder.BALLOON:
        return f' style="background:{_PALETTE[-1 - balloons.get(cell.owner, 0) % len(_PALETTE)]}"'
    return ""


def _cpu(view: NodeView, cpu: int, numbers: dict[str, int], balloons: dict[str, int]) -> str:
    cell = view.cpus[cpu]
    owner = cell.owner
    row = view.by_id.get(owner)
    who = row.key if row is not None else owner
    title = f"cpu {cpu}: {cell.holder}" + (f" {who}" if who else "")
    if cell.cpu_class:
        title += f", class {cell.cpu_class}"
    if cell.isolcpu:
        title += ", kernel-isolated"
    tag = cell_tag(cell, numbers, balloons)
    return (
        f'<span class="cpu{" isol" if cell.isolcpu else ""}" data-cpu="{cpu}" '
        f'data-holder="{cell.holder}" data-owner="{for_html(owner)}" title="{for_html(title)}"'
        f"{_colour(view, cell, numbers, balloons)}>{cpu} {for_html(tag)}</span>"
    )


def _annotations(notes: Sequence[tuple[str, str]]) -> str:
    return "<br>".join(f'<span class="note">{for_html(k)}={for_html(v)}</span>' for k, v in notes)


def _tree(view: NodeView, numbers: dict[str, int], balloons: dict[str, int]) -> list[str]:
    memory = {m.node: m for m in view.memory}
    out = ['<div class="tree"><ul>']
    for pkg, dies in view.packages:
        out.append(f"<li>package {pkg}<ul>")
        for die, nodes in dies:
            out.append(f"<li>die {die}<ul>")
            for node, l3s in nodes:
                m = memory.get(node)
                size = f" ({format_bytes(m.memory_bytes)} {for_html(m.kind)})" if m else ""
                out.append(f'<li data-node="{node}">NUMA node {node}{size}<ul>')
                for l3, cores in l3s:
                    cells = "".join(
                        '<span class="core">'
                        + "".join(_cpu(view, c, numbers, balloons) for c in threads)
                        + "</span>"
                        for threads in cores
                    )
                    out.append(f'<li class="l3row"><div class="l3">L3 {l3}: {cells}</div></li>')
                out.append("</ul></li>")
            out.append("</ul></li>")
        out.append("</ul></li>")
    out.append("</ul></div>")
    return out


def _table(head: Sequence[str], rows: Sequence[str], cls: str) -> str:
    th = "".join(f"<th>{h}</th>" for h in head)
    return (
        f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _section(view: NodeView, index: int, *, hidden: bool) -> str:
    numbers = {c.id: i for i, c in enumerate(view.containers, 1)}
    balloons = {b.name: i for i, b in enumerate(view.balloons, 1)}
    parts = [
        f'<section class="view{" hidden" if hidden else ""}" data-step="{index}">',
        f"<h1>{for_html(view.title or 'node')}: {for_html(view.machine)}, policy "
        f"{for_html(view.policy)}</h1>",
        '<p class="legend"><span class="cpu" data-holder="reserved">res</span>reserved '
        '<span class="cpu" data-holder="shared">shr</span>shared '
        '<span class="cpu" data-holder="idle">idl</span>idle '
        '<span class="cpu" data-holder="offline">off</span>offline; cN: exclusive to '
        "container N, bN: balloon N; dashed: kernel-isolated</p>",
    ]
    if view.conflicts:
        parts.append(f'<p class="conflict">CPUs held exclusively twice: {view.conflicts}</p>')
    parts += _tree(view, numbers, balloons)
    rows = [
        f'<tr data-container="{for_html(c.id)}"><td>{i}</td><td class="namespace">'
        f'{for_html(c.namespace)}</td><td class="pod">{for_html(c.pod)}</td>'
        f'<td class="name">{for_html(c.name)}</td><td>{for_html(c.qos)}</td>'
        f'<td class="kind">{for_html(c.kind)}</td><td class="pool">{for_html(c.pool)}</td>'
        f'<td class="cpus">{for_html(c.cpus)}</td><td class="mems">{for_html(c.mems)}</td>'
        f'<td class="rdt">{for_html(c.rdt_class)}</td>'
        f'<td class="blockio">{for_html(c.blockio_class)}</td>'
        f'<td class="annotations">{_annotations(c.annotations)}</td></tr>'
        for i, c in enumerate(view.containers, 1)
    ]
    parts.append("<h2>containers</h2>")
    parts.append(
        _table(
            (
                "#",
                "namespace",
                "pod",
                "container",
                "qos",
                "kind",
                "pool",
                "cpus",
                "mems",
                "rdt",
                "blockio",
                "annotations",
            ),
            rows,
            "containers",
        )
    )
    mem_rows = [
        f'<tr data-node="{m.node}"><td>{m.node}</td><td>{for_html(m.kind)}</td>'
        f"<td>{format_bytes(m.memory_bytes)}</td><td>{m.attached_to}</td><td>"
        + ", ".join(str(numbers[c]) for c in m.pinned if c in numbers)
        + "</td></tr>"
        for m in view.memory
    ]
    parts.append("<h2>memory</h2>")
    parts.append(
        _table(
            ("node", "kind", "size", "near CPU node", "pinned containers (#)"), mem_rows, "memory"
        )
    )
    if view.balloons:
        b_rows = [
            f'<tr data-balloon="{for_html(b.name)}"><td>{i}</td><td>{for_html(b.name)}</td>'
            f"<td>{for_html(b.type)}</td><td>{for_html(b.cpus)}</td>"
            f"<td>{for_html(b.shared_idle_cpus)}</td><td>{for_html(b.mems)}</td><td>"
            + ", ".join(str(numbers[c]) for c in b.containers if c in numbers)
            + "</td></tr>"
            for i, b in enumerate(view.balloons, 1)
        ]
        parts.append("<h2>balloons</h2>")
        parts.append(
            _table(
                ("#", "balloon", "type", "cpus", "shared idle", "mems", "containers (#)"),
                b_rows,
                "balloons",
            )
        )
    parts.append("</section>")
    return "\n".join(parts)


def render_page(
    views: Sequence[NodeView], *, title: str = "nri-resmgr", refresh: int | None = None
) -> str:
    """The page of `views` (module docstring); `refresh` seconds reloads it."""
    head = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        f"<title>{for_html(title)}</title>",
        f"<style>{_CSS}</style>",
    ]
    if refresh is not None:
        head.append(f'<meta http-equiv="refresh" content="{int(refresh)}">')
    body = ["</head><body>"]
    if len(views) > 1:
        options = "".join(
            f'<option value="{i}"{" selected" if i == len(views) - 1 else ""}>'
            f"{for_html(v.title or f'step {i}')}</option>"
            for i, v in enumerate(views)
        )
        body.append(f'<label for="step">step </label><select id="step">{options}</select>')
    last = len(views) - 1
    body += [_section(v, i, hidden=i != last) for i, v in enumerate(views)]
    if len(views) > 1:
        body.append(f"<script>{_SCRIPT}</script>")
    body.append("</body></html>")
    return "\n".join(head + body) + "\n"
