"""`--responses FILE.jsonl`: continuations produced elsewhere (e.g. vLLM), read and checked before a run
touches anything. Ambiguity is refused, never resolved: a row with both `response` and `response_ids`, an
id twice, a key twice in one object (core/errors.loads); empty responses are said (a warning naming how
many) or, when every response is empty, refused (nothing to evaluate)."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import InputError


def read_responses(path: Path, tokenizer, vocab_size: int | None = None) -> dict[str, list[int]]:
    """`--responses FILE.jsonl`: continuations produced elsewhere (e.g. by vLLM), by prompt id.

    Rows: {"id", "response": text} or {"id", "response_ids": [...]}. Every problem is one line naming the
    file and line: not JSON, not an object, a missing or repeated id, a response that is not text, ids that
    are not integers inside the target's vocabulary."""
    from ..core.jsonl import jsonl_rows

    out: dict[str, list[int]] = {}
    try:  # a BOM is allowed (as for prompts); lines end at "\n" only (core/jsonl.py)
        from ..core.errors import read_text

        text = read_text(path, "utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(path, "is not UTF-8 text") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    expected = 'expected {"id", "response"} or {"id", "response_ids"}'
    for number, row in jsonl_rows(text, path, objects=False):
        if not isinstance(row, dict) or not isinstance(row.get("id"), (str, int)) or isinstance(row.get("id"), bool):
            raise InputError(path, f"line {number}: {expected} (id a string)")
        key = str(row["id"])
        if key in out:
            raise InputError(path, f"line {number}: id {key!r} appears twice")
        if "response_ids" in row and "response" in row:  # which one is the continuation? never picked
            raise InputError(path, f"line {number}: both \"response\" and \"response_ids\" for id {key!r}; give one")
        if "response_ids" in row:
            ids = row["response_ids"]
            if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise InputError(path, f"line {number}: response_ids must be a list of integers")
            bad = [t for t in ids if t < 0 or (vocab_size is not None and t >= vocab_size)]
            if bad:
                raise InputError(path, f"line {number}: token id {bad[0]} is outside the target's vocabulary "
                                       f"(0..{(vocab_size or 0) - 1})")
            out[key] = list(ids)
        elif isinstance(row.get("response"), str):
            out[key] = tokenizer(row["response"], add_special_tokens=False)["input_ids"]
        else:
            raise InputError(path, f"line {number}: {expected} (response a string)")
    return out


def empty_responses(path: Path, responses: dict[str, list[int]], prompt_ids: list[str]) -> list[str]:
    """The warning for prompts whose response has no token (they have no steps); refused when all are empty."""
    empty = [pid for pid in prompt_ids if not responses[pid]]
    if empty and len(empty) == len(prompt_ids):
        raise InputError(path, "every response is empty (no token): nothing to evaluate")
    return [f"{len(empty)} of {len(prompt_ids)} responses are empty (no token; first {empty[0]!r}): those prompts "
            "have no steps"] if empty else []


def responses_for(path: Path, tokenizer, vocab_size: int | None, prompt_ids: list[str]) -> tuple[dict[str, list[int]], list[str]]:
    """`--responses FILE` as the run reads it: every prompt's response (token ids) and the warnings (empty
    responses); a file that is refused here is the one line `run` prints (tests/test_fuzz.py's oracle)."""
    responses = read_responses(path, tokenizer, vocab_size)
    missing = [pid for pid in prompt_ids if pid not in responses]
    if missing:
        raise InputError(path, f"no response for prompt {missing[0]!r} ({len(missing)} of {len(prompt_ids)} prompts "
                               "have none)")
    return responses, empty_responses(path, responses, prompt_ids)
