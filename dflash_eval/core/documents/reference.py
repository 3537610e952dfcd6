"""docs/result-documents.md, written from the TypedDicts themselves (tests/test_documents.py checks that the
page is what this writes now): the schema a reader checks and the page a person reads cannot drift.

Regenerate: python -m dflash_eval.core.documents.reference > docs/result-documents.md
"""

from __future__ import annotations

import inspect
import types
import typing

from .json_types import describe, field_types, is_typeddict, required_keys, strip_required

HEADER = """# Result documents: the schema of each file

Generated from the TypedDicts the readers check every file against (`dflash_eval/core/documents.py`,
`core/documents/row_documents.py`, `core/documents/doctor_document.py`; the checker is `core/documents/json_types.py`). A file that does not
match is refused when it is read, as one line naming the file and the field
(`run.json: drafters[1].metrics.tau_macro is not a number or null (found a string); ...`); what each field
means is in [results.md](results.md) and `core/documents/results.py`. Keys a class does not list are passed through
unchecked (a newer writer may add fields). Regenerate with
`python -m dflash_eval.core.documents.reference > docs/result-documents.md`.

| file | its type |
|------|----------|
| `run.json`, `run.partial.json` | `RunDocument` |
| `samples.jsonl` (each line) | `SampleRow` |
| `track.jsonl` (each line) | `TrackRow` |
| `doctor.json`, run.json's `doctor` | `DoctorDocument` |
"""


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


def reference() -> str:
    from .doctor_document import DoctorDocument
    from .row_documents import SampleRow, TrackRow
    from .run_document import RunDocument

    parts = [HEADER]
    done: set[type] = set()
    for root in (RunDocument, SampleRow, TrackRow, DoctorDocument):
        for cls in _classes(root):
            if cls in done:
                continue
            done.add(cls)
            doc = inspect.getdoc(cls) or ""
            doc = "" if doc.startswith(f"{cls.__name__}(") else doc  # TypedDict's own placeholder
            parts.append(f"\n## {cls.__name__}\n\n`{cls.__module__.removeprefix('dflash_eval.')}.{cls.__name__}`"
                         + (f": {' '.join(doc.split())}" if doc else "") + "\n\n| field | type | required |\n|---|---|---|\n")
            for key, annotation in field_types(cls).items():
                required = "yes" if key in required_keys(cls) else ""
                parts.append(f"| `{key}` | {_name(annotation)} | {required} |\n")
    return "".join(parts)


if __name__ == "__main__":
    print(reference(), end="")
