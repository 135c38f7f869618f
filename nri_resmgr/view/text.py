"""Names made safe to show: control and format characters as visible escapes.

Theory of operation: pod names, container names and annotations come from whoever wrote
the pod spec.  A terminal would act on an escape sequence in them, a page would parse
markup, and an invisible character (a bidi override, a zero-width space) would make one
name look like another.  `shown` replaces every character of Unicode categories Cc, Cf,
Cs, Co, Cn, Zl and Zp (controls, format characters, surrogates, private use, unassigned,
line and paragraph separators) with its Python escape (``\\x1b``, ``\\u202e``) and the
backslash with two, so what is shown can be read back to the name exactly.  `for_html`
also escapes ``& < > " '`` for a page.  Pure.
"""

from __future__ import annotations

import html
import unicodedata

__all__ = ["for_html", "shown"]

_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _escape(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def shown(text: str) -> str:
    """`text` with hidden characters as escapes (module docstring)."""
    if text.isprintable() and "\\" not in text:
        return text  # the common case, one C-level scan
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif unicodedata.category(ch) in _HIDDEN:
            out.append(_escape(ch))
        else:
            out.append(ch)
    return "".join(out)


def for_html(text: str) -> str:
    """`shown(text)`, escaped for HTML text and quoted attribute values."""
    return html.escape(shown(text), quote=True)
