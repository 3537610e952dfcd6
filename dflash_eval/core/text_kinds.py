"""What kind of text each continuation token is: its segment and its lexical class (pure, no torch).

A drafter that accepts well on answers may lose on thinking, on code, on tool calls, or on one kind of
token (indentation, identifiers, string literals); `breakdown.py` splits every metric by these labels.
Both are computed from a samples.jsonl row's `continuation_pieces` alone (each token decoded on its own),
so an old run folder is split without its tokenizer.

**Segments** (`segment_labels`, one label per token, a partition: SEGMENTS):
- `thinking`: inside Qwen's `<think>` ... `</think>` (both tags included). A continuation whose first
  `</think>` comes before any `<think>` starts inside a think block its chat template opened (Qwen3
  thinking-2507 templates end the generation prompt with `<think>\\n`);
- `tool_call`: inside `<tool_call>` ... `</tool_call>` (tags included; Qwen2.5/3 and Qwen3-Coder);
- `answer_code`: inside a fenced block (CommonMark: a line of >= 3 backticks or tildes, indented at most 3
  spaces, closed by a line of the same character at least as long; the fence lines included). The fence
  state restarts at each think tag, so a block left open while thinking does not run into the answer;
- `answer_prose`: everything else. Precedence: tool_call > thinking > answer_code > answer_prose.
A token's segment is the one of its first character.

**Token classes** (`token_classes`, one per token, a partition: TOKEN_CLASSES). Byte-level BPE tokens
carry their leading space ("Ġfoo" decodes to " foo"); a token is classed by its first non-whitespace
character, so " foo" is an identifier and "\\n    " (newline + indentation, one Qwen token) a newline:
- whitespace-only pieces: `newline` if they hold a line break, else `whitespace` (indentation);
- the chat template's tags (`<think>`, `<|im_end|>`, ...): `special`;
- in code (and tool-call JSON): the class of the Pygments token under that character, lexing each code
  span whole with the fence's language (Python when the fence names none or an unknown one; JSON for
  tool calls): `keyword`, `identifier` (names, builtins included), `number`, `string` (literals and
  their quotes), `operator` (operators and punctuation), `comment`; what the lexer cannot class (a fence's
  backticks) takes the prose rules;
- in prose and thinking: `number` (a digit), `word` (a letter or `_`), `operator` (punctuation), else
  `other` (a partial UTF-8 character, an emoji, ...).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from functools import lru_cache

SEGMENTS = ("thinking", "answer_prose", "answer_code", "tool_call")
TOKEN_CLASSES = ("whitespace", "newline", "identifier", "keyword", "number", "string", "operator", "comment",
                 "word", "special", "other")

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
_EVENTS = re.compile(r"<think>|</think>|<tool_call>|</tool_call>|^[ ]{0,3}(`{3,}|~{3,})([^\n]*)", re.MULTILINE)
_SPECIAL = re.compile(r"^\s*(<\|[^|<>]{1,40}\|>|</?think>|</?tool_call>|</?tool_response>)\s*$")


def byte_level_text(token: str) -> str:
    """A raw byte-level BPE vocabulary string ("Ġfoo", "ĊĠĠĠ") as the text it decodes to (" foo",
    "\\n   "), by GPT-2's byte <-> unicode table (Qwen's tokenizers use it); bytes that do not form UTF-8
    come out as U+FFFD, as a tokenizer's single-token decode shows them."""
    table = _unicode_to_byte()
    if any(ch not in table for ch in token):
        return token  # not a byte-level string (an added token such as "<think>")
    return bytes(table[ch] for ch in token).decode("utf-8", errors="replace")


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _spans(text: str) -> list[tuple[int, str, str]]:
    """(start offset, segment, code language) runs over the text: each run lasts until the next start."""
    think = text.find(THINK_CLOSE) >= 0 and (text.find(THINK_OPEN) < 0 or text.find(THINK_OPEN) > text.find(THINK_CLOSE))
    tool, fence, lang = False, None, ""
    runs: list[tuple[int, str, str]] = []

    def label() -> str:
        return "tool_call" if tool else "thinking" if think else "answer_code" if fence else "answer_prose"

    def mark(at: int) -> None:
        item = (at, label(), lang if fence else "")
        if runs and runs[-1][0] == at:
            runs[-1] = item
        else:
            runs.append(item)

    mark(0)
    for m in _EVENTS.finditer(text):
        tag = m.group(0)
        if tag in (THINK_OPEN, THINK_CLOSE):
            opening = tag == THINK_OPEN
            if opening:
                think, fence = True, None
                mark(m.start())
            else:  # the closing tag is thinking; what follows is not
                mark(m.start())
                think, fence = False, None
            mark(m.end())
        elif tag in (TOOL_OPEN, TOOL_CLOSE):
            if tag == TOOL_OPEN:
                tool = True
                mark(m.start())
            else:
                mark(m.start())
                tool = False
            mark(m.end())
        else:
            marker, info = m.group(1), m.group(2)
            line_end = m.end()
            if fence is None:
                if marker[0] == "`" and "`" in info:
                    continue  # not a fence (CommonMark: a backtick fence's info string has no backtick)
                fence, lang = marker, info.strip().split(" ")[0].lower() if info.strip() else ""
                mark(m.start())
            elif marker[0] == fence[0] and len(marker) >= len(fence) and not info.strip():
                mark(m.start())  # the closing fence line is code
                fence, lang = None, ""
                mark(line_end)
    return runs


