"""The output contract of `dflash-eval run`: run.json, samples.jsonl, per_position.csv; their names, their
writers' primitives (atomic_write, append_text) and their readers (read_run_document, read_samples).

Other tools and our own checks read these files, so this module is their one definition. Counts are
stored; every ratio in run.json is recomputable from the counts it sits beside. What each field holds and
means is the TypedDicts' (core/documents/run_document.py, row_documents.py, doctor_document.py: a comment on
each field) and docs/result-documents.md, generated from them with the files that have no TypedDict
(core/documents/reference.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from .. import metrics as M
from ..errors import InputError
from .per_position import COUNTED_SLOTS, per_position_csv, per_position_splits_csv  # noqa: F401 - here too

if TYPE_CHECKING:
    from .run_document import DrafterDocument, RunDocument

SCHEMA_VERSION = 1
RUN_JSON = "run.json"
SAMPLES = "samples.jsonl"
PER_POSITION = "per_position.csv"
PER_POSITION_SPLITS = "per_position_splits.csv"
PARTIAL_JSON = "run.partial.json"  # run.json over the prompts done so far, while a run is unfinished
STATE = "run_state.json"  # resume bookkeeping: settings hash, completion flag


def atomic_write(path: Path, text: str) -> None:
    """Write beside, then rename: a crash never leaves a half-written result file. A write the system
    refuses (disk full, quota) removes its temporary file and is one line naming the file."""
    from ..errors import InputError

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise InputError(path, f"cannot write: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


def append_text(path: Path, text: str) -> None:
    """Append to a file (rows of a run or a track, log lines); a write the system refuses is one line naming
    the file, like atomic_write."""
    from ..errors import InputError

    try:
        with Path(path).open("a", encoding="utf-8") as sink:
            sink.write(text)
            sink.flush()
    except OSError as exc:
        raise InputError(path, f"cannot write: {exc.strerror or exc}") from None


def _marginal_or_empty(counts: M.AcceptanceCounts) -> list[float | None]:
    """Live runs score only the walk, not every anchor: no marginal there (an empty list, not an error)."""
    return M.marginal(counts) if any(counts.marginal_total) else []


def metrics_summary(counts: M.AcceptanceCounts, *, seed: int = 0) -> dict[str, Any]:
    """Every number shown for a drafter, from its counts (divide last)."""
    if not counts.steps:
        return {"steps": 0, "tau_macro": None, "tau_micro": None, "tau_macro_ci": None,
                "tau_macro_ci_note": "n/a (no steps: every continuation ended at once)", "reach": [],
                "conditional": [], "marginal": _marginal_or_empty(counts),
                "histogram": counts.accept_length_histogram, "token_acceptance_rate": None}
    prompts = len(counts.per_prompt)
    ci = (M.bootstrap_tau_ci(counts, n_resamples=2000, seed=seed, kind="macro")
          if prompts >= M.MIN_PROMPTS_FOR_INTERVAL else None)
    return {
        "tau_macro": M.tau_macro(counts),
        "tau_micro": M.tau_micro(counts),
        "tau_macro_ci": [ci.low, ci.high] if ci else None,
        "tau_macro_ci_note": None if ci else f"n/a (n = {prompts} < {M.MIN_PROMPTS_FOR_INTERVAL} prompts)",
        "steps": M.steps(counts),
        "reach": M.reach(counts, denominator="all"),
        "conditional": M.conditional(counts, denominator="all"),
        "marginal": _marginal_or_empty(counts),
        "histogram": list(counts.accept_length_histogram),
        "token_acceptance_rate": M.token_acceptance_rate(counts),
        "slot_counts": M.slot_fractions(counts),
    }


def read_samples(path: Path, *, torn_tail: str = "refuse", row_type: Any = None) -> list[dict[str, Any]]:
    """The rows of a samples (or track) file, each a JSON object on its own line; a line that is not is one
    InputError naming the file and the line, and so is a row given twice (same prompt, drafter, sample).
    `row_type` (row_documents.SampleRow, TrackRow): each row is checked against it, a field of another type
    refused as "line N.FIELD: expected ..." (json_types.check_json).

    `torn_tail`: what a last line cut mid-write (no newline, not JSON: a run killed while appending) does:
    "refuse" (a finished run's file was damaged after the fact) or "drop" (resume and --partial readers:
    that prompt is redone or not shown yet). A missing file is no rows; readers that need rows say so."""
    from ..errors import InputError, read_bytes
    from ..jsonl import jsonl_rows

    path = Path(path)
    if not path.exists():
        return []
    try:
        text = read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"is not UTF-8 text (byte {exc.start}); edited or damaged?") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    rows: list[dict[str, Any]] = []
    first: dict[str, int] = {}  # the row's (prompt, drafter, sample) as JSON -> its line
    for number, row in jsonl_rows(text, path, torn_tail=torn_tail):  # core/jsonl.py: its one wording
        if row_type is not None:
            from .json_types import check_json

            check_json(row, row_type, path, f"line {number}")
        if "prompt_id" in row:
            key = json.dumps([row.get("prompt_id"), row.get("drafter"), row.get("sample") or 0])
            if key in first:
                sample = f" sample {row['sample']!r}" if row.get("sample") else ""
                raise InputError(path, f"line {number} repeats prompt {row['prompt_id']!r} of drafter "
                                       f"{row.get('drafter')!r}{sample} (first on line {first[key]}); two runs wrote "
                                       "into one folder, or it was edited")
            first[key] = number
        rows.append(row)
    return rows


def incomplete_message(directory: Path) -> str:
    """'incomplete: k of n prompts; ...' for a run folder that was interrupted before run.json was written."""
    try:
        state = json.loads((directory / STATE).read_text())
    except (OSError, json.JSONDecodeError):
        state = {}
    total = len((state.get("settings") or {}).get("prompts") or []) or "?"
    done: int | str
    try:
        done = len({str(row.get("prompt_id")) for row in read_samples(directory / SAMPLES, torn_tail="drop")})
    except Exception:  # a damaged file still gets the message; its reader names the damage
        done = "?"
    return (f"incomplete run: {done} of {total} prompts done; rerun the same `dflash-eval run` command to "
            "finish it")


def read_run_document(directory: Path, *, partial: bool = False) -> RunDocument:
    """run.json as a RunDocument (core/documents/run_document.py: every declared field of its declared type, or one
    InputError naming the file and the field); with `partial`, an unfinished run's run.partial.json (its
    `incomplete` field says how far it got, and renderers show a banner) when there is no run.json yet."""
    from ..errors import InputError

    path = directory / RUN_JSON
    if not path.exists() and (directory / STATE).is_file():
        if not partial or not (directory / PARTIAL_JSON).is_file():
            raise InputError(directory, incomplete_message(directory)
                             + ("" if partial or not (directory / PARTIAL_JSON).is_file()
                                else " (or add --partial to see the prompts done so far)"))
        path = directory / PARTIAL_JSON
    from ..errors import loads, read_text

    try:
        data = loads(read_text(path))
    except UnicodeDecodeError as exc:
        raise InputError(path, f"is not UTF-8 text (byte {exc.start})") from None
    except OSError:
        raise InputError(directory, "not a dflash-eval run directory (no run.json)") from None
    except ValueError as exc:
        raise InputError(path, f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(path, f"is not a run document (a JSON {type(data).__name__}, expected an object)")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise InputError(path, f"schema_version {data.get('schema_version')!r} is not {SCHEMA_VERSION}")
    from .invariants import check_run_document
    from .json_types import check_json
    from .run_document import RunDocument

    check_json(data, RunDocument, path)  # the types, field by field
    check_run_document(data, path)  # the numbers a run document must satisfy
    return cast(RunDocument, data)  # check_json has just checked it field by field


def drafter_named(run: RunDocument, run_dir: Path, name: str | None, ask: str) -> DrafterDocument:
    """The run document's entry for drafter `name`; without a name the run must hold exactly one drafter.
    Refused by name otherwise (`ask` says how to name one: "say which with --drafter-name NAME")."""
    names = [d["name"] for d in run["drafters"]]
    if name is None:
        if len(names) != 1:
            raise InputError(run_dir, f"holds {len(names)} drafters ({', '.join(names)}): {ask}")
        name = names[0]
    if name not in names:
        raise InputError(run_dir, f"no drafter {name!r} in this run (drafters: {', '.join(names)})")
    return next(d for d in run["drafters"] if d["name"] == name)
