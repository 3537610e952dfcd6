"""Where a window mistake costs acceptance: past the window, in the depth curve, named by the doctor.

The "falls away past depth D" rule (core/depth_verdict.py) on hand-computed curves; then real drafters
trained on the tiny qwen3 bed: one with a sliding window of W rows on every layer and one with full
attention, on the same continuations. Evaluated the way they were trained they agree at every depth;
the window drafter under full attention (its config with the window lost) and the full drafter served a
window of W (--draft-window) agree with them up to depth W and fall away past it, in run.json's by_depth,
and the doctor names that depth and the cause."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.core import metrics as M
from dflash_eval.core.depth_verdict import DepthPoint, depth_curve, describe, falls_away

runner = CliRunner()

W = 48  # the window, in context rows; the prompts below are 24-27 tokens, so anchors start before it
EDGES = "0,48,80"  # buckets 0-48 (anchors the window does not cut), 48-80, 80+
TOKENS = 80
PROMPTS = ["Sort a list.", "Add two numbers.", "Reverse text.", "Count words.", "Find the max.", "Print hello.",
           "Parse JSON.", "Merge dicts."]


def curve(*points):
    """(tau, steps) per bucket of the edges 32, 64, 96."""
    bounds = [(0, 32), (32, 64), (64, 96), (96, None)]
    return [DepthPoint(lo, hi, tau, steps) for (lo, hi), (tau, steps) in zip(bounds, points)]


REF = curve((4.0, 30), (4.0, 30), (4.0, 30), (4.0, 30))


def test_a_curve_that_holds_then_stays_below_falls_away_at_the_first_bucket_of_the_fall():
    fall = falls_away(curve((4.0, 30), (3.9, 30), (3.0, 30), (2.0, 30)), REF)  # drops 0, 0.1, 1.0, 2.0
    assert (fall.kind, fall.depth, fall.bucket, fall.held_until) == ("falls_away", 64, "64-96", "32-64")
    assert (fall.subject_tau, fall.reference_tau, fall.worst_drop, fall.buckets_below) == (3.0, 4.0, 2.0, 2)
    assert describe(fall, "A", "B") == ("A falls away from B past depth 64 (bucket 64-96: tau 3.00 vs 4.00, up to "
                                        "2.00 lower in the 2 buckets from there; it held up to bucket 32-64)")


def test_recovering_skipped_and_borderline_buckets():
    # below at 32-64, back at 64-96: only the last bucket is a fall that stays
    fall = falls_away(curve((4.0, 30), (3.0, 30), (4.0, 30), (3.0, 30)), REF)
    assert (fall.kind, fall.depth, fall.held_until, fall.buckets_below) == ("falls_away", 96, "64-96", 1)
    # a bucket without steps, or with fewer than min_steps on one side, neither breaks nor supports a fall
    fall = falls_away(curve((4.0, 30), (4.0, 30), (None, 0), (3.0, 30)), REF)
    assert (fall.depth, fall.held_until) == (96, "32-64")
    fall = falls_away(curve((4.0, 30), (3.5, 30), (3.5, 19), (3.5, 30)), REF)
    assert (fall.depth, fall.buckets_below) == (32, 2)
    # exactly the margin below is not below (strictly more than 0.25 tau)
    assert falls_away(curve((4.0, 30), (3.75, 30), (3.75, 30), (3.75, 30)), REF) is None
    assert falls_away(curve((4.0, 30), (3.75, 30), (3.6, 30), (3.6, 30)), REF, margin=0.3).depth == 64
    assert falls_away(REF, REF) is None


def test_below_at_every_compared_depth_is_not_a_fall_at_a_depth():
    fall = falls_away(curve((3.0, 30), (3.0, 30), (2.0, 30), (3.0, 30)), REF)
    assert (fall.kind, fall.depth, fall.held_until, fall.worst_drop) == ("throughout", 0, None, 2.0)
    # the held bucket has too few steps: what is left is below throughout, from 32
    fall = falls_away(curve((4.0, 10), (3.0, 30), (3.0, 30), (3.0, 30)), REF)
    assert (fall.kind, fall.depth) == ("throughout", 32)
    assert "at every depth measured, from bucket 32-64 on" in describe(fall, "A", "B")
    with pytest.raises(ValueError, match="different buckets"):
        falls_away(REF[:3], REF)


def test_depth_curve_divides_the_counts_of_each_bucket():
    # prompt a: 2 steps committing 4 + 4; prompt b: 2 steps committing 1 + 2 -> tau macro (4 + 1.5) / 2
    parts = {1: M.AcceptanceCounts.from_walk("a", [3, 3], 4) + M.AcceptanceCounts.from_walk("b", [0, 1], 4)}
    points = depth_curve(parts, (32, 64))
    assert points == [DepthPoint(0, 32, None, 0), DepthPoint(32, 64, 2.75, 4), DepthPoint(64, None, None, 0)]
    assert [p.label for p in points] == ["0-32", "32-64", "64+"]


@pytest.fixture(scope="module")
def window_bed(test_bed, tmp_path_factory):
    """The two drafters, the window one exported with its window lost, and two runs by depth (one target
    pass each): the three as configured, and the full drafter served a window of W."""
    import torch

    from dflash_eval.demo.train import TrainConfig, train_drafter
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.continuations import Prompt, generate_greedy, prompt_ids

    root = tmp_path_factory.mktemp("window-depth")
    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    ids = [prompt_ids(target.tokenizer, Prompt(str(i), p), False) for i, p in enumerate(PROMPTS)]
    # one generation batch (the same tokens as one at a time: continuations.generate_greedy), 8x faster
    sequences = [(torch.tensor(i + c), len(i)) for i, c in zip(ids, generate_greedy(target, ids, TOKENS, len(ids)))]
    design = dict(block_size=4, steps=150, anchors_per_step=32, lr=5e-3)  # ~2 s each on 2 quiet cores
    win = train_drafter(target, sequences, TrainConfig(sliding_window=W, sliding_layers=2, **design), root / "win")
    full = train_drafter(target, sequences, TrainConfig(**design), root / "full")
    lost = root / "lost"  # the same weights, the window gone from the config (full attention)
    shutil.copytree(win, lost)
    config = json.loads((lost / "config.json").read_text())
    layer = config["transformer_layer_config"]
    layer.update(layer_types=["full_attention"] * 2, use_sliding_window=False, sliding_window=None)
    (lost / "config.json").write_text(json.dumps(config))
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": str(i), "prompt": p}) + "\n" for i, p in enumerate(PROMPTS)))
    common = ["--target", str(test_bed["qwen3"]), "--prompts", str(prompts), "--max-new-tokens", str(TOKENS),
              "--cache-dir", str(root / "cache")]
    runs = {}
    for name, drafters, extra in (("plain", [win, lost, full], []), ("served", [full], ["--draft-window", str(W)])):
        result = runner.invoke(app, ["run", *[a for d in drafters for a in ("-d", str(d))], *common, "--depth-buckets",
                                     EDGES, "--out", str(root / name), *extra] + (["--no-html"] if extra else []))
        assert result.exit_code == 0, result.output
        runs[name] = root / name
    return {"win": win, "full": full, "lost": lost, "common": common, "runs": runs, "root": root}


def taus(run_dir, name):
    drafter = next(d for d in json.loads((run_dir / "run.json").read_text())["drafters"] if d["name"] == name)
    return [(e["bucket"], e["metrics"]["steps"], e["metrics"]["tau_macro"]) for e in drafter["by_depth"]]


def test_the_depth_curve_drops_past_the_window_under_the_other_attention(window_bed):
    runs = window_bed["runs"]
    win, lost, full = (taus(runs["plain"], n) for n in ("win", "lost", "full"))
    served = taus(runs["served"], "full")
    print("\nwindow drafter, as trained:", win, "\nsame weights, full attention:", lost,
          "\nfull drafter, as trained:", full, "\nfull drafter, served window", W, ":", served)
    assert [b for b, _, _ in win] == ["0-48", "48-80", "80+"]
    for as_trained, other in ((win, lost), (full, served)):
        # up to depth W the window cuts nothing: the same walk, step for step
        assert other[0] == as_trained[0] and as_trained[0][1] >= 20
        # past it, each bucket loses more than the doctor's margin
        for (_, _, tau), (_, _, tau_other) in zip(as_trained[1:], other[1:]):
            assert tau - tau_other > 0.5, (as_trained, other)


def doctor(window_bed, drafter, out, *extra):
    result = runner.invoke(app, ["doctor", "-d", str(drafter), *window_bed["common"], "--no-context-variants",
                                 "--out", str(out), *extra], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return json.loads((out / "doctor.json").read_text()), result.stdout


def test_the_doctor_names_the_depth_where_full_attention_on_the_sliding_layers_falls_away(window_bed):
    """Into the run folder: the run's depth buckets, the section in run.json and in the HTML report."""
    run = window_bed["runs"]["plain"]
    report, stdout = doctor(window_bed, window_bed["win"], run)
    windows = report["windows"]
    assert windows["depth_edges"] == [48, 80]
    assert [c["name"] for c in windows["curves"]] == ["as configured", "sliding windows off"]
    (finding,) = [f for f in windows["findings"] if f["fall"]["kind"] == "falls_away"]
    assert (finding["kind"], finding["subject"], finding["fall"]["depth"]) == ("what_if", "sliding windows off", W)
    assert f"sliding layers run with full attention past W={W}" in finding["cause"]
    assert windows["verdict"].startswith(f"sliding windows off falls away from as configured past depth {W} ")
    assert report["verdict"].startswith("no mismatch found")  # a what-if of serving, not a mismatch of training
    # the doctor's as-configured curve is the run's by_depth of the same drafter, count for count
    by_depth = json.loads((run / "run.json").read_text())["drafters"][0]["by_depth"]
    assert [b["counts"] for b in windows["curves"][0]["buckets"]] == [b["counts"] for b in by_depth]
    assert f"by depth: sliding windows off falls away from as configured past depth {W}" in stdout
    assert "window variants by depth" in stdout
    assert json.loads((run / "run.json").read_text())["doctor"]["windows"]["verdict"] == windows["verdict"]
    html = (run / "report.html").read_text()
    assert "Window variants by depth" in html and f"past depth {W} (bucket 48-80" in html