def _token_starts(pieces: Sequence[str]) -> list[int]:
    starts, at = [], 0
    for piece in pieces:
        starts.append(at)
        at += len(piece)
    return starts


def segment_labels(pieces: Sequence[str]) -> list[str]:
    """One SEGMENTS label per token (see the module docstring)."""
    return list(_labels(tuple(pieces))[0])


def token_classes(pieces: Sequence[str]) -> list[str]:
    """One TOKEN_CLASSES label per token (see the module docstring)."""
    return list(_labels(tuple(pieces))[1])


def labels(pieces: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(segment labels, token classes) of a continuation; memoised, since every drafter of a prompt (and
    every partial run.json written after a prompt) asks for the same continuation's labels."""
    return _labels(tuple(pieces))


@lru_cache(maxsize=4096)
def _labels(pieces: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    text = "".join(pieces)
    runs = _spans(text)
    starts = _token_starts(pieces)
    run_starts = [r[0] for r in runs]
    segments = []
    for start in starts:
        segments.append(runs[bisect.bisect_right(run_starts, start) - 1][1] if text else "answer_prose")
    lexed = _lex_code(text, runs)
    classes = []
    for piece, start, segment in zip(pieces, starts, segments):
        classes.append(_token_class(piece, start, segment, lexed))
    return tuple(segments), tuple(classes)


def _lex_code(text: str, runs: list[tuple[int, str, str]]) -> tuple[list[int], list[str]]:
    """Code and tool-call runs lexed whole: (sorted start offsets of lexed tokens, their classes)."""
    offsets: list[int] = []
    kinds: list[str] = []
    bounds = [r[0] for r in runs[1:]] + [len(text)]
    for (start, segment, lang), end in zip(runs, bounds):
        if segment not in ("answer_code", "tool_call") or end <= start:
            continue
        lexer = _lexer("json" if segment == "tool_call" else lang)
        for index, kind, _value in lexer.get_tokens_unprocessed(text[start:end]):
            offsets.append(start + index)
            kinds.append(_pygments_class(kind))
    return offsets, kinds


def _token_class(piece: str, start: int, segment: str, lexed: tuple[list[int], list[str]]) -> str:
    stripped = piece.lstrip()
    if not stripped:
        return "newline" if ("\n" in piece or "\r" in piece) else "whitespace" if piece else "other"
    if _SPECIAL.match(piece):
        return "special"
    first = start + (len(piece) - len(stripped))
    if segment in ("answer_code", "tool_call") and lexed[0]:
        offsets, kinds = lexed
        index = bisect.bisect_right(offsets, first) - 1
        if index >= 0 and kinds[index] != "other":  # a lexer error (a fence's backticks): the rules below
            return kinds[index]
    ch = stripped[0]
    if ch.isdigit():
        return "number"
    if ch.isalpha() or ch == "_":
        return "word"
    if ch.isascii() and ch.isprintable():
        return "operator"
    return "other"


@lru_cache(maxsize=64)
def _lexer(lang: str):
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        return get_lexer_by_name(lang or "python", stripnl=False, ensurenl=False)
    except ClassNotFound:
        return get_lexer_by_name("python", stripnl=False, ensurenl=False)


def _pygments_class(kind) -> str:
    from pygments import token as T

    if kind in T.Comment:
        return "comment"
    if kind in T.Keyword or kind in T.Operator.Word:
        return "keyword"
    if kind in T.Literal.String:
        return "string"
    if kind in T.Literal.Number:
        return "number"
    if kind in T.Name:
        return "identifier"
    if kind in T.Operator or kind in T.Punctuation:
        return "operator"
    if kind in T.Text or kind in T.Whitespace:
        return "whitespace"
    return "other"
