"""The one JSONL reader: every file of one JSON value a line (prompts, --responses, samples.jsonl, server
responses, AIPerf's records, `vllm bench serve --append-result`) is split and parsed here, so each problem reads
the same whichever file it is in: `FILE: line N: not JSON (why)`, `FILE: line N: not a JSON object`.

Lines end at "\\n" only (a "\\r" before it is dropped): the other characters `str.splitlines` treats as line
ends (U+2028, form feed...) are text inside a JSON string, and the line numbers are an editor's. Blank lines
are skipped. `core.errors.loads` parses each line (duplicate keys, lone surrogates, numbers JSON cannot hold:
refused with one phrase).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from .errors import InputError, loads


def jsonl_value(line: str, number: int, origin: str | Path | None, *, objects: bool = True) -> Any:
    """Line `number` of a JSONL file parsed, or the one InputError: `line N: not JSON (why)`, `line N: not a
    JSON object` (`objects`). For a reader that streams its lines itself (formats/hf_cache.py)."""
    try:
        value = loads(line)
    except ValueError as exc:
        raise InputError(origin, f"line {number}: not JSON ({exc})") from None
    if objects and not isinstance(value, dict):
        raise InputError(origin, f"line {number}: not a JSON object")
    return value


def jsonl_rows(text: str, origin: str | Path | None, *, objects: bool = True,
               torn_tail: str | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every non-blank line of `text`; `origin` names the file in the errors.
    `objects`: each value must be a JSON object. `torn_tail`: what a last line that does not parse and has
    no newline after it means in a file written a line at a time (samples.jsonl): "drop" it (a writer was
    cut mid-line; the prompt is redone), or "refuse" it naming it torn; None: a line like any other."""
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        if torn_tail is not None and number == len(lines):  # the last line, no newline after it
            try:
                loads(line)
            except ValueError:
                if torn_tail == "drop":
                    return
                raise InputError(origin, f"line {number}: torn (cut mid-write); the file was damaged or edited") \
                    from None
        yield number, jsonl_value(line, number, origin, objects=objects)
