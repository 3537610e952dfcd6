"""Impossible numbers are never data (issue 36, class 2): one invariant check per result file type
(core/documents/invariants.py), the same rule wherever the file is read.

`report` and `show` rendered a samples row that `diff` and `merge` refused (`accepted 8/7`, exit 0), and
`merge` refused it as an internal error (exit 1). Here each impossible edit of a finished run's files (a row
or run.json) is made on a real run, and every reader of that file (report, show, diff, merge and the
library's read_run read both; export-serving and served --run read run.json) must refuse it with the same
one line naming the file, exit 2; the untouched run is accepted by all of them. Hypothesis draws the row, the field and the edit."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import HOSTILE_NAMES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dflash_eval.cli import app

A, B = HOSTILE_NAMES
runner = CliRunner()
ENV = {"COLUMNS": "200"}
PROPERTY = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "30")), deadline=None, database=None,
                    derandomize=not os.environ.get("FUZZ_RANDOM"),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def finished(escaped_run) -> Path:
    return escaped_run["folder"]  # conftest: two drafters, three prompts, shard 0 of 1 (merge reads it too)


def readers(folder: Path, scratch: Path) -> dict[str, list[str]]:
    dump = scratch / "metrics.txt"
    dump.write_text("vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_draft_tokens_total 30\n"
                    "vllm:spec_decode_num_accepted_tokens_total 12\n")
    return {"report": ["report", str(folder)], "show": ["show", str(folder)],
            "diff": ["diff", f"{folder}:{A}", f"{folder}:{B}"],
            "merge": ["merge", str(folder), "--out", str(scratch / "merged"), "--no-html"],
            "export-serving": ["export-serving", str(folder), "--engine", "vllm", "--drafter-name", A],
            "served": ["served", str(dump), "--run", f"{folder}:{A}"]}


def refusals(folder: Path, scratch: Path) -> dict[str, str]:
    """reader -> its one error line (exit 2, no traceback), or "ok"."""
    import dflash_eval
    from dflash_eval.core.errors import InputError

    out = {}
    for name, args in readers(folder, scratch).items():
        result = runner.invoke(app, args, env=ENV)
        assert result.exit_code in (0, 2), (name, result.exit_code, result.output, result.stderr)
        assert "Traceback" not in result.output + result.stderr and "internal error" not in result.stderr
        if result.exit_code == 2:
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), (name, result.stderr)
            out[name] = lines[0]
        else:
            out[name] = "ok"
        shutil.rmtree(scratch / "merged", ignore_errors=True)
    try:
        dflash_eval.read_run(folder)  # the library's reader (frames.py): run.json and the rows
        out["read_run"] = "ok"
    except InputError as exc:
        out["read_run"] = f"error: {exc.one_line()}"
    return out


def test_the_untouched_run_is_read_by_every_reader(finished, tmp_path):
    assert set(refusals(finished, tmp_path).values()) == {"ok"}


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]


def _write_rows(folder: Path, rows: list[dict]) -> None:
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _row_edit(kind: str, row: dict, draw) -> None:
    """One impossible change to a counted row (a walk or its counts)."""
    s = draw(st.integers(0, len(row["walk_anchors"]) - 1))
    c = row["counts"]
    B = c["block_size"]
    if kind == "accepted above drafted":
        row["walk_accept_lengths"][s] = row["walk_drafted"][s] + draw(st.integers(2, 6))
    elif kind == "drafted above the block":
        row["walk_drafted"][s] = B + draw(st.integers(0, 3))
    elif kind == "walk off its chain":
        row["walk_anchors"][s] += draw(st.sampled_from([-1, 1, 7]))
    elif kind == "a negative count":
        key = draw(st.sampled_from(["steps", "accepted_draft_tokens", "drafted_tokens"]))
        c[key] = -draw(st.integers(1, 5))
    elif kind == "counted accepted above drafted":
        c["accepted_draft_tokens"] = c["drafted_tokens"] + draw(st.integers(1, 9))
    elif kind == "reach above its drafts":
        i = draw(st.integers(0, B - 2))
        c["reach_counts"][i] = c["reach_denominators"][i] + draw(st.integers(1, 4))
    elif kind == "histogram off by one":
        c["accept_length_histogram"][draw(st.integers(0, B - 1))] += draw(st.sampled_from([-1, 1, 3]))
    elif kind == "anchor bits past the block":
        row["anchor_slot_correct"][draw(st.integers(0, len(row["anchor_slot_correct"]) - 1))] = 1 << (B - 1)
    elif kind == "marginal above valid":
        i = draw(st.integers(0, B - 2))
        c["marginal_correct"][i] = c["marginal_total"][i] + 1
    elif kind == "a prompt committing more than a block a step":
        pid = next(iter(c["per_prompt"]))
        c["per_prompt"][pid][1] = c["per_prompt"][pid][0] * B + draw(st.integers(1, 5))


ROW_EDITS = ["accepted above drafted", "drafted above the block", "walk off its chain", "a negative count",
             "counted accepted above drafted", "reach above its drafts", "histogram off by one",
             "anchor bits past the block", "marginal above valid", "a prompt committing more than a block a step"]
RUN_EDITS = ["tau above its counts", "a rate above 1", "an interval below 1", "counts of other rows", "steps"]


def _run_edit(kind: str, run: dict, draw) -> None:
    d = run["drafters"][draw(st.integers(0, len(run["drafters"]) - 1))]
    m = d["metrics"]
    if kind == "tau above its counts":
        m["tau_macro"] = m["tau_macro"] + draw(st.sampled_from([0.5, 55555.0, -0.1]))
    elif kind == "a rate above 1":
        m["token_acceptance_rate"] = draw(st.sampled_from([1.5, -0.2, 55.8]))
    elif kind == "an interval below 1":
        m["tau_macro_ci"] = [0.3, 0.9]
    elif kind == "counts of other rows":  # consistent in itself, but not what the rows add up to
        pid = next(iter(d["counts"]["per_prompt"]))
        d["counts"]["per_prompt"][pid + "x"] = d["counts"]["per_prompt"].pop(pid)
    else:
        d["metrics"]["steps"] = m["steps"] + draw(st.integers(1, 3))


@PROPERTY
@given(where=st.sampled_from(["row", "run.json"]), data=st.data())
def test_an_impossible_number_is_refused_alike_by_every_reader(where, data, finished, tmp_path_factory):
    folder = tmp_path_factory.mktemp("edit") / "run"
    shutil.copytree(finished, folder)
    if where == "row":
        rows = _rows(folder)
        index = data.draw(st.integers(0, len(rows) - 1))
        kind = data.draw(st.sampled_from(ROW_EDITS))
        _row_edit(kind, rows[index], data.draw)
        _write_rows(folder, rows)
    else:
        run = json.loads((folder / "run.json").read_text())
        kind = data.draw(st.sampled_from(RUN_EDITS))
        _run_edit(kind, run, data.draw)
        (folder / "run.json").write_text(json.dumps(run))
    seen = refusals(folder, folder.parent)
    if where == "row" or kind == "counts of other rows":  # samples.jsonl: for the readers of the rows
        seen = {k: v for k, v in seen.items() if k not in ("export-serving", "served")}
    lines = set(seen.values())
    assert "ok" not in lines and len(lines) == 1, (kind, seen)  # every reader, the same one line
    (line,) = lines
    assert str(folder) in line and "edited or damaged" in line, line


def test_report_and_show_refuse_the_row_diff_refused(finished, tmp_path):
    """The issue's case: a row accepting 8 of 7 drafted tokens (here 4 of 3, B = 4)."""
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    rows = _rows(folder)
    rows[0]["walk_accept_lengths"][0] = rows[0]["walk_drafted"][0] + 2
    _write_rows(folder, rows)
    for args in (["report", str(folder)], ["show", str(folder)]):
        result = runner.invoke(app, args, env=ENV)
        assert result.exit_code == 2 and "accepted 4/3" not in result.stdout, result.output
        assert "samples.jsonl: the row of prompt " in result.stderr and "accepts 4 of 3 drafted" in result.stderr
