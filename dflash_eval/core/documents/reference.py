"""docs/result-documents.md, written from the TypedDicts themselves (tests/test_documents.py checks that the
page is what this writes now): the schema a reader checks and the page a person reads cannot drift.

A field's meaning is the comment on the line(s) just above it in its TypedDict (`field_meanings` reads them from
the source); tests/test_documents.py refuses a field without one, so a new field is typed and explained in one
place. The files we write without a TypedDict (CSV, the folder's bookkeeping) are described in OTHER_FILES.

Regenerate: python -m dflash_eval.core.documents.reference > docs/result-documents.md
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
import typing

from .json_types import describe, field_types, is_typeddict, required_keys, strip_required

HEADER = """# Result documents: the schema of each file

Generated from the TypedDicts the readers check every file against (`core/documents/run_document.py`,
`core/documents/row_documents.py`, `core/documents/doctor_document.py`; the checker is
`core/documents/json_types.py`); each field's meaning is the comment on it there. A file that does not
match is refused when it is read, as one line naming the file and the field
(`run.json: drafters[1].metrics.tau_macro is not a number or null (found a string); ...`); how to read the
numbers is in [results.md](results.md). Counts are stored; every ratio in run.json is recomputable from the
counts it sits beside. Keys a class does not list are passed through unchecked (a newer writer may add
fields). Regenerate with `python -m dflash_eval.core.documents.reference > docs/result-documents.md`.

| file | its type |
|------|----------|
| `run.json`, `run.partial.json` | `RunDocument` |
| `samples.jsonl` (each line) | `SampleRow` |
| `track.jsonl` (each line) | `TrackRow` |
| `doctor.json`, run.json's `doctor` | `DoctorDocument` |
"""

OTHER_FILES = """
## Other files

| file | what it holds |
|------|---------------|
| `per_position.csv` | one row per drafter only: drafter, tau_macro, tau_micro, speculators' acceptance_at_pos_{i} (reach, all-steps denominator), conditional_at_pos_{i}, marginal_at_pos_{i} for i = 1..B-1 |
| `per_position_splits.csv` | the same after drafter, split, part; a row per part with walk steps: "draft_length" (each shorter k), "depth" (bucket, 1K-2K), "segment", "token_class" (breakdown.split_parts); or no file |
| `written.json` | every file dflash-eval wrote into the folder (run_folder.py): all `--overwrite` removes |
| `run.lock` | the lock (filelock) the writing process holds; a second writer is refused by name |
| `run_state.json` | resume bookkeeping: the settings' hash, the completion flag |
| `track_log.jsonl` | (track folder, pipeline/track_folder.py) one event per line: {"time", "event", ...}; "incomplete" / "waiting" / "invalid" (path, name, step, detail) for checkpoints not evaluated at a poll, "batch" (number, drafters, prompts, target_passes, continuations_generated) for each batch evaluated together |
| `track.csv` | (track folder) per_position.csv's columns, one row per track.jsonl row, after role, step, tau_macro_ci_low, tau_macro_ci_high, repetition_share, fingerprint, path; with --draft-lengths one tau_macro_at_k_K column per draft length after them, with --tree-budgets one tau_macro_at_tree_B per budget |
| `track_state.json` | (track folder) the track's settings (all but the checkpoints) and their digest |
"""


def field_meanings(cls: type) -> dict[str, str]:
    """Each field of TypedDict `cls` -> the comment on the line(s) just above it in the class's source (its
    meaning; "" where a field has none, which tests/test_documents.py refuses)."""
    lines = textwrap.dedent(inspect.getsource(cls)).splitlines()
    meanings: dict[str, str] = {}
    class_def = ast.parse("\n".join(lines)).body[0]
    assert isinstance(class_def, ast.ClassDef), f"{cls.__name__} is not a class"
    for statement in class_def.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            above = statement.lineno - 2  # ast counts lines from 1
            comment: list[str] = []
            while above >= 0 and lines[above].strip().startswith("#"):
                comment.insert(0, lines[above].strip().removeprefix("#").strip())
                above -= 1
            meanings[statement.target.id] = " ".join(comment)
    return {key: meanings.get(key, "") for key in field_types(cls)}


def _cell(text: str) -> str:
    """A meaning inside a markdown table cell: a pipe would end the cell."""
    return text.replace("|", "\\|")


def _name(annotation) -> str:
    """A field's type as the page shows it: a class by its name (linked), else the checker's words."""
    annotation = strip_required(annotation)
    if is_typeddict(annotation):
        return f"[`{annotation.__name__}`](#{annotation.__name__.lower()})"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_name(a) for a in args)
    if origin in (list, tuple) and args:
        return f"list of {_name(args[0])}"
    if origin is dict and len(args) == 2:
        return f"object of {_name(args[1])}"
    return describe(annotation)


def _classes(root) -> list[type]:
    """`root` and every TypedDict it reaches, in the order first met."""
    seen: list[type] = []

    def visit(annotation):
        annotation = strip_required(annotation)
        if is_typeddict(annotation):
            if annotation in seen:
                return
            seen.append(annotation)
            for child in field_types(annotation).values():
                visit(child)
        for arg in typing.get_args(annotation):
            visit(arg)

    visit(root)
    return seen


def document_types() -> list[type]:
    """Every TypedDict a file we write is checked against, in the page's order: reached from the four roots."""
    from .doctor_document import DoctorDocument
    from .row_documents import SampleRow, TrackRow
    from .run_document import RunDocument

    return list(dict.fromkeys(cls for root in (RunDocument, SampleRow, TrackRow, DoctorDocument)
                              for cls in _classes(root)))


def reference() -> str:
    parts = [HEADER]
    for cls in document_types():
        doc = inspect.getdoc(cls) or ""
        doc = "" if doc.startswith(f"{cls.__name__}(") else doc  # TypedDict's own placeholder
        parts.append(f"\n## {cls.__name__}\n\n`{cls.__module__.removeprefix('dflash_eval.')}.{cls.__name__}`"
                     + (f": {' '.join(doc.split())}" if doc else "")
                     + "\n\n| field | type | required | meaning |\n|---|---|---|---|\n")
        meanings = field_meanings(cls)
        for key, annotation in field_types(cls).items():
            required = "yes" if key in required_keys(cls) else ""
            parts.append(f"| `{key}` | {_name(annotation)} | {required} | {_cell(meanings[key])} |\n")
    parts.append(OTHER_FILES)
    return "".join(parts)


if __name__ == "__main__":
    print(reference(), end="")
