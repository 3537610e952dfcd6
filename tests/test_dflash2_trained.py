"""Trained DFlash2 drafters through the whole tool: run (the replay's walks equal the live loop's, prompt by
prompt, at T = 0; draft lengths), diff against a DFlash run, merge of shards, doctor and track.

The drafters come from the DFlash2 fixture trainer (testing/train_dflash2.py), trained once for this module
on the tiny qwen3 target's greedy continuations of the demo prompts: a good one (saving two checkpoints on
the way, the training folder `track` reads) and one trained with the anchor's own hidden state in its
context (the classic train/eval skew). Evaluated on their training prompts: memorisation is expected.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()
TOKENS, LIMIT, STEPS = "40", "6", 80  # trained on 40-token continuations of the first 6 demo prompts


@pytest.fixture(scope="module")
def d2(test_bed, tmp_path_factory) -> dict[str, Path]:
    from dflash_eval.demo.train import CheckpointSaves, greedy_sequences
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS
    from dflash_eval.testing.train_dflash2 import dflash2_fixture_config, train_dflash2_drafter

    root = tmp_path_factory.mktemp("dflash2-trained")
    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    sequences = greedy_sequences(target, list(DEMO_PROMPTS)[:int(LIMIT)], int(TOKENS))
    # 80 steps each (dflash2_fixture_config); measured strict tau 3.84 (good) and 2.68 (anchor bug)
    good = train_dflash2_drafter(target, sequences, dflash2_fixture_config(), root / "good",
                                 saves=CheckpointSaves(root / "training", STEPS // 2))
    bug = train_dflash2_drafter(target, sequences, dflash2_fixture_config(anchor_in_context=True),
                                root / "anchor-bug")
    return {"target": test_bed["qwen3"], "good": good, "bug": bug, "training": root / "training", "root": root}


def _run(d2, out: Path, *extra: str, limit: str = LIMIT, names=("d2", "d2bug")):
    paths = {"d2": d2["good"], "d2bug": d2["bug"]}
    args = ["run", "--target", str(d2["target"]), *(a for n in names for a in ("-d", f"{paths[n]}:{n}")),
            "--prompts", "demo", "--limit", limit, "--max-new-tokens", TOKENS, "--no-thinking", "--device", "cpu",
            "--cache-dir", str(d2["root"] / "cache"), "--no-html", "--draft-lengths", "2", "--out", str(out), *extra]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def runs(d2) -> dict[str, Path]:
    root = d2["root"]
    # the live loop (the costlier one): the bug drafter (more steps, more rejections) on the first 3 prompts,
    # with step times given (a live run measures plain decoding otherwise: one more loop per prompt)
    times = {"label": "hand-made", "target": [{"batch": 1, "tokens": n, "seconds": 0.01 + 0.001 * n} for n in (1, 3, 4)],
             "drafter": [{"batch": 1, "tokens": n, "seconds": 0.002} for n in (3, 4)]}
    (root / "times.json").write_text(json.dumps(times))
    return {"trajectory": _run(d2, root / "t"),
            "live": _run(d2, root / "l", "--mode", "live", "--step-times", str(root / "times.json"), limit="3",
                         names=("d2bug",))}


def _rows(folder: Path, drafter: str) -> list[dict]:
    from dflash_eval.core.documents.results import read_samples

    return [r for r in read_samples(folder / "samples.jsonl") if r["drafter"] == drafter]


def test_trained_dflash2_drafters_accept_and_the_anchor_bug_collapses_under_the_strict_mask(d2, runs):
    run = json.loads((runs["trajectory"] / "run.json").read_text())
    drafters = {d["name"]: d for d in run["drafters"]}
    assert all(d["spec"]["selector_top_k"] == 8 and d["spec"]["conv_kernel_size"] == 2 for d in drafters.values())
    good, bug = (drafters[n]["metrics"]["tau_macro"] for n in ("d2", "d2bug"))
    assert good > 3.5 and good > bug + 0.8, (good, bug)
    log = json.loads((d2["good"] / "train_log.json").read_text())
    # the selector learned too (its loss is 0 while no true token is among the untrained body's candidates)
    assert log["selector_loss"][-1] < 0.5 * max(log["selector_loss"])
    names = json.loads((d2["good"] / "config.json").read_text())
    assert names["speculators_model_type"] == "dflash2"
    from safetensors import safe_open

    with safe_open(str(d2["good"] / "model.safetensors"), "pt") as handle:  # speculators 0.9.0 writes neither
        assert not {"embed_tokens.weight", "lm_head.weight"} & set(handle.keys())


def test_replay_walks_equal_the_live_loop_prompt_by_prompt_also_at_a_shorter_draft_length(runs):
    replay, live = _rows(runs["trajectory"], "d2bug"), _rows(runs["live"], "d2bug")
    assert [r["prompt_id"] for r in replay[:3]] == [r["prompt_id"] for r in live] and len(live) == 3
    for a, b in zip(replay, live):
        assert a["continuation_len"] == b["continuation_len"]
        assert a["walk_accept_lengths"] == b["walk_accept_lengths"], a["prompt_id"]
        assert a["walk_drafted"] == b["walk_drafted"], a["prompt_id"]
        # k = 2: a block of 3 slots (vLLM: 1 + num_speculative_tokens queries, the convolution's block too)
        assert a["by_draft_length"]["2"]["walk_accept_lengths"] == b["by_draft_length"]["2"]["walk_accept_lengths"]
        assert max(a["by_draft_length"]["2"]["walk_accept_lengths"]) <= 3
    assert any(n < 4 for r in live for n in r["walk_accept_lengths"][:-1])  # rejections: rollbacks were exercised
    # a shorter block is its own pass, not the full block's walk cut at k
    assert any(r["by_draft_length"]["2"]["walk_accept_lengths"] != r["walk_accept_lengths"] for r in replay)


def test_the_convolution_at_a_draft_length_resets_every_k_plus_1_queries_as_vllm_lays_them_out(d2):
    """vLLM 0.33 (`qwen3_dflash2.py`, `DFlash2Qwen3DecoderLayer`) builds the convolution with block_size =
    1 + num_speculative_tokens and `_grouped_conv` masks tap t where (query index % block_size) < t over the
    requests' queries laid end to end; transcribed here and compared with the engine's per-block convolution
    at k + 1 slots (`scoring.at_draft_length`), also for a kernel longer than the block (vLLM serves it, the
    taps past the block read nothing)."""
    from dflash_eval.formats.checkpoints import checked_spec
    from dflash_eval.model.dflash2 import grouped_causal_conv
    from dflash_eval.model.target import target_info

    spec, _ = checked_spec(d2["good"], target_info(d2["target"]))
    g, H = spec.conv_group_size, spec.hidden_size
    generator = torch.Generator().manual_seed(0)
    for kernel, k in ((spec.conv_kernel_size, 1), (spec.conv_kernel_size, 2), (3, 1), (3, 3)):
        L, A = k + 1, 5
        x = torch.randn(A * L, H, generator=generator)
        delta = torch.randn(A * L, kernel, H // g, generator=generator)
        base = torch.randn(kernel, H, generator=generator)
        blocks = x.unflatten(-1, (H // g, g))
        coefficients = base.view(1, kernel, H // g, g) + delta.unsqueeze(-1)
        theirs = coefficients[:, 0] * blocks
        position = torch.arange(A * L) % L
        for tap in range(1, kernel):
            shifted = torch.nn.functional.pad(blocks[:-tap], (0, 0, 0, 0, tap, 0))
            theirs = theirs + coefficients[:, tap] * shifted * (position >= tap).view(-1, 1, 1)
        ours = grouped_causal_conv(x.view(A, L, H), delta.view(A, L, kernel, H // g), base, g)
        assert torch.allclose(ours.reshape(A * L, H), theirs.flatten(-2), atol=1e-5), (kernel, k)


def test_diff_of_a_dflash2_run_against_a_dflash_run(d2, runs, trained):
    from dflash_eval.commands.diff import diff

    dflash = d2["root"] / "dflash"
    result = runner.invoke(app, ["run", "--target", str(d2["target"]), "-d", f"{trained['qwen3']['good']}:dflash",
                                 "--prompts", "demo", "--limit", LIMIT, "--max-new-tokens", TOKENS, "--no-thinking",
                                 "--device", "cpu", "--cache-dir", str(d2["root"] / "cache"), "--no-html",
                                 "--draft-lengths", "2", "--out", str(dflash)])
    assert result.exit_code == 0, result.output
    out = diff(f"{runs['trajectory']}:d2bug", f"{dflash}:dflash")
    run = json.loads((runs["trajectory"] / "run.json").read_text())
    bug_tau = next(d for d in run["drafters"] if d["name"] == "d2bug")["metrics"]["tau_macro"]
    other = json.loads((dflash / "run.json").read_text())["drafters"][0]["metrics"]["tau_macro"]
    assert out["unfair"] == [] and out["prompts"] == int(LIMIT)  # same target, prompts, continuations, block
    assert out["b"]["tau_macro"] - out["a"]["tau_macro"] == pytest.approx(other - bug_tau)
    assert out["delta_tau_macro"]["estimate"] == pytest.approx(other - bug_tau)
    assert [p["k"] for p in out["draft_lengths"]["pairs"]] == [2, 3]
    shown = runner.invoke(app, ["diff", f"{runs['trajectory']}:d2bug", f"{dflash}:dflash"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output


def test_shards_of_a_dflash2_run_merge_into_the_single_run(d2, runs):
    root = d2["root"]
    for i in range(2):
        _run(d2, root / f"s{i}", "--shard", f"{i}/2")
    merged = runner.invoke(app, ["merge", str(root / "s1"), str(root / "s0"), "--out", str(root / "m"), "--no-html"])
    assert merged.exit_code == 0, merged.output
    one, other = (json.loads((d / "run.json").read_text()) for d in (runs["trajectory"], root / "m"))
    for key in ("metrics", "counts", "by_draft_length"):
        assert [d[key] for d in one["drafters"]] == [d[key] for d in other["drafters"]], key
    assert (runs["trajectory"] / "samples.jsonl").read_text() == (root / "m" / "samples.jsonl").read_text()


def test_doctor_runs_its_variants_on_a_dflash2_drafter_and_names_the_anchor_bug(d2, tmp_path):
    result = runner.invoke(app, ["doctor", "-d", str(d2["bug"]), "--target", str(d2["target"]), "--prompts", "demo",
                                 "--limit", LIMIT, "--max-new-tokens", TOKENS, "--no-context-variants",
                                 "--cache-dir", str(d2["root"] / "cache"), "--out", str(tmp_path / "doc")],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "doc" / "doctor.json").read_text())
    names = [v["variant"] for v in report["variants"]]
    assert report["passes"] == {"variants": int(LIMIT)}
    # the variants that apply to a DFlash2 drafter: no "target's embedding and lm_head" (it has no copies)
    assert "anchor in context (p <= a)" in names and "block positions +1" in names
    assert not any(n.startswith("target's embedding") for n in names)
    assert report["finding"] == "anchor in context (p <= a)"
    assert report["verdict"].startswith("behaves as if trained with the anchor's own hidden state in its context")


def test_track_evaluates_each_dflash2_checkpoint(d2, runs, tmp_path):
    from dflash_eval.pipeline.track_folder import read_rows

    out = tmp_path / "track"
    result = runner.invoke(app, ["track", str(d2["training"]), "--target", str(d2["target"]), "--out", str(out),
                                 "--prompts", "demo", "--limit", LIMIT, "--max-new-tokens", TOKENS, "--device", "cpu",
                                 "--cache-dir", str(d2["root"] / "cache"), "--settle", "0.2", "--no-html"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    assert [r["step"] for r in rows] == [STEPS // 2, STEPS]
    taus = [r["metrics"]["tau_macro"] for r in rows]
    run = json.loads((runs["trajectory"] / "run.json").read_text())
    good = next(d for d in run["drafters"] if d["name"] == "d2")["metrics"]["tau_macro"]
    assert taus[-1] == pytest.approx(good)  # the last checkpoint is the good drafter, and the row equals run's
    assert all(t > 1.5 for t in taus), taus