def test_the_doctor_names_the_depth_where_a_full_attention_drafter_served_a_window_falls_away(window_bed):
    """The reverse, into the run made with --draft-window: the doctor takes the run's window and buckets, and
    its served-window curve is that run's by_depth, count for count."""
    run = window_bed["runs"]["served"]
    report, _ = doctor(window_bed, window_bed["full"], run)
    windows = report["windows"]
    assert [c["name"] for c in windows["curves"]] == ["as configured", f"served window {W} (--draft-window)"]
    (finding,) = windows["findings"]
    assert (finding["kind"], finding["fall"]["kind"], finding["fall"]["depth"]) == ("what_if", "falls_away", W)
    assert finding["cause"] == (f"a window smaller than the trained one (served W={W}; 2 of 2 layers trained with "
                                "full attention)")
    by_depth = json.loads((run / "run.json").read_text())["drafters"][0]["by_depth"]
    assert [b["counts"] for b in windows["curves"][1]["buckets"]] == [b["counts"] for b in by_depth]


def test_the_window_on_every_layer_variant_puts_the_sliding_window_on_the_full_layers(test_bed):
    from dflash_eval.core.semantics import apply_semantics
    from dflash_eval.demo.checkpoint_writer import design_spec
    from dflash_eval.doctor.commands.windows import every_layer_variant, trained_window
    from dflash_eval.model.target import target_info

    info = target_info(test_bed["qwen3"])
    for fmt, rule in (("speculators", "anchor"), ("zlab", "query")):
        mixed = design_spec(info, mask_token_id=0, num_layers=3, sliding_window=W, sliding_layers=1, fmt=fmt)
        mixed = apply_semantics(mixed, fmt, "test")
        assert trained_window(mixed) == W and [layer.window for layer in mixed.layers] == [W, None, None]
        variant = every_layer_variant(mixed)
        assert variant.name == f"window {W} on every layer"
        assert [(layer.window, layer.window_from) for layer in variant.spec.layers] == [(W, rule)] * 3
        assert [layer.causal_in_block for layer in variant.spec.layers] == [x.causal_in_block for x in mixed.layers]
    every = design_spec(info, mask_token_id=0, num_layers=2, sliding_window=W, sliding_layers=2)
    assert every_layer_variant(apply_semantics(every, "speculators", "test")) is None  # it already is that variant
    assert every_layer_variant(apply_semantics(design_spec(info, mask_token_id=0), "speculators", "test")) is None


