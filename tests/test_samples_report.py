"""Decoded samples, repetition flags on real drafters, and the terminal report."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()


def run(args, tmp_path, name):
    result = runner.invoke(app, ["run", *args, "--out", str(tmp_path / name), "--cache-dir", str(tmp_path / "cache")],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    run_json = json.loads((tmp_path / name / "run.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / name / "samples.jsonl").read_text().splitlines()]
    return run_json, rows


def test_a_drafter_that_repeats_its_anchor_is_flagged_on_nearly_every_block(repeat_anchor_drafter, test_bed, tmp_path):
    run_json, rows = run(["-d", str(repeat_anchor_drafter), "--max-new-tokens", "32", "--limit", "4"], tmp_path, "r")
    rep = run_json["drafters"][0]["repetition"]
    assert rep["flagged_share"] >= 0.9, rep
    assert rep["flagged_by_detector"]["run"] >= 0.9 * rep["blocks"]
    drafts = [d for row in rows for d in row["walk_drafts"]]
    anchors = [row["continuation_ids"][a - row["prompt_len"]] for row in rows for a in row["walk_anchors"]]
    assert sum(all(t == anchor for t in d) for d, anchor in zip(drafts, anchors)) >= 0.9 * len(drafts)
    assert sum(bool(f) for row in rows for f in row["walk_flags"]) == rep["flagged_blocks"]


def test_a_drafter_right_about_a_repetitive_continuation_is_not_flagged(repeat_anchor_drafter, test_bed, tmp_path):
    """The target's own text repeats (one token over and over, like an elif chain it really writes); the
    repeat-anchor drafter predicts it exactly, so it accepts everything and nothing is blamed on it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(test_bed["qwen3"])
    repeated = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("elif"))[:1] * 30
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"id": f"demo/{i}", "response_ids": repeated}) + "\n" for i in range(3)))
    run_json, rows = run(["-d", str(repeat_anchor_drafter), "--max-new-tokens", "30", "--limit", "3",
                          "--responses", str(responses)], tmp_path, "r")
    drafter = run_json["drafters"][0]
    for row in rows:  # every step accepted every slot it could (a 30-token cap: 7 + 1 per step, then the rest)
        assert [n - 1 for n in row["walk_accept_lengths"][:-1]] == row["walk_drafted"][:-1]
        # the last step's drafts are all that is left: committed without a bonus token (z-lab's accounting)
        assert row["walk_accept_lengths"][-1] == row["walk_drafted"][-1]
        assert sum(row["walk_accept_lengths"]) == row["continuation_len"] - 1
    assert drafter["metrics"]["tau_macro"] > 7.0
    assert drafter["repetition"]["flagged_blocks"] == 0
    assert all(not f for row in rows for f in row["walk_flags"])


def test_show_marks_accepted_and_rejected_tokens(trained, tmp_path):
    run(["-d", str(trained["qwen3"]["good"]), "--target", str(trained["qwen3"]["target"]), "--max-new-tokens", "24",
         "--limit", "2"], tmp_path, "r")
    result = runner.invoke(app, ["show", str(tmp_path / "r"), "--prompt", "demo/1"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "demo/1 · qwen3-good · step 0 · anchor @" in result.stdout
    assert "  draft  │" in result.stdout and "  target │" in result.stdout
    missing = runner.invoke(app, ["show", str(tmp_path / "r"), "--prompt", "nope"])
    assert missing.exit_code == 2 and "no prompt 'nope'" in missing.stderr


def test_show_marks_flagged_blocks(repeat_anchor_drafter, tmp_path):
    run(["-d", f"{repeat_anchor_drafter}:loop", "--max-new-tokens", "16", "--limit", "1"], tmp_path, "r")
    result = runner.invoke(app, ["show", str(tmp_path / "r"), "--first", "3"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert result.stdout.count("repetition: run") >= 2


def test_report_on_a_stored_run_matches_the_reviewed_snapshot(monkeypatch):
    """tests/data/report_run was written by tests/data/make_report_run.py; the snapshot was reviewed by
    eye (the verdict block, summary, per-position table, repetition table, flagged sample blocks, legend).
    Run from tests/data, as `report report_run`: the verdict's next commands name the folder as given."""
    from pathlib import Path

    data = Path(__file__).parent / "data"
    monkeypatch.chdir(data)
    import shlex

    from dflash_eval.cli.common import program

    result = runner.invoke(app, ["report", "report_run"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    # the next commands call dflash-eval as this shell reaches it (the venv's script when not on PATH)
    shown = result.stdout.replace(shlex.join(program()) + " ", "dflash-eval ")
    assert shown == (data / "report_run.snapshot.txt").read_text()
    words = " ".join(result.stdout.split())  # the legend wraps at 120 columns
    for definition in ("z-lab's published numbers", "vLLM's mean acceptance length", "acceptance_at_pos_i", "EAGLE style"):
        assert definition in words


def test_report_on_a_folder_without_a_run_is_a_one_line_error(tmp_path):
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "not a dflash-eval run directory" in result.stderr


def test_show_flagged_lists_only_the_flagged_blocks_worst_first():
    """`show --flagged`: the repetitive blocks alone (the symptom users arrive with), worst first; with
    --worst K the K worst of them; --first would mean walk order, refused with what to give instead."""
    from pathlib import Path

    from dflash_eval.core.documents.results import read_samples
    from dflash_eval.core.samples import select_blocks, walk_blocks

    stored = Path(__file__).parent / "data" / "report_run"
    rows = read_samples(stored / "samples.jsonl")
    flagged = [b for row in rows for b in walk_blocks(row) if b.flags]
    assert 0 < len(flagged) < sum(len(walk_blocks(row)) for row in rows)
    chosen = select_blocks(rows, flagged=True)
    assert len(chosen) == len(flagged)
    assert all(b.flags for b in chosen) and chosen == select_blocks(rows, flagged=True, worst=len(flagged))
    assert [b.accepted for b in chosen] == sorted(b.accepted for b in chosen if b.first_rejected is not None) + \
        [b.accepted for b in chosen if b.first_rejected is None]
    shown = runner.invoke(app, ["show", str(stored), "--flagged", "--worst", "2"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and shown.stdout.startswith(f"2 of {len(flagged)} blocks flagged as repetitive, worst first")
    assert shown.stdout.count("⚠ repetition") == 2
    every = runner.invoke(app, ["show", str(stored), "--flagged"], env={"COLUMNS": "200"})
    assert every.stdout.count("⚠ repetition") == len(flagged)
    refused = runner.invoke(app, ["show", str(stored), "--flagged", "--first", "3"])
    assert refused.exit_code == 2 and "give --worst N instead" in refused.stderr
