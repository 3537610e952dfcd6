"""Prompt sources for `run`: the bundled coding sets, a JSONL file, a directory of source files, the demo.

`load_prompts(source, limit, seed)` takes

- a set name (`PROMPT_SETS`): `humaneval` (164), `mbpp` (MBPP sanitized test split, 257) or `demo` (12).
  The two benchmark sets carry the user message exactly as z-lab's DFlash benchmark builds it (primer
  section 7), so tau measured on them can be set beside the published numbers. They are packaged in
  `dflash_eval/data/prompts/` (`prompts/build.py` regenerates them from the
  source data, `prompts/LICENSES.md` gives origins and licenses);
- a JSONL file: one JSON object a line, `{"id", "prompt"}` (`"text"` is accepted for `"prompt"`, so the
  set files themselves load) or `{"id", "messages": [{"role", "content"}, ...]}` for a whole chat
  conversation, with an optional `"set"` (default: the file's stem). Blank lines are skipped; a bad line
  is an `InputError` naming the file and line; ids must be unique;
- `dir:PATH`: code-completion prompts from a directory of source files (`directory_prompts`);
- from the local Hugging Face cache (`hf_prompts`): the paper's other sets by name (gsm8k, math500, aime24,
  aime25, livecodebench, swe-bench, mt-bench, alpaca), `paper:NAME` (only the paper's rows), `hf:REPO...`.

Each prompt becomes the target's chat-template input in `continuations.chat_text` (generation prompt
added, thinking flag as recorded in provenance); `render_for_target` shows that exact text.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TypeVar, cast

from ..core.errors import InputError, read_text
from ..core.jsonl import jsonl_rows

T = TypeVar("T")  # what select() picks from: prompts, or conversations of them


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str  # the user message (formatted with the target's chat template); see `messages`
    set: str = "custom"
    # A whole chat conversation ({"role", "content"} dicts, ending with a user turn), templated instead of
    # `text` when present. Prompts built by `prompts.load_prompts` then carry the conversation's canonical
    # JSON in `text`, so that everything keyed on `text` (the continuation cache) still tells them apart.
    messages: tuple[dict, ...] | None = field(default=None, hash=False)
    # A later turn of a multi-turn set (mt-bench): the turn whose greedy answer precedes this prompt's last user
    # message (`hf_prompts.ANSWER_PLACEHOLDER` there until pipeline/turns.py fills it in).
    after: str | None = None

    def turn(self) -> int:
        """0 for a prompt of its own; k for the k-th later turn of a conversation (its assistant messages)."""
        return sum(m["role"] == "assistant" for m in self.messages) if self.after and self.messages else 0

    def chat(self) -> list[dict]:
        """The conversation sent to the target: `messages`, or `text` as one user message."""
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.text}]


def chat_text(tokenizer, prompt: Prompt, enable_thinking: bool) -> str:
    """The exact text sent to the target: the prompt's conversation (`messages`, else `text` as one user
    message) through the target's chat template, with the generation prompt added."""
    if not tokenizer.chat_template:
        raise InputError(prompt.id, "the target tokenizer has no chat template")
    from ..model.target import render_chat

    return render_chat(tokenizer, prompt.chat(), enable_thinking)


def prompt_ids(tokenizer, prompt: Prompt, enable_thinking: bool) -> list[int]:
    """The prompt through the target's chat template (`chat_text`), as token ids."""
    return tokenizer(chat_text(tokenizer, prompt, enable_thinking), add_special_tokens=False)["input_ids"]


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

PROMPT_SETS: dict[str, str] = {
    "humaneval": "HumanEval, all 164 problems (test split), wrapped as z-lab's benchmark does "
                 "(\"Write a solution to the following problem ...\" and the problem in a python fence)",
    "mbpp": "MBPP sanitized, test split (task ids 11-510), 257 problems; the raw task statement as the user turn",
    "demo": "12 short coding requests written for the bundled demo",
}

SET_LICENSES: dict[str, str] = {
    "humaneval": "MIT, OpenAI (Chen et al. 2021, arXiv:2107.03374)",
    "mbpp": "CC BY 4.0, Google (Austin et al. 2021, arXiv:2108.07732)",
    "demo": "part of dflash-eval (Apache-2.0)",
}

# --- dir:PATH ----------------------------------------------------------------------------------------

# The user message of a code-completion prompt. The targets are chat models and DFlash drafters are
# trained and benchmarked on chat-templated turns (primer section 7), so the file head goes into a user
# turn rather than being fed raw; it is fenced with its language tag as z-lab's HumanEval wrapper fences
# the problem, so the model answers with code that continues the file: repository-style text over a long
# context, which is what this source is for.
DIR_TEMPLATE = "Continue this file:\n{fence}{lang}\n{head}\n{fence}"
HEAD_CHARS = 6000  # at most this many characters of each file, cut at a line boundary (~1.5-2k tokens)

