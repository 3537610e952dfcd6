"""`run --draft-lengths`: each drafter replayed with a block of k + 1 per k on the same tap pass, the walks
and counts per k in samples.jsonl and run.json, shown in the terminal, HTML, CSV and diff; the live loop at
k walks exactly as the replay at k; the expected speedup from a step-times file and from live timings;
bad options refused before the output folder is touched. On the bundled demo pair (B = 8, trained); merged
shards keep the depth buckets and the speedup (on the test bed, cheaper)."""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app

LIMIT, TOKENS = 3, 24


def _demo():
    from dflash_eval.demo import drafter_paths, target_path

    reference, inhouse = drafter_paths()
    return target_path(), reference, inhouse


def _run(out, cache, *extra):
    target, reference, inhouse = _demo()
    args = ["run", "--target", str(target), "-d", f"{reference}:ref", "--prompts", "demo", "--limit", str(LIMIT),
            "--max-new-tokens", str(TOKENS), "--no-thinking", "--out", str(out), "--cache-dir", str(cache),
            "--device", "cpu", *extra]
    return CliRunner().invoke(app, args, env={"COLUMNS": "200"})


STEP_TIMES = {"label": "hand-made", "target": [{"batch": b, "tokens": n, "seconds": 0.01 * b + 0.0005 * n * b}
                                               for b in (1, 4) for n in (1, 3, 6, 8)],
              "drafter": [{"batch": b, "tokens": n, "seconds": 0.001 * b} for b in (1, 4) for n in (3, 6, 8)]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("draft-lengths")
    (root / "times.json").write_text(json.dumps(STEP_TIMES))
    _, _, inhouse = _demo()
    trajectory = _run(root / "t", root / "cache", "-d", f"{inhouse}:inhouse", "--draft-lengths", "2,5",
                      "--step-times", str(root / "times.json"))
    assert trajectory.exit_code == 0, trajectory.output
    live = _run(root / "l", root / "cache", "--draft-lengths", "2,5", "--mode", "live")
    assert live.exit_code == 0, live.output
    return {"root": root, "t": root / "t", "l": root / "l", "t_output": trajectory.output}


def _rows(folder, drafter="ref"):
    from dflash_eval.core.documents.results import read_samples

    return [r for r in read_samples(folder / "samples.jsonl") if r["drafter"] == drafter]


def test_each_k_is_its_own_replay_stored_as_counts(runs):
    from dflash_eval.core import metrics as M

    run = json.loads((runs["t"] / "run.json").read_text())
    assert run["provenance"]["work"]["tap_passes"] == LIMIT  # one target pass per prompt for every k
    ref = run["drafters"][0]
    by_k = ref["by_draft_length"]
    assert [(e["k"], e["block_size"]) for e in by_k] == [(2, 3), (5, 6), (7, 8)]
    assert by_k[-1]["checkpoint_block"] and by_k[-1]["metrics"] == ref["metrics"]
    rows = _rows(runs["t"])
    for e in by_k[:-1]:
        k = e["k"]
        total = M.AcceptanceCounts(block_size=k + 1)
        for row in rows:
            entry = row["by_draft_length"][str(k)]
            assert sum(entry["walk_accept_lengths"]) == row["continuation_len"] - 1
            assert max(entry["walk_accept_lengths"]) <= k + 1
            total = total + M.AcceptanceCounts.from_dict(entry["counts"])
        assert e["counts"] == total.to_dict()  # run.json's counts are the rows' counts merged
        assert len(e["metrics"]["reach"]) == k and e["metrics"]["tau_micro"] == M.tau_micro(total)
    # a shorter block is not the full block cut at k: the walks differ somewhere
    assert any(row["by_draft_length"]["5"]["walk_accept_lengths"] != row["walk_accept_lengths"] for row in rows)


def test_live_loop_at_each_k_walks_as_the_replay_and_times_its_steps(runs):
    replay, live = _rows(runs["t"]), _rows(runs["l"])
    for a, b in zip(replay, live):
        assert a["prompt_id"] == b["prompt_id"]
        for k in ("2", "5"):
            assert b["by_draft_length"][k]["walk_accept_lengths"] == a["by_draft_length"][k]["walk_accept_lengths"]
            assert len(b["by_draft_length"][k]["verify_seconds"]) == len(b["by_draft_length"][k]["walk_anchors"])
        assert b["one_token_step"]["steps"] == b["continuation_len"] - 1  # plain decoding, one token a step
    run = json.loads((runs["l"] / "run.json").read_text())
    speed = run["drafters"][0]["speedup"]
    assert speed["source"] == "measured" and speed["batches"] == [1]
    assert [r["k"] for r in speed["rows"]] == [2, 5, 7] and all(r["speedup"][0] > 0 for r in speed["rows"])


def test_speedup_from_a_step_times_file_in_run_json_terminal_and_html(runs):
    run = json.loads((runs["t"] / "run.json").read_text())
    ref = run["drafters"][0]
    speed = ref["speedup"]
    assert speed["source"] == "file" and speed["batches"] == [1, 4]
    tau = {e["k"]: e["metrics"]["tau_micro"] for e in ref["by_draft_length"]}
    seconds = {(e["batch"], e["tokens"]): e["seconds"] for e in STEP_TIMES["target"]}
    drafter = {(e["batch"], e["tokens"]): e["seconds"] for e in STEP_TIMES["drafter"]}
    for row in speed["rows"]:
        k = row["k"]
        for b, value in zip((1, 4), row["speedup"]):
            assert value == pytest.approx(tau[k] * seconds[(b, 1)] / (seconds[(b, k + 1)] + drafter[(b, k + 1)]))
    for best in speed["best"]:
        column = speed["batches"].index(best["batch"])
        assert best["speedup"] == max(r["speedup"][column] for r in speed["rows"])
    out = runs["t_output"]
    assert "acceptance per draft length k" in out and "ref: expected speedup" in out
    assert "best k per batch" in out and "hand-made" in out
    html = (runs["t"] / "report.html").read_text()
    assert 'id="draft-lengths"' in html and "expected speedup by draft length k and batch" in html
    with open(runs["t"] / "per_position.csv") as handle:
        assert [r["drafter"] for r in csv.DictReader(handle)] == ["ref", "inhouse"]
    with open(runs["t"] / "per_position_splits.csv") as handle:
        names = [(r["drafter"], r["part"]) for r in csv.DictReader(handle) if r["split"] == "draft_length"]
    assert names == [("ref", "2"), ("ref", "5"), ("inhouse", "2"), ("inhouse", "5")]


def test_diff_pairs_by_k_and_compares_best_speedups(runs, tmp_path):
    from dflash_eval.commands.diff import diff

    result = diff(f"{runs['t']}:ref", f"{runs['t']}:inhouse")
    part = result["draft_lengths"]
    assert [p["k"] for p in part["pairs"]] == [2, 5, 7]
    run = json.loads((runs["t"] / "run.json").read_text())
    tau = {d["name"]: {e["k"]: e["metrics"]["tau_macro"] for e in d["by_draft_length"]} for d in run["drafters"]}
    for p in part["pairs"]:
        assert p["tau_macro_a"] == pytest.approx(tau["ref"][p["k"]]) and p["tau_macro_b"] == pytest.approx(tau["inhouse"][p["k"]])
    assert part["speedup"]["same_model"] and [b["batch"] for b in part["speedup"]["best"]] == [1, 4]
    page = tmp_path / "diff.html"
    shown = CliRunner().invoke(app, ["diff", f"{runs['t']}:ref", f"{runs['t']}:inhouse", "--html-file", str(page)],
                               env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "Per draft length k" in shown.output and "best k per batch" in shown.output
    html = page.read_text()  # the HTML page: tau paired by k (chart and table), the best speedups side by side
    assert 'id="draft-lengths"' in html and 'href="#draft-lengths"' in html and "Per draft length k, B - A" in html
    assert 'aria-label="tau per draft length chart"' in html and "B / A" in html and "different step times" not in html
    for p in part["pairs"]:
        assert f"{p['delta_tau_macro']['estimate']:+.3f}" in html
    for row in part["speedup"]["best"]:
        assert f"{row['speedup_a']:.2f}x" in html and f"{row['speedup_b']:.2f}x" in html


@pytest.mark.parametrize("extra, message", [
    (["--draft-lengths", "9"], "k = 9 outside 1..7"),
    (["--draft-lengths", "2,x"], "--draft-lengths"),
    (["--draft-lengths", "2", "--temperature", "0.7"], "needs --mode live"),
    (["--accelerator", "h200", "--step-times", "t.json"], "not both"),
    (["--accelerator", "tpu9000"], "unknown"),
])
def test_bad_options_refused_before_the_folder_is_touched(tmp_path, extra, message):
    out = tmp_path / "never"
    result = _run(out, tmp_path / "cache", *extra)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_resume_with_other_draft_lengths_is_refused(runs):
    again = _run(runs["t"], runs["root"] / "cache", "--draft-lengths", "3")
    assert again.exit_code == 2 and "draft_lengths" in again.output


def test_a_recorded_speedup_table_rebuilds_its_step_times(tmp_path):
    """merge recomputes the speedup from the merged counts with the step times run.json recorded: a file's
    entries and a roofline's accelerator and shapes give back the same table (JSON round trip included)."""
    from dflash_eval.core import roofline as RF
    from dflash_eval.core.speedup import recorded_step_times, roofline_from_shapes, speedup_table, step_times_from_json

    taus = {2: 2.25, 5: 3.5, 7: 3.75}
    config = {"model_type": "qwen3", "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
              "hidden_size": 64, "intermediate_size": 128, "vocab_size": 1000, "head_dim": 16}
    target = RF.model_shape(config)
    drafter = RF.drafter_shape({**config, "num_hidden_layers": 1, "block_size": 8,
                                "dflash_config": {"target_layer_ids": [1, 2, 3], "block_size": 8}})
    for times in (step_times_from_json(STEP_TIMES, tmp_path / "times.json"),
                  roofline_from_shapes(RF.accelerator("h200"), target, drafter, 300)):
        table = json.loads(json.dumps(speedup_table(taus, times)))  # as run.json holds it
        assert json.loads(json.dumps(speedup_table(taus, recorded_step_times(table)))) == table
    assert recorded_step_times(table, 600).inputs["context_tokens"] == 600
    with pytest.raises(ValueError, match="rebuilt from the rows"):
        recorded_step_times({**table, "source": "measured"})
    with pytest.raises(ValueError, match="not recorded"):
        recorded_step_times({**table, "inputs": {k: v for k, v in table["inputs"].items() if k != "target_shape"}})


@pytest.fixture(scope="module")
def sharded(test_bed, drafter_dirs, tmp_path_factory):
    """One process and two shards of the same run on the test bed, with --depth-buckets and a roofline speedup."""
    root = tmp_path_factory.mktemp("merge-serving")

    def run(out, *extra):
        args = ["run", "--target", str(test_bed["qwen3"]), "-d", str(drafter_dirs["zlab"]), "--limit", "4",
                "--max-new-tokens", "16", "--cache-dir", str(root / "cache"), "--no-html", "--device", "cpu",
                "--draft-lengths", "1,2", *extra, "--out", str(root / out)]
        done = CliRunner().invoke(app, args)
        assert done.exit_code == 0, done.output
        return root / out

    same = ("--accelerator", "h200", "--depth-buckets", "0,40,48")
    return {"one": run("one", *same), "s0": run("s0", *same, "--shard", "0/2"),
            "s1": run("s1", *same, "--shard", "1/2"), "run": run, "root": root}


def _merge(*folders, out):
    return CliRunner().invoke(app, ["merge", *map(str, folders), "--out", str(out), "--no-html"])


def test_merged_shards_keep_depth_buckets_and_the_speedup(sharded):
    root = sharded["root"]
    merged = _merge(sharded["s1"], sharded["s0"], out=root / "m")
    assert merged.exit_code == 0, merged.output
    one, m = (json.loads((d / "run.json").read_text())["drafters"][0] for d in (sharded["one"], root / "m"))
    assert m["depth_edges"] == [40, 48] and m["by_depth"] == one["by_depth"]
    assert sum(1 for e in one["by_depth"] if e["metrics"]["steps"]) >= 2  # a split with several buckets in use
    assert m["by_draft_length"] == one["by_draft_length"]
    assert one["speedup"]["source"] == "roofline" and m["speedup"] == one["speedup"]
    # shards split with other edges, or modelled on another accelerator, are refused by name
    other = sharded["run"]("s1-edges", "--accelerator", "h200", "--depth-buckets", "0,32", "--shard", "1/2")
    refused = _merge(sharded["s0"], other, out=root / "x")
    assert refused.exit_code == 2 and "other --depth-buckets" in refused.stderr and "s1-edges" in refused.stderr
    other = sharded["run"]("s1-h100", "--accelerator", "h100", "--depth-buckets", "0,40,48", "--shard", "1/2")
    refused = _merge(sharded["s0"], other, out=root / "x")
    assert refused.exit_code == 2 and "other step times" in refused.stderr and "h100" in refused.stderr
    assert not (root / "x").exists()
