"""Typed run documents (issue 35): each file dflash-eval writes is read back into its TypedDict, checked field
by field (core/documents/json_types.py); a malformed file is one line naming the file and the field (exit 2), and a bug
in our code is a bug (exit 1, traceback saved), never reported as the user's edit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.core.documents.json_types import check_json
from dflash_eval.core.errors import InputError

runner = CliRunner()
REPORT_RUN = Path(__file__).parent / "data" / "report_run"
DOCS = Path(__file__).resolve().parents[1] / "docs"


class Inner(TypedDict):
    n: int
    share: float | None


class Outer(TypedDict):
    name: str
    mode: Literal["trajectory", "live"]
    parts: list[Inner]
    by_set: NotRequired[dict[str, Inner]]
    extra: NotRequired[Any]


GOOD = {"name": "a", "mode": "live", "parts": [{"n": 1, "share": 0.5}, {"n": 2, "share": None}],
        "by_set": {"x": {"n": 3, "share": 1}}, "unlisted": [1, "passes through"]}


def refusal(value) -> str:
    with pytest.raises(InputError) as caught:
        check_json(value, Outer, "f.json")
    return caught.value.one_line()


def test_a_document_of_the_declared_types_is_accepted():
    check_json(GOOD, Outer, "f.json")  # an int is a number; an unlisted key passes through
    check_json({k: v for k, v in GOOD.items() if k != "by_set"}, Outer, "f.json")  # NotRequired


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("name"), "f.json: name is missing"),
    (lambda d: d.update(name=3), "f.json: name is not a string (found an integer)"),
    (lambda d: d.update(mode="replay"), "f.json: mode is not 'trajectory' or 'live' (found a string)"),
    (lambda d: d["parts"][1].update(n=True), "f.json: parts[1].n is not an integer (found true or false)"),
    (lambda d: d["parts"][0].update(n=1.5), "f.json: parts[0].n is not an integer (found a number)"),
    (lambda d: d["parts"][0].update(share="1"), "f.json: parts[0].share is not a number or null (found a string)"),
    (lambda d: d["by_set"]["x"].pop("share"), "f.json: by_set.x.share is missing"),
    (lambda d: d.update(parts={}), "f.json: parts is not a list (found an object)"),
    (lambda d: d["parts"][0].update(share=float("inf")), "f.json: parts[0].share is inf, not a finite number"),
])
def test_a_field_of_another_type_is_one_line_naming_the_file_and_the_field(edit, message):
    document = json.loads(json.dumps(GOOD))
    edit(document)
    assert refusal(document).startswith(message)


def test_the_whole_document_of_another_type_is_named_too():
    assert refusal([GOOD]).startswith("f.json: the document is not an object (found a list)")


def _folder(tmp_path) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(REPORT_RUN, folder)
    return folder


def test_an_edited_run_json_field_is_refused_by_report_naming_it(tmp_path):
    folder = _folder(tmp_path)
    run = json.loads((folder / "run.json").read_text())
    run["drafters"][1]["spec"]["block_size"] = "4"
    (folder / "run.json").write_text(json.dumps(run))
    result = runner.invoke(app, ["report", str(folder)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {folder / 'run.json'}: drafters[1].spec.block_size is not an integer "
                                     "(found a string); edited by hand, damaged or written by another version?")


@pytest.mark.parametrize("key", ["histogram", "steps", "reach"])
def test_a_walk_metric_the_renderers_read_is_required(tmp_path, key):
    """Found by test_fuzz: with `histogram` optional in a drafter's metrics, a run.json without it passed the reader
    and `report` failed inside the renderer (exit 1, an internal error). A walk's metrics (WalkMetrics) now require
    every key the renderers read; an estimate's (`estimate` true) are EstimateMetrics."""
    folder = _folder(tmp_path)
    run = json.loads((folder / "run.json").read_text())
    del run["drafters"][0]["metrics"][key]
    (folder / "run.json").write_text(json.dumps(run))
    result = runner.invoke(app, ["report", str(folder)])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"error: {folder / 'run.json'}: drafters[0].metrics.{key} is missing; edited by "
                                     "hand, damaged or written by another version?")


def test_an_edited_samples_row_is_refused_naming_its_line_and_field(tmp_path):
    folder = _folder(tmp_path)
    lines = (folder / "samples.jsonl").read_text().splitlines()
    row = json.loads(lines[2])
    row["walk_drafts"] = [["not an id"]]
    lines[2] = json.dumps(row)
    (folder / "samples.jsonl").write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["show", str(folder), "--first", "2"])
    assert result.exit_code == 2
    assert f"{folder / 'samples.jsonl'}: line 3.walk_drafts[0][0] is not an integer (found a string)" in result.stderr


def test_a_bug_while_rendering_is_an_internal_error_never_the_user_s_edit(tmp_path, monkeypatch):
    """A KeyError raised by our renderer on a valid folder: exit 1 and the traceback saved, not exit 2 and
    "edited by hand" (what results.interpreting() used to say)."""
    import dflash_eval.render.terminal as terminal

    def broken(*args, **kwargs):
        raise KeyError("tau_macro")

    monkeypatch.setattr(terminal, "render_report", broken)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    result = runner.invoke(app, ["report", str(_folder(tmp_path))])
    assert result.exit_code == 1
    assert "internal error (KeyError: 'tau_macro'); full traceback saved to" in result.stderr
    assert "edited" not in result.stderr


def test_one_read_run_name_for_one_thing():
    """`dflash_eval.read_run` (DataFrames) is the only read_run; the typed reader is read_run_document."""
    import dflash_eval
    from dflash_eval.core.documents import results

    assert not hasattr(results, "read_run")
    assert dflash_eval.read_run.__module__ == "dflash_eval.commands.frames"


def test_the_schema_page_is_what_the_typeddicts_say_now():
    from dflash_eval.core.documents.reference import reference

    assert (DOCS / "result-documents.md").read_text() == reference(), (
        "docs/result-documents.md is not what the TypedDicts declare: regenerate it with "
        "`python -m dflash_eval.core.documents.reference > docs/result-documents.md`")


def test_every_field_of_every_document_type_says_what_it_means():
    """A field's meaning is the comment just above it in its TypedDict, and docs/result-documents.md prints it:
    a field added without one fails here (the prose schema this replaced lacked six keys of run.json when a test first compared them)."""
    from dflash_eval.core.documents.reference import document_types, field_meanings

    classes = document_types()
    missing = [f"{cls.__name__}.{key}" for cls in classes for key, meaning in field_meanings(cls).items()
               if len(meaning.split()) < 2]
    assert not missing, f"fields without a meaning (a `# ...` comment above the field): {missing}"
    assert len(classes) >= 39 and sum(len(field_meanings(cls)) for cls in classes) >= 337


def test_a_field_meaning_is_the_comment_above_it_only():
    """The reader takes the comment block right above a field, not a comment further up or a trailing one."""
    from dflash_eval.core.documents.reference import field_meanings

    assert field_meanings(Commented) == {"first": "one line, and its second line", "second": "", "third": "its own"}


class Commented(TypedDict):
    """A docstring that mentions first: not a field."""

    # one line,
    # and its second line
    first: int
    second: int  # a trailing comment is not read

    # its own
    third: int