CODE_EXTENSIONS: dict[str, str] = {  # file suffix (lower case) -> the fence's language tag
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".jsx": "jsx", ".ts": "typescript", ".tsx": "tsx", ".java": "java", ".kt": "kotlin", ".scala": "scala",
    ".go": "go", ".rs": "rust", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp",
    ".hh": "cpp", ".hpp": "cpp", ".cu": "cuda", ".cs": "csharp", ".rb": "ruby", ".php": "php",
    ".swift": "swift", ".m": "objectivec", ".lua": "lua", ".sh": "bash", ".bash": "bash", ".r": "r",
    ".jl": "julia", ".hs": "haskell", ".ml": "ocaml", ".ex": "elixir", ".exs": "elixir", ".erl": "erlang",
    ".clj": "clojure", ".dart": "dart", ".sql": "sql", ".pl": "perl", ".zig": "zig", ".f90": "fortran",
    ".vue": "vue", ".svelte": "svelte",
}
# Folders never entered: hidden ones (.git, .venv, ...) and these (caches, installed or vendored code).
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "venv"})


def demo_prompts() -> list[Prompt]:
    return [Prompt(id=f"demo/{i}", text=text, set="demo") for i, text in enumerate(DEMO_PROMPTS)]


# --- JSONL ---------------------------------------------------------------------------------------------


def _row_prompt(row, default_set: str) -> Prompt:
    """One parsed JSONL row as a Prompt; ValueError with the problem otherwise."""
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    if "id" not in row:
        raise ValueError('missing "id"')
    key = row["id"]
    if isinstance(key, bool) or not isinstance(key, (str, int)) or str(key) == "":
        raise ValueError('"id" must be a non-empty string or an integer')
    # "text" is an alias of "prompt" (the bundled sets are written with it; docs/prompts.md)
    given = [name for name in ("prompt", "text", "messages") if name in row]
    if not given:
        raise ValueError('missing "prompt" (one user message; "text" is an alias) or "messages"')
    if len(given) > 1:
        raise ValueError(f'give one of "prompt" (alias "text") and "messages", not {" and ".join(repr(g) for g in given)}')
    prompt_set = row.get("set", default_set)
    if not isinstance(prompt_set, str) or not prompt_set:
        raise ValueError('"set" must be a non-empty string')
    if given[0] != "messages":
        text = row[given[0]]
        if not isinstance(text, str) or not text:
            raise ValueError(f'"{given[0]}" must be a non-empty string')
        return Prompt(id=str(key), text=text, set=prompt_set)
    messages = row["messages"]
    if not isinstance(messages, list) or not messages:
        raise ValueError('"messages" must be a non-empty list of {"role", "content"} objects')
    for index, message in enumerate(messages):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str) and message["role"]
                and isinstance(message.get("content"), str)):
            raise ValueError(f'messages[{index}] must be an object with string "role" and "content"')
    if messages[-1]["role"] != "user":
        raise ValueError(f'the last message must be a user turn (the one the target answers), '
                         f'not {messages[-1]["role"]!r}')
    return message_prompt(str(key), messages, prompt_set)


