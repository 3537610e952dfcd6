"""Prompt sources for `run`: a JSONL file of {"id", "prompt"} rows, or the built-in demo set.

Each prompt is one user message; `continuations.prompt_ids` formats it with the target tokenizer's chat
template (generation prompt added, thinking flag as recorded in provenance).
"""

from __future__ import annotations

import json
from pathlib import Path

from .continuations import Prompt
from .errors import InputError

# Short coding requests: what the demo runs and the fixture trainer learns from.
DEMO_PROMPTS = (
    "Write a Python function that reverses a string.",
    "Write a function fizzbuzz(n) that prints Fizz, Buzz or FizzBuzz.",
    "Implement binary search over a sorted list.",
    "Write a class Stack with push, pop and peek.",
    "Parse a CSV line into a list of fields.",
    "Return the n-th Fibonacci number iteratively.",
    "Check whether a string is a palindrome.",
    "Count the words in a text file.",
    "Merge two sorted lists into one sorted list.",
    "Write a function that flattens a nested list.",
    "Compute the greatest common divisor of two integers.",
    "Remove duplicates from a list while keeping order.",
)


def demo_prompts() -> list[Prompt]:
    return [Prompt(id=f"demo/{i}", text=text, set="demo") for i, text in enumerate(DEMO_PROMPTS)]


def read_prompts_file(path: Path) -> list[Prompt]:
    """JSONL rows {"id", "prompt"} (optional "set"); ids must be unique."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise InputError(path, f"cannot read prompts: {exc.strerror}") from None
    prompts, seen = [], set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            prompt = Prompt(id=str(row["id"]), text=str(row["prompt"]), set=str(row.get("set", path.stem)))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise InputError(path, f"line {number}: expected a JSON object with \"id\" and \"prompt\"") from None
        if prompt.id in seen:
            raise InputError(path, f"line {number}: duplicate prompt id {prompt.id!r}")
        seen.add(prompt.id)
        prompts.append(prompt)
    if not prompts:
        raise InputError(path, "no prompts in file")
    return prompts


def load_prompts(source: str, limit: int | None = None) -> list[Prompt]:
    prompts = demo_prompts() if source == "demo" else read_prompts_file(Path(source))
    return prompts[:limit] if limit else prompts
