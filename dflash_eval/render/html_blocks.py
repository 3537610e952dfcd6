"""Draft blocks as the HTML templates show them: decoded pieces with controls made visible, each cell
marked accepted / first rejected / not reached, and pairs of blocks side by side for diff."""

from __future__ import annotations

import re
from typing import Any

from ..core.samples import BlockView, visible


def natural(text: str):
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part]


_CONTROL = {i: 0x2400 + i for i in range(32)} | {127: 0x2421}  # C0 controls and DEL as their Unicode pictures


def _shown(piece: str) -> str:
    """A token piece as shown: whitespace made visible as in the terminal, control characters as ␀..␟."""
    return visible(piece).translate(_CONTROL)


def _cells(block: BlockView) -> tuple[list[tuple[str, str]], list[tuple[str, str]], str | None]:
    """(draft cells, target cells, note on the first divergence): (text, css class) per slot."""
    rejected = block.first_rejected
    draft = [(_shown(piece), "a" if i < block.accepted else "x" if i == rejected else "u")
             for i, piece in enumerate(block.draft)]
    target = [(_shown(piece), "t" if i < block.accepted else "tx" if i == rejected else "")
              for i, piece in enumerate(block.target)]
    note = None
    if rejected is not None:
        note = (f"first divergence at slot {rejected + 1}: drafted {_shown(block.draft[rejected])!r}, "
                f"target {_shown(block.target[rejected])!r}")
    return draft, target, note


def block_cells(block: BlockView) -> dict[str, Any]:
    draft, target, note = _cells(block)
    return {"prompt_id": block.prompt_id, "drafter": block.drafter, "step": block.step,
            "anchor_pos": block.anchor_pos, "anchor": _shown(block.anchor), "accepted": block.accepted,
            "scored": min(len(block.draft), len(block.target)), "flags": list(block.flags),
            "rows": [("draft", draft), ("target", target)], "note": note,
            "divergence": block.first_rejected}


def pair_block(a: BlockView, b: BlockView) -> dict[str, Any]:
    """The first divergent block of a diff: A's and B's drafts over the same target tokens."""
    draft_a, target, note_a = _cells(a)
    draft_b, target_b, note_b = _cells(b)
    if len(target_b) > len(target):
        target = target_b
    target = [(text, "") for text, _ in target]  # accepted by whom differs: leave the target plain
    return {"anchor_pos": a.anchor_pos, "anchor": _shown(a.anchor), "step": a.step,
            "accepted_a": a.accepted, "accepted_b": b.accepted,
            "rows": [("A draft", draft_a), ("B draft", draft_b), ("target", target)],
            "notes": [(f"{side}: {note}", "div") if note else (f"{side}: all scored slots accepted", "muted")
                      for side, note in (("A", note_a), ("B", note_b))]}


def view_block(data: dict) -> BlockView:
    return BlockView(**{**data, "draft": tuple(data["draft"]), "target": tuple(data["target"]),
                        "flags": tuple(data.get("flags", ()))})


def visible_text(value):
    """Every value a template prints, through the one escaping rule of every output (core/safe_text.printable):
    control and invisible format characters from data (ESC in a prompt id or a drafter name, bidi overrides)
    become visible escapes before autoescaping, so `cat report.html` never drives a terminal and the page
    never reorders text. Markup (the charts' SVG) keeps its tags; newlines and tabs stay."""
    from ..core.safe_text import printable

    if hasattr(value, "__html__"):  # Jinja's Markup (markupsafe, not imported here: jinja2's own dependency)
        return type(value)(printable(str(value), keep="\n\t"))
    return printable(value, keep="\n\t") if isinstance(value, str) else value
