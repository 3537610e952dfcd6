"""`--tree-budgets` through the commands: run (run.json, samples.jsonl, terminal, report.html), one target
pass and one drafter pass per prompt with the chain unchanged, the speedup table with the tree's verify
cost, refusals by name, resume, merge (shards = one process), diff per budget, track per checkpoint,
doctor's variants under trees, and the published DDTree table in docs/trees.md. On the bundled demo pair
(B = 8, trained, a hybrid target) and the test bed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app

LIMIT, TOKENS, BUDGETS = 3, 24, "2,16,64"
runner = CliRunner()


def _demo():
    from dflash_eval.demo import drafter_paths, target_path

    reference, inhouse = drafter_paths()
    return target_path(), reference, inhouse


def _run(out, cache, *extra):
    target, reference, inhouse = _demo()
    args = ["run", "--target", str(target), "-d", f"{reference}:ref", "-d", f"{inhouse}:inhouse", "--prompts", "demo",
            "--limit", str(LIMIT), "--max-new-tokens", str(TOKENS), "--no-thinking", "--out", str(out),
            "--cache-dir", str(cache), "--device", "cpu", *extra]
    return runner.invoke(app, args, env={"COLUMNS": "200"})


STEP_TIMES = {"label": "hand-made", "target": [{"batch": 1, "tokens": n, "seconds": 0.01 + 0.0005 * n}
                                               for n in (1, 3, 8, 17, 65)],
              "drafter": [{"batch": 1, "tokens": 8, "seconds": 0.002}]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("trees")
    (root / "times.json").write_text(json.dumps(STEP_TIMES))
    trees = _run(root / "t", root / "cache", "--tree-budgets", BUDGETS, "--step-times", str(root / "times.json"))
    assert trees.exit_code == 0, trees.output
    chain = _run(root / "c", root / "cache")
    assert chain.exit_code == 0, chain.output
    return {"root": root, "t": root / "t", "c": root / "c", "output": trees.output}


def _read(folder):
    from dflash_eval.core.documents.results import read_run_document, read_samples

    return read_run_document(folder), read_samples(folder / "samples.jsonl")


def test_every_budget_from_the_chain_s_pass_stored_as_counts(runs):
    from dflash_eval.core import metrics as M

    run, rows = _read(runs["t"])
    chain_run, chain_rows = _read(runs["c"])
    assert run["provenance"]["work"]["tap_passes"] == LIMIT  # one target pass per prompt for every budget
    assert run["provenance"]["tree_budgets"] == BUDGETS
    assert "recurrent" in run["provenance"]["tree_note"]  # the demo target is hybrid: said in the output
    for d, plain in zip(run["drafters"], chain_run["drafters"]):
        assert d["metrics"] == plain["metrics"] and d["counts"] == plain["counts"]  # the chain is untouched
        tree = d["tree"]
        assert tree["budgets"] == [2, 16, 64] and "build_ddtree_tree" in tree["policy"]
        mine = [r for r in rows if r["drafter"] == d["name"]]
        for e in tree["by_budget"]:
            total = M.AcceptanceCounts(block_size=8)
            for row in mine:
                walk = row["tree"]["walks"][str(e["budget"])]
                assert sum(walk["walk_accept_lengths"]) == row["continuation_len"] - 1
                assert max(walk["walk_accept_lengths"]) <= min(8, e["budget"] + 1)  # a tree of b nodes: depth <= b
                total = total + M.AcceptanceCounts.from_dict(walk["counts"])
            assert e["counts"] == total.to_dict() and e["metrics"]["steps"] == sum(e["failures"].values())
            assert e["verify_tokens"] == e["budget"] + 1
            assert e["gain_over_chain"] == pytest.approx(e["metrics"]["tau_macro"] - d["metrics"]["tau_macro"])
        taus = [e["metrics"]["tau_micro"] for e in tree["by_budget"]]
        assert taus == sorted(taus)  # a larger budget's tree holds the smaller one's: never fewer tokens per step
        anchors = sum(len(r["anchor_accepted"]) for r in mine)
        assert tree["recall_by_depth"][0]["anchors"] == anchors
        assert tree["recall_by_depth"][0]["recall"]["1"] <= tree["recall_by_depth"][0]["recall"]["64"]
        assert [r["verification"] for r in tree["speedup"]["rows"]] == ["chain", "tree", "tree", "tree"]
        tree64 = tree["speedup"]["rows"][-1]
        assert tree64["speedup"][0] == pytest.approx(tree["by_budget"][2]["metrics"]["tau_micro"] * 0.0105
                                                     / (0.01 + 0.0005 * 65 + 0.002))
    gains = {d["name"]: d["tree"]["by_budget"][-1]["gain_over_chain"] for d in run["drafters"]}
    assert gains["inhouse"] > 0  # the tree recovers some of what the anchor bug loses


def test_trees_in_the_terminal_and_report_html(runs):
    out = runs["output"]
    assert "ref: tree verification (DDTree) per budget, the chain first" in out
    assert "recall by depth" in out and "saturates at budget" in out and "stop: candidate" in out
    assert "expected speedup, chain and tree" in out
    page = (runs["t"] / "report.html").read_text()
    assert '<section id="trees">' in page and 'aria-label="tau per tree budget chart"' in page
    assert "recall@64" in page and "stop: budget" in page
    plain = (runs["c"] / "report.html").read_text()
    assert '<section id="trees">' not in plain


def test_diff_pairs_by_budget(runs, tmp_path):
    result = runner.invoke(app, ["diff", f"{runs['t']}:ref", f"{runs['t']}:inhouse", "--json",
                                 "--html-file", str(tmp_path / "d.html")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [p["budget"] for p in data["trees"]["pairs"]] == [2, 16, 64]
    run, _ = _read(runs["t"])
    taus = {d["name"]: {e["budget"]: e["metrics"]["tau_macro"] for e in d["tree"]["by_budget"]} for d in run["drafters"]}
    for p in data["trees"]["pairs"]:
        assert p["tau_macro_a"] == pytest.approx(taus["ref"][p["budget"]])
        assert p["tau_macro_b"] == pytest.approx(taus["inhouse"][p["budget"]])
    assert '<section id="trees">' in (tmp_path / "d.html").read_text()
    without = runner.invoke(app, ["diff", f"{runs['c']}:ref", f"{runs['t']}:inhouse", "--json"])
    assert json.loads(without.output)["trees"] is None  # one side without trees: nothing to pair


@pytest.mark.parametrize("extra, message", [
    (["--tree-budgets", "0"], "--tree-budgets '0': budget 0 outside"),
    (["--tree-budgets", "16,x"], "--tree-budgets '16,x': expected 'ddtree'"),
    (["--tree-budgets", "16", "--temperature", "0.7"], "--tree-budgets at temperature > 0 is not implemented"),
    (["--tree-budgets", "16", "--mode", "live"], "--tree-budgets scores trees offline"),
])
def test_bad_options_refused_by_name_before_the_folder(tmp_path, extra, message):
    result = _run(tmp_path / "out", tmp_path / "cache", *extra)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_resume_with_other_budgets_is_refused(runs):
    result = _run(runs["t"], runs["root"] / "cache", "--tree-budgets", "2,16")
    assert result.exit_code == 2 and "tree_budgets" in result.output


def test_merged_shards_equal_one_process(runs, tmp_path):
    parts = []
    for i in range(2):
        done = _run(tmp_path / f"s{i}", runs["root"] / "cache", "--tree-budgets", BUDGETS, "--shard", f"{i}/2")
        assert done.exit_code == 0, done.output
        parts.append(str(tmp_path / f"s{i}"))
    merged = runner.invoke(app, ["merge", *parts, "--out", str(tmp_path / "m")])
    assert merged.exit_code == 0, merged.output
    one, _ = _read(runs["t"])
    both, _ = _read(tmp_path / "m")
    for a, b in zip(one["drafters"], both["drafters"]):
        assert {k: v for k, v in a["tree"].items() if k != "speedup"} == b["tree"]


@pytest.mark.parametrize("edit, message", [
    (lambda t: t["walks"]["16"]["walk_accept_lengths"].__setitem__(0, t["walks"]["16"]["walk_accept_lengths"][0] + 1),
     "tree.walks[16]: step 0 accepts"),
    (lambda t: t["walks"]["2"]["failures"].__setitem__("budget", t["walks"]["2"]["failures"]["budget"] + 1),
     "tree.walks[2].failures do not count one kind per step"),
    (lambda t: t["walks"].pop("64"), "tree.walks is not one walk per budget"),
])
def test_an_edited_tree_walk_is_refused_when_read(runs, tmp_path, edit, message):
    import shutil

    folder = tmp_path / "edited"
    shutil.copytree(runs["t"], folder)
    rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    edit(rows[0]["tree"])
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["report", str(folder)], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


def test_track_keeps_each_checkpoint_s_tree(test_bed, tmp_path):
    from dflash_eval.pipeline.track_folder import read_rows
    from dflash_eval.testing.testbed import write_random_drafter

    save, target = tmp_path / "save", test_bed["qwen3"]
    for epoch, seed in ((0, 1), (1, 2)):
        write_random_drafter(target, save / str(epoch), "zlab", seed=seed, block_size=4, num_layers=2)
        (save / str(epoch) / "training_state.json").write_text(json.dumps({"global_step": 10 * (epoch + 1)}))
    reference = write_random_drafter(target, tmp_path / "reference", "zlab", seed=5, block_size=4, num_layers=2)
    result = runner.invoke(app, ["track", str(save), "--target", str(target), "--out", str(tmp_path / "track"),
                                 "--max-new-tokens", "12", "--device", "cpu", "--cache-dir", str(tmp_path / "c"),
                                 "--settle", "0.2", "--limit", "5", "--tree-budgets", "1,4", "--reference",
                                 str(reference)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = read_rows(tmp_path / "track")
    for row in rows:
        run, _ = _read(tmp_path / "track" / row["run"])
        assert row["tree"] == run["drafters"][0]["tree"]
    assert "tau macro under DDTree's tree per budget, per checkpoint" in result.output
    assert "latest vs reference per tree budget (paired over prompts): 1: " in " ".join(result.output.split())
    header = (tmp_path / "track" / "track.csv").read_text().splitlines()[0]
    assert header.endswith("tau_macro_at_tree_1,tau_macro_at_tree_4")
    assert '<section id="trees">' in (tmp_path / "track" / "track.html").read_text()


def test_doctor_shows_every_variant_and_the_gap_under_trees(tmp_path):
    target, reference, inhouse = _demo()
    result = runner.invoke(app, ["doctor", "-d", str(inhouse), "--reference", str(reference), "--target", str(target),
                                 "--prompts", "demo", "--limit", "3", "--max-new-tokens", str(TOKENS), "--no-thinking",
                                 "--device", "cpu", "--cache-dir", str(tmp_path / "c"), "--no-context-variants",
                                 "--tree-budgets", "4,64", "--out", str(tmp_path / "doc")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    doctor = json.loads((tmp_path / "doc" / "doctor.json").read_text())
    trees = doctor["trees"]
    assert trees["budgets"] == [4, 64] and trees["variants"][0]["variant"] == "as configured"
    assert trees["variants"][0]["chain"] == pytest.approx(doctor["variants"][0]["tau_macro"])
    gap = trees["gap"]
    assert gap["chain"] == pytest.approx(trees["reference"]["chain"] - trees["variants"][0]["chain"])
    assert set(gap["tree"]) == {"4", "64"}
    assert "doctor under DDTree's tree" in result.output


SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "published_tau_ddtree.json"


def published_table_markdown(data: dict) -> str:
    """DDTree's published table (the shared data file) as docs/trees.md shows it: one row per target and
    dataset, tau and speedup for the chain and DDTree's best budget, at T = 0 and T = 1."""
    cells: dict[tuple, dict] = {}
    order: list[tuple] = []
    for e in data["entries"]:
        key = (e["target"], e["drafter"], e["dataset"])
        if key not in cells:
            cells[key] = {}
            order.append(key)
        cells[key][(e["temperature"], e["verification"])] = e
    lines = ["| target | drafter | dataset | T=0 chain tau | T=0 DDTree tau | T=0 chain / DDTree speedup "
             "| T=1 chain tau | T=1 DDTree tau | T=1 chain / DDTree speedup |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(order, key=lambda k: (k[0], order.index(k))):
        row = cells[key]
        parts = []
        for t in (0, 1):
            chain, tree = row.get((t, "chain")), row.get((t, "ddtree_best_budget"))
            parts += [f"{chain['tau']:.2f}" if chain else "", f"{tree['tau']:.2f}" if tree else "",
                      f"{chain['speedup']:.2f}x / {tree['speedup']:.2f}x" if chain and tree else ""]
        lines.append("| " + " | ".join([key[0], key[1], key[2], *parts]) + " |")
    return "\n".join(lines)


@pytest.mark.skipif(not SHARED.is_file(), reason="../shared/data is not on this machine")
def test_docs_table_is_ddtree_s_published_one():
    """docs/trees.md's published table is the shared data file's, number for number (both verifications,
    every dataset, T = 0 and 1), so a user compares against what DDTree reported
    (`python tests/test_tree_run.py` prints it)."""
    data = json.loads(SHARED.read_text())
    page = (Path(__file__).resolve().parents[1] / "docs" / "trees.md").read_text()
    table = published_table_markdown(data)
    assert table in page
    assert len(table.splitlines()) == 2 + len(data["entries"]) // 4  # 4 entries per row: 2 temperatures x 2


if __name__ == "__main__":
    print(published_table_markdown(json.loads(SHARED.read_text())))
