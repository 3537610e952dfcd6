"""Prompt sources from the local Hugging Face cache: the paper's named sets (`gsm8k`, `math500`, `aime24`,
`aime25`, `livecodebench`, `swe-bench`, `mt-bench`, `alpaca`), their `paper:NAME` draws, and any dataset as
`hf:REPO[:CONFIG][:SPLIT][@REVISION]` with `--prompt-field`.

Why a module: `prompts.load_prompts` turns what this returns into `Prompt`s. It returns conversations of
`PromptRow`s (one per user turn), so that a selection (`--limit`, `--seed`) takes whole conversations, as
z-lab's `--max-samples` takes dataset rows.

- A named set: `formats/benchmark_sets.py` says where its rows are and how a row becomes user turns (as
  z-lab's benchmark code builds them); ids are "<set>/<dataset id>" (math500 `unique_id`, aime24 `id`,
  aime25 `problem_idx`, livecodebench `question_id`, swe-bench `instance_id`, mt-bench `prompt_id`), or
  "<set>/<row index>" (gsm8k, alpaca, or when a dataset's ids repeat); the prompt set is the plain name, so
  the paper's tau is found for it. mt-bench is multi-turn: turn k > 1 ("mt-bench/81/2") follows the
  target's own greedy answer to turn k - 1 (`after`), filled in when the run starts (pipeline/turns.py).
- `paper:NAME`: only the rows the paper evaluated (benchmark_sets.`paper_indices`), set name NAME.
- `hf:...`: our format, stated here: the column `--prompt-field` names (default: the only one of
  `DEFAULT_FIELDS` the dataset has) holds a string (one user message), a list of strings (the user turns of a
  multi-turn conversation, as mt-bench) or a list of {"role", "content"} messages (a conversation, cut after
  its last user message, the turn the target answers); config and split as `formats/hf_cache.data_files`
  resolves them; ids "hf:REPO:CONFIG:SPLIT/<row index>", the set that same name.

`benchmark_conversations` also returns what run.json records of the data (repo, revision, config, split,
files, field, where the construction comes from, the draw): the run's inputs carry it (pipeline/inputs.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import InputError
from ..core.settings.inputs import InputSettings
from ..formats import hf_cache
from ..formats.benchmark_sets import BENCHMARK_SETS, PAPER_DRAW, PAPER_ROWS, BenchmarkSet, paper_indices

ANSWER_PLACEHOLDER = "[the target's own greedy answer to {id}, filled in when the run starts]"
DEFAULT_FIELDS = ("prompt", "messages", "question", "problem", "instruction", "text")


@dataclass(frozen=True)
class PromptRow:
    """One user turn: its message (`user`), or a whole conversation (`messages`, ending with a user turn).
    A later turn of a multi-turn set has both: `messages` is the conversation so far with
    `ANSWER_PLACEHOLDER` where the target's answers go, and `after` the id of the turn answered last."""

    id: str
    set: str
    user: str | None = None
    messages: tuple[dict, ...] | None = None
    after: str | None = None


def is_benchmark_source(source: str) -> bool:
    return source in BENCHMARK_SETS or source.startswith(("hf:", "paper:"))


def _turn_rows(set_name: str, key: str, turns: list[str], origin) -> list[PromptRow]:
    if not turns or not all(isinstance(t, str) and t for t in turns):
        raise InputError(origin, f"row {key}: every user turn must be a non-empty string")
    if len(turns) == 1:
        return [PromptRow(f"{set_name}/{key}", set_name, user=turns[0])]
    ids = [f"{set_name}/{key}/{k}" for k in range(1, len(turns) + 1)]
    rows = [PromptRow(ids[0], set_name, user=turns[0])]
    messages: tuple[dict, ...] = ({"role": "user", "content": turns[0]},)
    for k in range(1, len(turns)):
        messages += ({"role": "assistant", "content": ANSWER_PLACEHOLDER.format(id=ids[k - 1])},
                     {"role": "user", "content": turns[k]})
        rows.append(PromptRow(ids[k], set_name, user=turns[k], messages=messages, after=ids[k - 1]))
    return rows


def _keys(rows: list[dict], column: str | None, indices: list[int]) -> list[str]:
    """Each row's id within its set: the dataset's own id when those are unique, else the row index."""
    if column is not None:
        values = [str(row[column]) for row in rows]
        if len(set(values)) == len(values) and all(values):
            return values
    return [str(i) for i in indices]


def _named(benchmark: BenchmarkSet, paper: bool) -> tuple[list[list[PromptRow]], dict]:
    snapshot = hf_cache.find_snapshot(benchmark.repo, files=benchmark.files)
    if benchmark.files:
        missing = [f for f in benchmark.files if not (snapshot.folder / f).is_file()]
        if missing:
            raise InputError(snapshot.folder / missing[0], f"missing from the cached snapshot; {benchmark.download()}")
        config, split, files = None, None, list(benchmark.files)
    else:
        config, split, files = hf_cache.data_files(snapshot, benchmark.config, benchmark.split)
    keep = None
    if paper:
        keep = paper_indices(hf_cache.count_rows(snapshot, files), benchmark.paper_rows)
    rows = hf_cache.read_rows(snapshot, files, benchmark.columns, set(keep) if keep is not None else None,
                              benchmark.optional)
    indices = keep if keep is not None else list(range(len(rows)))
    origin = f"hf:{benchmark.repo}"
    conversations = [_turn_rows(benchmark.name, key, benchmark.turns(row), origin)
                     for key, row in zip(_keys(rows, benchmark.id_column, indices), rows)]
    return conversations, {
        "repo": benchmark.repo, "revision": snapshot.revision, "config": config, "split": split, "files": files,
        "columns": list(benchmark.columns), "construction": benchmark.origin,
        "draw": PAPER_DRAW + f" (N = {benchmark.paper_rows})" if paper else None}