def message_prompt(key: str, messages, prompt_set: str = "custom") -> Prompt:
    """A chat-conversation prompt. Its `text` is the conversation's canonical JSON, so that whatever is
    keyed on `text` (the continuation cache, a run's settings) changes with any message."""
    messages = tuple(dict(m) for m in messages)
    text = json.dumps(list(messages), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return Prompt(id=key, text=text, set=prompt_set, messages=messages)


def parse_prompts_jsonl(content: str, origin: str | Path, default_set: str) -> list[Prompt]:
    """Prompts from JSONL text; `origin` names the file in errors. Lines are split on "\\n" only (not on
    the other characters str.splitlines treats as line ends), so that line numbers match an editor's."""
    prompts: list[Prompt] = []
    first_line: dict[str, int] = {}
    for number, row in jsonl_rows(content, origin, objects=False):  # core/jsonl.py
        try:
            prompt = _row_prompt(row, default_set)
        except ValueError as exc:
            raise InputError(origin, f"line {number}: {exc}") from None
        if prompt.id in first_line:
            raise InputError(origin, f"line {number}: duplicate id {prompt.id!r} (first on line {first_line[prompt.id]})")
        first_line[prompt.id] = number
        prompts.append(prompt)
    if not prompts:
        raise InputError(origin, "no prompts in file")
    return prompts


def read_prompts_file(path: str | Path) -> list[Prompt]:
    """A JSONL file of {"id", "prompt"} (alias {"id", "text"}) or {"id", "messages"} rows (optional "set"; ids
    unique)."""
    path = Path(path)
    try:
        content = read_text(path, "utf-8-sig")
    except FileNotFoundError:
        raise InputError(path, "cannot read prompts: no such file (" + _did_you_mean(str(path)) + "prompt sources: "
                         + ", ".join(PROMPT_SETS) + ", a FILE.jsonl or dir:PATH)") from None
    except IsADirectoryError:
        raise InputError(path, f"is a directory; for code-completion prompts from its files use dir:{path}") from None
    except OSError as exc:
        raise InputError(path, f"cannot read prompts: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text (byte {exc.start})") from None
    return parse_prompts_jsonl(content, path, default_set=path.stem)


@lru_cache(maxsize=None)
def _packaged_set(name: str) -> tuple[Prompt, ...]:
    resource = resources.files("dflash_eval") / "data" / "prompts" / f"{name}.jsonl"
    try:
        content = resource.read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        raise InputError(f"dflash_eval/data/prompts/{name}.jsonl",
                         "the packaged prompt set is missing from this installation") from None
    return tuple(parse_prompts_jsonl(content, f"dflash_eval/data/prompts/{name}.jsonl", default_set=name))


def prompt_set(name: str) -> list[Prompt]:
    """A bundled set by name (`PROMPT_SETS`), in its order."""
    if name == "demo":
        return demo_prompts()
    if name not in PROMPT_SETS:
        raise InputError(name, "unknown prompt set (" + _did_you_mean(name) + "known: " + ", ".join(PROMPT_SETS) + ")")
    return list(_packaged_set(name))


def _did_you_mean(source: str) -> str:
    """'did you mean humaneval? ' when `source` is a near miss of a set name (case or a typo), else ''."""
    import difflib

    from ..formats.benchmark_sets import BENCHMARK_SETS

    close = difflib.get_close_matches(source.lower(), [*PROMPT_SETS, *BENCHMARK_SETS], n=1, cutoff=0.7)
    return f"did you mean {close[0]}? " if close else ""


# --- dir:PATH ------------------------------------------------------------------------------------------


def file_head(text: str, limit: int = HEAD_CHARS) -> str:
    """The start of a file: the whole text if it is at most `limit` characters, else as many whole lines
    as fit (a first line longer than `limit` is cut at `limit`); trailing blank lines dropped."""
    if len(text) > limit:
        cut = text.rfind("\n", 0, limit + 1)
        text = text[:cut] if cut > 0 else text[:limit]
    return text.rstrip("\n")


def completion_message(head: str, lang: str) -> str:
    """`DIR_TEMPLATE` filled in; the fence is made longer than any run of backticks in the code."""
    longest = max((len(run) for run in re.findall(r"`+", head)), default=0)
    return DIR_TEMPLATE.format(fence="`" * max(3, longest + 1), lang=lang, head=head)


def source_files_under(directory: Path) -> list[Path]:
    found = []
    for path in directory.rglob("*"):
        relative = path.relative_to(directory)
        if any(part.startswith(".") or part in SKIPPED_DIRS for part in relative.parts[:-1]):
            continue
        if path.name.startswith(".") or path.suffix.lower() not in CODE_EXTENSIONS or not path.is_file():
            continue
        found.append(path)
    return sorted(found, key=lambda p: p.relative_to(directory).as_posix())


def directory_prompts(directory: str | Path) -> list[Prompt]:
    """`dir:PATH`: one code-completion prompt per source file under `directory` (recursive, sorted by
    relative path; files with a `CODE_EXTENSIONS` suffix, outside hidden and `SKIPPED_DIRS` folders;
    files that are not UTF-8 text, or are empty, are skipped). The user message is
    `DIR_TEMPLATE` with the file's first `HEAD_CHARS` characters cut at a line boundary (`file_head`);
    id = the relative path, set = "dir:<directory name>"."""
    directory = Path(directory)
    if not directory.exists():
        raise InputError(directory, "no such directory")
    if not directory.is_dir():
        raise InputError(directory, "not a directory (dir:PATH takes a folder of source files)")
    set_name = f"dir:{directory.resolve().name}"
    prompts = []
    for path in source_files_under(directory):
        try:
            with path.open(encoding="utf-8", newline=None) as handle:
                text = handle.read(HEAD_CHARS + 1)
        except (OSError, UnicodeDecodeError):
            continue
        head = file_head(text)
        if "\x00" in head or not head.strip():
            continue
        prompts.append(Prompt(id=path.relative_to(directory).as_posix(), set=set_name,
                              text=completion_message(head, CODE_EXTENSIONS[path.suffix.lower()])))
    if not prompts:
        raise InputError(directory, "no source files found (UTF-8 text with a code extension such as "
                         ".py, .js, .ts, .go, .rs, .c, .cpp, .java, outside hidden folders)")
    return prompts


# --- selection and the public entry points -----------------------------------------------------------


def select(prompts: Sequence[T], limit: int | None = None, seed: int | None = None) -> list[T]:
    """`limit` prompts: the first ones, or with `seed` a seeded random subset, kept in the set's order.

    The subset is the first `limit` entries of a seeded permutation, so for one seed a smaller limit
    gives a subset of a larger one, and the same (set, limit, seed) always gives the same prompts."""
    if limit is None or limit >= len(prompts):
        return list(prompts)
    if limit < 1:
        raise InputError("--limit", f"must be at least 1, got {limit}")
    if seed is None:
        return list(prompts[:limit])
    order = list(range(len(prompts)))
    random.Random(seed).shuffle(order)
    return [prompts[i] for i in sorted(order[:limit])]


@dataclass(frozen=True)
class PromptSet:
    """A run's prompts after --limit / --seed, and what run.json records of a Hugging Face cache source's data
    (`dataset`: repo, revision, files, draw; None for every other source)."""

    prompts: list[Prompt]
    dataset: dict | None = None


def load_prompts(source: str, limit: int | None = None, seed: int | None = None, *,
                 prompt_field: str | None = None) -> list[Prompt]:
    """Prompts from `source`: "humaneval" | "mbpp" | "demo" | path to FILE.jsonl | "dir:PATH", or from the
    Hugging Face cache (`benchmark_prompts`): a named set of the paper's table, "paper:NAME", "hf:REPO...".
    Without `seed` the first `limit`; with it a seeded random subset of `limit` (see `select`)."""
    return load_prompt_set(source, limit, seed, prompt_field=prompt_field).prompts


def load_prompt_set(source: str, limit: int | None = None, seed: int | None = None, *,
                    prompt_field: str | None = None) -> PromptSet:
    """`load_prompts`, with the provenance of a Hugging Face cache source's data."""
    source = str(source)
    from .hf_prompts import is_benchmark_source

    if is_benchmark_source(source) or prompt_field is not None:
        return benchmark_prompts(source, limit, seed, prompt_field)
    if source in PROMPT_SETS:
        prompts = prompt_set(source)
    elif source.startswith("dir:"):
        prompts = directory_prompts(Path(source[len("dir:"):]).expanduser())
    else:
        prompts = read_prompts_file(Path(source).expanduser())
    return PromptSet(select(prompts, limit, seed))


def benchmark_prompts(source: str, limit: int | None, seed: int | None, prompt_field: str | None) -> PromptSet:
    """A source of `hf_prompts` (or "paper:humaneval" / "paper:mbpp": the paper's rows of a bundled set);
    `select` takes whole conversations, so a multi-turn set keeps every turn of the ones it draws."""
    from ..formats.benchmark_sets import PAPER_ROWS, paper_indices
    from .hf_prompts import benchmark_conversations

    name = source.removeprefix("paper:")
    if source != name and name in PROMPT_SETS and name in PAPER_ROWS:  # paper:humaneval, paper:mbpp
        whole = prompt_set(name)
        return PromptSet(select([whole[i] for i in paper_indices(len(whole), PAPER_ROWS[name])], limit, seed))
    conversations, dataset = benchmark_conversations(source, prompt_field)
    # a PromptRow holds its user message or its conversation (hf_prompts.py): without messages, `user` is there
    return PromptSet([Prompt(id=row.id, text=cast(str, row.user), set=row.set) if row.messages is None
                      else replace(message_prompt(row.id, row.messages, row.set), after=row.after)
                      for conversation in select(conversations, limit, seed) for row in conversation], dataset)


def describe_sets() -> list[tuple[str, int, str]]:
    """(name, number of prompts, description and license) of every bundled set, for `prompts list`."""
    return [(name, len(prompt_set(name)), f"{description}. License: {SET_LICENSES[name]}.")
            for name, description in PROMPT_SETS.items()]


def render_for_target(prompts: list[Prompt], tokenizer, enable_thinking: bool) -> list[str]:
    """The exact text each prompt sends to the target, after its chat template (for `prompts show`)."""
    return [chat_text(tokenizer, prompt, enable_thinking) for prompt in prompts]


def shard_prompts(prompts: list[Prompt], cost: dict[str, int], index: int, count: int) -> list[Prompt]:
    """Shard `index` of `count`, balanced by cost (prompt length + new tokens): longest first, each to the
    shard with the least cost so far (ties to the lower shard); deterministic, and in the prompts' order."""
    loads = [0] * count
    owner: dict[str, int] = {}
    for _position, prompt in sorted(enumerate(prompts), key=lambda item: (-cost[item[1].id], item[0])):
        target = min(range(count), key=lambda k: (loads[k], k))
        owner[prompt.id] = target
        loads[target] += cost[prompt.id]
    return [p for p in prompts if owner[p.id] == index]
