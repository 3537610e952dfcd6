"""A run folder's rows checked against its run.json before anything is computed or shown from them.

Why: `run.json` is computed from `samples.jsonl`, and `report`, `show`, `diff`, `merge` and `read_run()`
recompute from the rows. Each row's own numbers are checked here too (core/documents/invariants.py), and a finished
run's counts against the rows' sum, so every reader refuses the same rows with the same line. Rows written twice (two processes in one folder), cut (a torn or truncated file),
edited, or of a drafter or prompt the run does not have would give other numbers than run.json in silence,
so each is refused by name: the file, the line or the prompt and drafter, and what is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from ..errors import InputError
from .invariants import check_samples_row
from .results import SAMPLES, read_samples
from .row_documents import SampleRow
from .run_document import DrafterDocument, RunDocument


def check_rows(run: RunDocument, rows: list[SampleRow], path: Path, *, partial: bool = False) -> None:
    """Refuse, by name, a samples file that does not hold exactly the rows run.json was computed from: a
    drafter without rows, a row of a drafter or prompt run.json does not have, a prompt one drafter lacks,
    fewer prompts than run.json counts, a sample missing at temperature > 0. `partial` (an unfinished run,
    still being appended to): only rows of unknown drafters are refused."""

    drafters = run.get("drafters")
    if not isinstance(drafters, list):
        return  # run.json's own shape is the schema reader's to refuse (read_run_document checks it against core/documents.RunDocument)
    names = [d.get("name") for d in drafters if isinstance(d, dict) and isinstance(d.get("name"), str)]
    by_drafter: dict[str, dict[str, set]] = {name: {} for name in names}
    blocks = {d["name"]: (d.get("spec") or {}).get("block_size") for d in drafters
              if isinstance(d, dict) and d.get("name") in by_drafter and isinstance(d.get("spec"), dict)}
    provenance = run.get("provenance")
    # a plain dict, read forgivingly: the schema reader refuses a wrong shape, this reader only the rows
    prov: dict[str, Any] = cast(dict[str, Any], provenance) if isinstance(provenance, dict) else {}
    pieces: dict[int, tuple[str, str]] = {}  # token id -> (its piece, where it was first seen)
    for row in rows:
        if not isinstance(row.get("drafter"), str) or row["drafter"] not in by_drafter:
            raise InputError(path, f"holds a row of drafter {row.get('drafter')!r}, which run.json does not have")
        check_samples_row(row, path, block_size=blocks.get(row["drafter"]))  # the numbers a row must satisfy
        check_row_settings(row, prov, path)
        check_pieces(row, pieces, path)
        by_drafter[row["drafter"]].setdefault(str(row.get("prompt_id")), set()).add(str(row.get("sample") or 0))
    if partial:
        return
    expected = (prov.get("prompts") or {}).get("count")
    samples = (prov.get("sampling") or {}).get("samples", 1) if (prov.get("temperature") or 0) > 0 else 1
    union = set().union(*(set(p) for p in by_drafter.values())) if by_drafter else set()
    for name, prompts in by_drafter.items():
        if not prompts and expected != 0:  # a shard may hold no prompt at all (--shard 1/2 --limit 1)
            raise InputError(path, f"has no rows for drafter {name!r} (run.json has it)")
        lacking = sorted(map(str, union - set(prompts)))
        if lacking:
            raise InputError(path, f"has no row for prompt {lacking[0]!r} of drafter {name!r} ({len(lacking)} missing)")
        for pid, got in prompts.items():
            if got != {str(k) for k in range(samples if isinstance(samples, int) else 1)}:
                raise InputError(path, f"prompt {pid!r} of drafter {name!r} has samples {sorted(got)}, run.json "
                                       f"says {samples} per prompt")
    if isinstance(expected, int) and names and len(union) != expected:
        raise InputError(path, f"holds rows for {len(union)} prompts, run.json counts {expected}; the file was "
                               "cut or edited after the run")
    check_totals(drafters, rows, path)


def _where(row) -> str:
    sample = f" sample {row.get('sample')}" if row.get("sample") else ""
    return f"the row of prompt {row.get('prompt_id')!r}, drafter {row.get('drafter')!r}{sample}"


def check_row_settings(row: SampleRow, prov: dict, path: Path) -> None:
    """A row against the settings run.json says made it: a generated continuation is at most
    --max-new-tokens long; a live run's rows are live walks (timed steps), an offline run's replays (per-anchor
    counts or estimates); a sampled run's rows carry their sample index, a greedy run's none. A
    `provenance.max_new_tokens` (or mode, or temperature) the rows contradict was edited: refused by name."""
    problem = None
    cap = prov.get("max_new_tokens")
    generated = str(prov.get("continuations") or "generated").split(":")[0] in ("generated", "sampled (K per prompt)")
    if generated and isinstance(cap, int) and isinstance(row.get("continuation_len"), int) and row["continuation_len"] > cap:
        problem = f"its continuation has {row['continuation_len']} tokens, more than max_new_tokens {cap}"
    mode = prov.get("mode")
    live = "step_seconds" in row
    if mode in ("live", "trajectory") and live != (mode == "live"):
        problem = f"it is {'a live walk' if live else 'an offline replay'}, run.json says mode {mode!r}"
    sampled = (prov.get("temperature") or 0) > 0
    if isinstance(prov.get("temperature"), (int, float)) and ("sample" in row) != sampled:
        problem = (f"it {'carries' if 'sample' in row else 'lacks'} a sample index, run.json says temperature "
                   f"{prov['temperature']}")
    if problem:
        raise InputError(path, f"{_where(row)}: {problem}; run.json or the rows were edited")


def check_pieces(row: SampleRow, seen: dict[int, tuple[str, str]], path: Path) -> None:
    """Each token id is shown as one piece across the whole run (pieces are each id decoded alone by the run's
    tokenizer: pipeline/rows.piece_decoder): an edited piece, shown as the target's text, is refused where it
    disagrees with the same id elsewhere."""
    pairs = [(row.get("continuation_ids"), row.get("continuation_pieces"))]
    pairs += list(zip(row.get("walk_drafts") or [], row.get("walk_draft_pieces") or []))
    for ids, texts in pairs:
        if not isinstance(ids, list) or not isinstance(texts, list):
            continue
        if len(ids) != len(texts):
            raise InputError(path, f"{_where(row)}: {len(ids)} token ids but {len(texts)} pieces; the file was edited")
        for token, text in zip(ids, texts):
            first = seen.setdefault(token, (text, _where(row)))
            if first[0] != text:
                raise InputError(path, f"{_where(row)}: token {token} is shown as {text!r}, {first[1]} as "
                                       f"{first[0]!r}; the pieces were edited (each id has one decoded piece)")


def check_totals(drafters: list[DrafterDocument], rows: list[SampleRow], path: Path) -> None:
    """Each counted drafter's run.json counts are its rows' counts added up (a prompt's samples pooled)."""
    from .. import metrics as M

    for d in drafters:
        drafter_counts = d.get("counts") if isinstance(d, dict) else None
        if not isinstance(drafter_counts, dict):
            continue
        per_prompt: dict[str, M.AcceptanceCounts] = {}
        for row in rows:
            if row["drafter"] == d["name"] and isinstance(row.get("counts"), dict):
                counts = M.AcceptanceCounts.from_dict(row["counts"])
                pid = str(row["prompt_id"])
                per_prompt[pid] = M.pool_samples(per_prompt[pid], counts) if pid in per_prompt else counts
        total = M.AcceptanceCounts(block_size=drafter_counts.get("block_size", 2))
        for counts in per_prompt.values():
            total = total + counts
        if total.to_dict() != drafter_counts:
            wrong = next(k for k, v in total.to_dict().items() if drafter_counts.get(k) != v)
            raise InputError(path, f"the rows of drafter {d['name']!r} add up to other counts than run.json's "
                                   f"({wrong}); one of the two files was edited or damaged")


def run_rows(directory: Path | str, run: RunDocument) -> list[SampleRow]:
    """The samples rows of a run folder, checked against its run.json (`check_rows`): what `report`, `show`,
    `diff`, `merge` and `read_run()` compute from. An unfinished run (`incomplete`) may end in a torn line."""

    path = Path(directory) / SAMPLES
    if not path.exists():
        raise InputError(path, "is missing: the run's rows are gone (run.json alone cannot show blocks)")
    partial = bool(run.get("incomplete"))
    # read_samples has checked every row against SampleRow (check_json): the cast is that check
    rows = cast(list[SampleRow], read_samples(path, torn_tail="drop" if partial else "refuse", row_type=SampleRow))
    check_rows(run, rows, path, partial=partial)
    return rows