def test_the_doctor_names_a_window_lost_at_export_and_the_reference_it_falls_away_from(window_bed, tmp_path):
    """The window drafter exported as full attention, with --draft-window W and the correct export as the
    reference: its configuration falls away past W from both, the served window keeps up (the cause)."""
    report, stdout = doctor(window_bed, window_bed["lost"], tmp_path / "doc", "--draft-window", str(W),
                            "--reference", str(window_bed["win"]), "--depth-buckets", EDGES)
    windows = report["windows"]
    assert [c["name"] for c in windows["curves"]] == ["as configured", f"served window {W} (--draft-window)",
                                                      "reference win"]
    kinds = {f["kind"]: f for f in windows["findings"]}
    assert kinds["mismatch"]["fall"]["depth"] == kinds["reference"]["fall"]["depth"] == W
    assert f"behaves as if trained with a window of about {W} rows" in kinds["mismatch"]["cause"]
    assert f"the served window {W} (--draft-window) variant keeps up" in kinds["reference"]["cause"]
    assert "what_if" not in kinds
    # the doctor's verdict names it, with its depth
    assert f"as configured falls away from served window {W} (--draft-window) past depth {W}" in report["verdict"]
    assert report["passes"]["variants"] == len(PROMPTS) and report["tap_passes"] == len(PROMPTS)


def test_the_doctor_refuses_other_depth_buckets_than_the_run_s(window_bed):
    before = (window_bed["runs"]["served"] / "run.json").read_bytes()
    result = runner.invoke(app, ["doctor", "-d", str(window_bed["full"]), "--out", str(window_bed["runs"]["served"]),
                                 "--depth-buckets", "0,64"])
    assert result.exit_code == 2
    assert "this run was made with --depth-buckets 0,48,80, doctor was given '0,64'" in result.output
    assert (window_bed["runs"]["served"] / "run.json").read_bytes() == before
