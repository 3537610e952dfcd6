"""Long-context prompts without downloads: a repository's source files (`repo:PATH`) or the Python
standard library's own sources (`stdlib`), packed into prompts of `--context-tokens N`.

The bundled sets never pass ~1K tokens of context, so no run could see a drafter fall away past a 2K
sliding window, or past 8K-32K. These sources reach any depth from files every machine has.

Packing, deterministic for the same files and tokenizer:
- files in a stated order: `prompts._source_files` (sorted by relative path, code extensions only, outside
  hidden and vendored folders; files that are not UTF-8 text are skipped). `stdlib`: the top-level `*.py`
  modules of this Python's standard library folder (`sysconfig`'s "stdlib" path), sorted by name; its set
  is named `stdlib:<python version>`, since the sources differ between versions;
- each prompt is one user message: `REPO_HEADER`, then whole files, each as a `### path` line and a
  fenced block, then the next file cut at a line boundary with its fence left open, so that the target
  continues that file's code; the user message holds at most N tokens of the target's tokenizer (the chat
  template adds its few tokens around it). The next prompt starts at the file after the cut one;
- id = `<set>/<k>:<path of the file it continues>`, set = `repo:<folder name>` or `stdlib:<version>`.

`--max-context` (`fit_context`): what to do when a prompt plus --max-new-tokens would pass the target's
max_position_embeddings: `refuse` (by name, before anything is written) or `truncate` (repo:/stdlib
only: the packing budget is lowered so that every prompt fits, and a warning says to what). The flags' rules
(--context-tokens >= 64 and only for these sources) are core/settings/run_settings.RunSettings.check's.
"""

from __future__ import annotations

import platform
import sysconfig
from pathlib import Path

from ..core.errors import InputError
from ..core.settings.run_settings import is_long_source
from ..core.settings.work import LongContext
from .prompts import CODE_EXTENSIONS, Prompt, PromptSet, source_files_under

REPO_HEADER = "Continue the last file of this repository.\n\n"
DEFAULT_CONTEXT_TOKENS = LongContext.DEFAULT_TOKENS


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def source_files(source: str) -> tuple[str, list[tuple[str, str, str]]]:
    """(set name, [(relative path, fence language, text)]) in packing order."""
    if source == "stdlib":
        folder = stdlib_dir()
        paths = sorted(p for p in folder.glob("*.py") if p.is_file())
        set_name = f"stdlib:{platform.python_version()}"
    else:
        folder = Path(source[len("repo:"):]).expanduser()
        if not folder.is_dir():
            raise InputError(folder, "no such directory (repo:PATH takes a folder of source files)")
        paths = source_files_under(folder)
        set_name = f"repo:{folder.resolve().name}"
    files = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if text.strip() and "\x00" not in text:
            files.append((path.relative_to(folder).as_posix(), CODE_EXTENSIONS.get(path.suffix.lower(), ""), text))
    if not files:
        raise InputError(folder, "no source files found (UTF-8 text with a code extension such as .py, .js, .go)")
    return set_name, files


def _fence(text: str) -> str:
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def _whole(path: str, lang: str, text: str) -> str:
    fence = _fence(text)
    return f"### {path}\n{fence}{lang}\n{text.rstrip(chr(10))}\n{fence}\n\n"


def _opened(path: str, lang: str, lines: list[str], keep: int) -> str:
    body = "".join(lines[:keep])
    return f"### {path}\n{_fence(''.join(lines))}{lang}\n{body}"


def pack(files: list[tuple[str, str, str]], context_tokens: int, count, set_name: str) -> list[Prompt]:
    """Prompts of at most `context_tokens` tokens (`count(text)`) of user message (module docstring)."""
    prompts: list[Prompt] = []
    index = 0
    while index < len(files):
        message = REPO_HEADER
        while index < len(files) and count(message + _whole(*files[index])) <= context_tokens:
            message += _whole(*files[index])
            index += 1
        if index >= len(files):
            break  # the rest fits whole: nothing left to continue
        path, lang, text = files[index]
        lines = text.splitlines(keepends=True)
        low, high = 0, len(lines)  # the most lines of the cut file that still fit
        while low < high:
            middle = (low + high + 1) // 2
            if count(message + _opened(path, lang, lines, middle)) <= context_tokens:
                low = middle
            else:
                high = middle - 1
        index += 1
        if low == 0:
            continue  # not one line of it fits after the whole files: the next prompt starts after it
        prompts.append(Prompt(id=f"{set_name}/{len(prompts)}:{path}", set=set_name,
                              text=message + _opened(path, lang, lines, low)))
    if not prompts:
        raise InputError(set_name, f"the files do not fill one prompt of --context-tokens {context_tokens} that "
                                   "ends inside a file; lower --context-tokens or add files")
    return prompts


def long_prompts(source: str, tokenizer, context_tokens: int | None) -> list[Prompt]:
    """`repo:PATH` or `stdlib`, packed with the target's tokenizer."""
    n = DEFAULT_CONTEXT_TOKENS if context_tokens is None else int(context_tokens)
    set_name, files = source_files(source)
    return pack(files, n, lambda text: len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]),
                set_name)


def fit_context(settings, limit: int | None, template_tokens: int) -> tuple[int, list[str]]:
    """(--context-tokens to pack with, warnings) under --max-context (its rules: RunSettings.check): with
    `truncate`, lowered so that the templated prompt plus --max-new-tokens fits the target's `limit`
    positions; `refuse` keeps it (the length check then refuses a prompt that does not fit, by name)."""
    wanted, max_new_tokens = settings.long_context.context_tokens, settings.inputs.max_new_tokens
    n = DEFAULT_CONTEXT_TOKENS if wanted is None else int(wanted)
    if settings.long_context.max_context == "truncate" and limit is not None:
        room = limit - max_new_tokens - template_tokens
        if room < n:
            return room, [f"--max-context truncate: prompts packed to {room} tokens (not {n}) so that prompt + "
                          f"--max-new-tokens {max_new_tokens} fit the target's {limit} positions"]
    return n, []


def run_prompts(settings, tokenizer, thinking: bool, target_path: Path, warnings: list[str]) -> PromptSet:
    """A run's prompts (`prepare_inputs`): repo:/stdlib packed here under --context-tokens and
    --max-context, every other source through `prompts.load_prompt_set`; --limit / --seed select either."""
    from ..model.target import max_positions
    from .prompts import load_prompt_set, prompt_ids, select

    given = settings.inputs
    if not is_long_source(given.prompts):
        return load_prompt_set(given.prompts, given.limit, given.seed, prompt_field=given.prompt_field)
    template = len(prompt_ids(tokenizer, Prompt(id="-", text=""), thinking))
    n, notes = fit_context(settings, max_positions(target_path), template)
    warnings.extend(notes)
    return PromptSet(select(long_prompts(given.prompts, tokenizer, n), given.limit, given.seed))
