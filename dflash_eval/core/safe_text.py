"""One escaping helper for everything that comes from data (prompt ids and text, decoded tokens, drafter
names, paths, messages that quote them) before it reaches a terminal.

Why: a prompt file or a tokenizer is data a user did not write; an ESC byte in it could recolour, move the
cursor or retitle the terminal, and `[link=...]` or `[bold red]` in a drafter name would be read as Rich
markup. So control and invisible format characters are shown as escapes (`\\x1b`, `\\u200e`) and markup
is escaped, and so are Rich's emoji codes (`:cross_mark:` in a prompt id stays text); our own styling is added
around the escaped text, never inside it. The HTML report escapes separately (Jinja2 autoescape).
"""

from __future__ import annotations

import unicodedata

# Cc control, Cf format (bidi overrides, zero-width), Cs/Co surrogates and private use, line/paragraph separators
_HIDDEN = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}


def printable(text: object, keep: str = "") -> str:
    """`text` with every control or invisible format character replaced by its Python escape (except
    those in `keep`, e.g. "\n\t" for multi-line prompt text)."""
    out = []
    for ch in str(text):
        if ch not in keep and unicodedata.category(ch) in _HIDDEN:
            out.append(ch.encode("unicode_escape").decode("ascii") if ord(ch) < 0x10000 or ch.isascii()
                       else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return "".join(out)


def safe(text: object) -> str:
    """`printable(text)` with Rich markup escaped and Rich emoji codes (`:name:`) kept as text: for strings
    that go into markup-enabled output. Rich has no escape for an emoji code; it replaces codes only inside one
    run of text between tags, so an empty span after the opening colon (`:[b][/b]name:`) keeps the code
    literal and shows nothing itself."""
    import re

    from rich.markup import escape

    escaped = escape(printable(text))
    if ":" not in escaped:
        return escaped
    # every `:word:` Rich could read as a code (its pattern: no whitespace inside), known emoji or not
    return re.sub(r":(?=[^\s:]+:)", ":[b][/b]", escaped)