def parse_hf_source(source: str) -> tuple[str, str | None, str | None, str | None]:
    """"hf:ORG/NAME[:CONFIG][:SPLIT][@REVISION]" -> (repo, config, split, revision). With one name after the
    repo it is the config when the card declares it, else the split (`_resolve_one`)."""
    body, _, revision = source[len("hf:"):].partition("@")
    parts = body.split(":")
    if not parts[0] or len(parts) > 3 or any(p == "" for p in parts[1:]):
        raise InputError(source, "expected hf:ORG/NAME[:CONFIG][:SPLIT][@REVISION]")
    return parts[0], parts[1] if len(parts) > 1 else None, parts[2] if len(parts) > 2 else None, revision or None


def _field_of(columns: list[str], field: str | None, origin: str) -> str:
    if field is not None:
        if field not in columns:
            raise InputError(origin, f"--prompt-field {field!r}: no such column (columns: {', '.join(columns)})")
        return field
    present = [c for c in DEFAULT_FIELDS if c in columns]
    if len(present) != 1:
        raise InputError(origin, f"name the column that holds the prompt with --prompt-field (columns: {', '.join(columns)})")
    return present[0]


def _as_turns(value, key: str, set_name: str, field: str, origin: str) -> list[PromptRow]:
    where = f"row {key}, column {field!r}"
    if isinstance(value, str):
        return _turn_rows(set_name, key, [value], origin)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return _turn_rows(set_name, key, list(value), origin)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, dict) for v in value):
        if not all(isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value):
            raise InputError(origin, f'{where}: messages must be {{"role", "content"}} objects with string values')
        users = [i for i, m in enumerate(value) if m["role"] == "user"]
        if not users:
            raise InputError(origin, f"{where}: the conversation has no user message")
        messages = tuple({"role": m["role"], "content": m["content"]} for m in value[:users[-1] + 1])
        return [PromptRow(f"{set_name}/{key}", set_name, messages=messages)]
    raise InputError(origin, f"{where}: expected a string, a list of strings (user turns) or a list of "
                             f"{{\"role\", \"content\"}} messages, got {type(value).__name__}")


def _generic(source: str, field: str | None) -> tuple[list[list[PromptRow]], dict]:
    repo, config, split, revision = parse_hf_source(source)
    snapshot = hf_cache.find_snapshot(repo, revision)
    if config is not None and split is None and config not in hf_cache.configs(snapshot):
        config, split = None, config  # hf:REPO:SPLIT on a card without that config
    config, split, files = hf_cache.data_files(snapshot, config, split)
    field = _field_of(hf_cache.columns_of(snapshot.folder / files[0]), field, source)
    rows = hf_cache.read_rows(snapshot, files, (field,))
    if not rows:
        raise InputError(source, f"config {config!r} split {split!r} has no rows")
    set_name = f"hf:{repo}:{config}:{split}"
    conversations = [_as_turns(row[field], str(index), set_name, field, source) for index, row in enumerate(rows)]
    return conversations, {"repo": repo, "revision": snapshot.revision, "config": config, "split": split,
                           "files": files, "field": field, "construction": "dflash-eval hf: (pipeline/hf_prompts.py)",
                           "draw": None}


def benchmark_conversations(source: str, field: str | None = None) -> tuple[list[list[PromptRow]], dict]:
    """The conversations of a named set, a `paper:` draw or an `hf:` dataset, each a list of PromptRows, and
    what run.json records of the data (repo, revision, config, split, files, field, construction, draw)."""
    InputSettings(prompts=source, prompt_field=field).check()  # --prompt-field: hf: only (core/settings/inputs.py)
    if source.startswith("hf:"):
        return _generic(source, field)
    name = source.removeprefix("paper:")
    if name not in BENCHMARK_SETS:
        raise InputError(source, f"the paper's table has no set {name!r} (paper: {', '.join(PAPER_ROWS)})")
    return _named(BENCHMARK_SETS[name], paper=source != name)


def availability() -> list[tuple[str, str, str | None, str]]:
    """(name, repo, cached revision or None, the `hf download` command) of each named set on this machine,
    for `prompts list`; nothing is read beyond the snapshot's refs and card."""
    out: list[tuple[str, str, str | None, str]] = []
    for name, benchmark in BENCHMARK_SETS.items():
        try:
            snapshot = hf_cache.find_snapshot(benchmark.repo, files=benchmark.files)
            if benchmark.files:
                missing = [f for f in benchmark.files if not (snapshot.folder / f).is_file()]
                if missing:
                    raise InputError(None, f"{missing[0]} missing")
            else:
                hf_cache.data_files(snapshot, benchmark.config, benchmark.split)
            out.append((name, benchmark.repo, snapshot.revision, benchmark.download()))
        except InputError:
            out.append((name, benchmark.repo, None, benchmark.download()))
    return out
