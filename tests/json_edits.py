"""Test helper: edits of JSON documents by dotted path (config.json, run.json)."""

from __future__ import annotations

DELETE = object()  # as a value: remove the key


def set_key(path: str, value):
    """An edit function setting `a.b.c` to `value` (creating missing parents), or deleting it."""
    def edit(document):
        node = document
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return edit
