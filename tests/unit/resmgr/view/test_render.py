"""The node picture shown: names escaped (`view.text`), the terminal and the page."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from nri_resmgr.model import Assignment, ContainerID, CPUKind
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import load_topology
from nri_resmgr.view.html import render_page
from nri_resmgr.view.model import NodeView, build_view
from nri_resmgr.view.pools import PoolCPUs
from nri_resmgr.view.terminal import render_text
from nri_resmgr.view.text import for_html, shown
from tests.unit.resmgr.view.support import container_info

#: names a pod spec may carry: markup, quotes, terminal escapes, bidi and zero-width
HOSTILE = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "it's \x1b[31mred\x1b[0m\x07",
    "evil\u202egnp.exe\u200b",
    "back\\slash [bold]markup[/bold]",
)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("plain-name", "plain-name"),
        ("a\x1b[31mb", "a\\x1b[31mb"),
        ("tab\there\n", "tab\\x09here\\x0a"),
        ("rtl\u202eoverride", "rtl\\u202eoverride"),
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("a\\x1b", "a\\\\x1b"),
        ("café ünïcode", "café ünïcode"),
        ("\U000e0001tag", "\\U000e0001tag"),
    ],
    ids=["plain", "escape", "controls", "bidi", "zero-width", "backslash", "letters", "astral-tag"],
)
def test_shown_makes_hidden_characters_visible(text: str, want: str) -> None:
    assert shown(text) == want


def test_for_html_escapes_markup_and_quotes() -> None:
    assert for_html('<a href="x">\'</a>') == "&lt;a href=&quot;x&quot;&gt;&#x27;&lt;/a&gt;"


TOPO = load_topology("packages=1,nodes=2,cores=2,threads=2")


def hostile_view() -> NodeView:
    containers = []
    for i, name in enumerate(HOSTILE):
        info = container_info(
            f"id{i}",
            pod=name,
            name=name,
            namespace=name,
            annotations={"note": name, f"cpu.preserve.resource-policy.nri.io/pod{i}": name},
        )
        kind = CPUKind.EXCLUSIVE if i < 2 else CPUKind.SHARED
        cpus = f"{2 * i + 1}" if i < 2 else "5-7"
        containers.append(
            (
                info,
                Assignment(
                    ContainerID(f"id{i}"),
                    IDSet.parse(cpus),
                    IDSet({1}),
                    kind,
                    pool=name,
                    rdt_class=name,
                ),
            )
        )
    return build_view(
        TOPO,
        policy="topology-aware",
        containers=containers,
        pools=PoolCPUs(reserved=IDSet({0}), shared={HOSTILE[0]: IDSet({5, 6, 7})}),
        title=HOSTILE[1],
    )


def test_terminal_plain_text_has_no_escape_sequences_and_shows_names_escaped() -> None:
    out = render_text(hostile_view(), color=False, width=400)
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "it's \\x1b[31mred\\x1b[0m\\x07" in out
    assert "[bold]markup[/bold]" in out  # shown as written, not taken as rich markup
    assert "resource-policy.nri.io/pod2=it's \\x1b[31mred" in out
    assert "note=" not in out  # annotations of other domains are not shown
    assert "0:res" in out and "1:c1" in out and "3:c2" in out and "5:shr" in out


def test_terminal_colour_only_when_asked() -> None:
    coloured = render_text(hostile_view(), color=True, width=200)
    assert re.search(r"\x1b\[[0-9;]*m", coloured)
    # every escape in the coloured text is a colour (SGR) code of rich's, none a name's
    assert not re.search(r"\x1b(?!\[[0-9;]*m)", coloured)
    assert "\x07" not in coloured


class _Page(HTMLParser):
    """The page as a browser would parse it: scripts, external references, table cells."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.refs: list[tuple[str, str]] = []
        self.handlers: list[str] = []
        self.cells: dict[str, dict[str, str]] = {}
        #: header cells of the containers table, and cells of each of its rows
        self.heads = 0
        self.widths: list[int] = []
        self._row: str | None = None
        self._cell: str | None = None
        self._in_script = False
        self._table: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.refs += [(tag, k) for k in ("src", "href") if k in a]
        self.handlers += [k for k in a if k.startswith("on")]
        if tag == "script":
            self._in_script = True
            self.scripts.append("")
        if tag == "table":
            self._table = a.get("class")
        if tag == "th" and self._table == "containers":
            self.heads += 1
        if tag == "tr" and "data-container" in a:
            self._row = a["data-container"] or ""
            self.cells[self._row] = {}
            self.widths.append(0)
        if tag == "td" and self._row is not None:
            self._cell = a.get("class") or ""
            self.widths[-1] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False
        if tag == "tr":
            self._row = None
        if tag == "td":
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data
        if self._row is not None and self._cell:
            self.cells[self._row][self._cell] = self.cells[self._row].get(self._cell, "") + data


def test_page_shows_hostile_names_as_text() -> None:
    view = hostile_view()
    page = _Page()
    page.feed(render_page([view], refresh=5))
    assert page.scripts == [] and page.refs == [] and page.handlers == []
    assert page.widths == [page.heads] * len(view.containers)
    for row in view.containers:
        cells = page.cells[row.id]
        assert cells["pod"] == shown(row.pod)
        assert cells["cpus"] == row.cpus
        assert cells["rdt"] == shown(row.rdt_class)
        i = int(row.id[2:])
        assert (
            cells["annotations"] == f"cpu.preserve.resource-policy.nri.io/pod{i}={shown(row.pod)}"
        )


def test_page_with_steps_has_one_inline_script_and_loads_nothing() -> None:
    views = [hostile_view(), hostile_view()]
    text = render_page(views)
    page = _Page()
    page.feed(text)
    assert len(page.scripts) == 1 and "alert" not in page.scripts[0]
    assert page.refs == []
    assert text.count('<section class="view') == 2
    assert "default-src 'none'" in text
    assert '<meta http-equiv="refresh"' not in text
