"""`run --numerics-check N` (pipeline/numerics.py): in bf16 on CPU, on the dense and the hybrid test targets,
the measured counts are recorded in run.json and shown in the terminal, they count what they say, and the
run's own numbers and rows are exactly those of the same run without the check."""

from __future__ import annotations

import json

import pytest

from dflash_eval.core.errors import InputError
from dflash_eval.core.settings.run_settings import RunOptions
from dflash_eval.pipeline.numerics import common_prefix, drafts_changed, live_summary, merge_measured


def test_the_counts_on_hand_computed_cases():
    assert common_prefix([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2 and common_prefix([], [5]) == 0
    assert drafts_changed([[1, 2, 3], [4, 5], [6]], [[1, 0, 3], [4, 5], [7]]) == (6, 2, 2)
    with pytest.raises(ValueError):  # replays of other anchors are never compared
        drafts_changed([[1]], [[1], [2]])


def _without(run: dict) -> dict:
    prov = dict(run["provenance"])
    for key in ("created", "argv", "out"):  # when, how and where it was invoked: the folders differ
        prov.pop(key)
    prov["numerics"] = {k: v for k, v in prov["numerics"].items() if k != "measured"}
    prov["work"] = {k: v for k, v in prov["work"].items() if k != "continuations_generated"}
    return {**run, "provenance": prov}


def test_merged_shards_sum_their_measured_counts():
    """merge: each shard checked its own first N prompts; the merged run.json holds every shard's counts and
    the replay-vs-live figures computed again over all checked prompts."""
    a = {"prompts_asked": 2, "generation": {"prompts": 2, "prompts_identical": 1, "tokens": 90,
                                             "tokens_before_first_difference": 70},
         "anchor_batch": {"d": {"run": 64, "other": 1, "prompts": 2, "anchors": 80, "anchors_changed": 1,
                                "drafts": 240, "drafts_changed": 2}},
         "live": {"d": live_summary({"prompts": 2, "texts_equal": 2, "per_prompt": {"p1": [10, 40, 10, 40],
                                                                                    "p2": [20, 60, 25, 60]}})}}
    b = {"prompts_asked": 2, "generation": {"prompts": 1, "prompts_identical": 1, "tokens": 40,
                                             "tokens_before_first_difference": 40},
         "anchor_batch": {"d": {"run": 64, "other": 1, "prompts": 1, "anchors": 39, "anchors_changed": 0,
                                "drafts": 117, "drafts_changed": 0}},
         "live": {"d": live_summary({"prompts": 1, "texts_equal": 1, "per_prompt": {"p3": [8, 40, 10, 40]}})}}
    merged = merge_measured([a, None, b])
    live = merged.pop("live")
    assert merged == {"prompts_asked": 4, "generation": {"prompts": 3, "prompts_identical": 2, "tokens": 130,
                                                          "tokens_before_first_difference": 110},
                      "anchor_batch": {"d": {"run": 64, "other": 1, "prompts": 3, "anchors": 119,
                                             "anchors_changed": 1, "drafts": 357, "drafts_changed": 2}}}
    d = live["d"]
    assert (d["prompts"], d["texts_equal"], sorted(d["per_prompt"])) == (3, 3, ["p1", "p2", "p3"])
    # replay tau 4, 3, 5 (mean 4); live tau 4, 2.4, 4 (mean 3.4667): the difference -8/15 over the 3 prompts
    assert (d["steps_replay"], d["steps_live"]) == (38, 45)
    assert d["tau_replay"] == pytest.approx(4.0) and d["tau_live"] == pytest.approx((4 + 2.4 + 4) / 3)
    delta = d["delta_tau_live_minus_replay"]
    assert delta["estimate"] == pytest.approx(-8 / 15) and delta["n"] == 3
    assert delta["low"] <= delta["estimate"] <= delta["high"] <= 0  # no prompt gains in the live loop
    assert merge_measured([None, {}]) is None


def test_the_replay_vs_live_figures_on_hand_computed_counts():
    """tau of each side over the prompts with steps on both, the paired difference live - replay; a prompt
    without a step on one side is left out of both; none at all gives no figures."""
    d = live_summary({"prompts": 3, "texts_equal": 1, "per_prompt": {"a": [4, 12, 4, 16], "b": [2, 2, 1, 2],
                                                                     "c": [0, 0, 3, 5]}})
    assert (d["tau_replay"], d["tau_live"]) == (pytest.approx(2.0), pytest.approx(3.0))  # (3 + 1) / 2, (4 + 2) / 2
    assert d["delta_tau_live_minus_replay"]["estimate"] == pytest.approx(1.0)
    assert d["delta_tau_live_minus_replay"]["n"] == 2 and d["delta_tau_live_minus_replay"]["total"] == 3
    empty = live_summary({"prompts": 1, "texts_equal": 0, "per_prompt": {"a": [0, 0, 2, 4]}})
    assert empty["tau_replay"] is None and empty["delta_tau_live_minus_replay"] is None


@pytest.mark.parametrize("kind", ["qwen3", "qwen3_5_text"])
def test_numerics_check_in_bf16_is_recorded_and_changes_nothing(kind, trained, tmp_path):
    from io import StringIO

    from rich.console import Console

    from dflash_eval.commands.evaluate import evaluate
    from dflash_eval.core.documents.results import read_samples
    from dflash_eval.render.terminal import render_numerics

    def run(name: str, check: int) -> dict:
        return evaluate(RunOptions(drafters=[f"{trained[kind]['good']}:good"], out=tmp_path / name,
                                   target=str(trained[kind]["target"]), limit=3, max_new_tokens=16, device="cpu",
                                   dtype="bfloat16", cache_dir=tmp_path / "cache", numerics_check=check)).document

    checked = run("checked", 2)
    plain = run("plain", 0)
    assert _without(checked) == _without(plain)
    assert "measured" not in plain["provenance"]["numerics"]
    strip = ("continuation_text",)
    assert [{k: v for k, v in r.items() if k not in strip} for r in read_samples(tmp_path / "checked" / "samples.jsonl")] \
        == [{k: v for k, v in r.items() if k not in strip} for r in read_samples(tmp_path / "plain" / "samples.jsonl")]

    measured = checked["provenance"]["numerics"]["measured"]
    rows = read_samples(tmp_path / "checked" / "samples.jsonl")[:2]  # the first 2 prompts evaluated
    tokens = sum(r["continuation_len"] for r in rows)
    g = measured["generation"]
    assert measured["prompts_asked"] == 2 and g["prompts"] == 2 and g["tokens"] == tokens
    assert 0 <= g["tokens_before_first_difference"] <= tokens and 0 <= g["prompts_identical"] <= 2
    a = measured["anchor_batch"]["good"]
    assert (a["run"], a["other"], a["prompts"]) == (128, 1, 2)  # core/batching.py on the CPU: 512 rows / B = 4
    assert a["anchors"] == tokens - 2  # every anchor but the last token of each prompt
    assert a["drafts"] == sum(min(3, 16 - 1 - k) for r in rows for k in range(r["continuation_len"] - 1))
    assert 0 <= a["drafts_changed"] <= a["drafts"]
    live = measured["live"]["good"]
    assert live["prompts"] == 2 and 0 <= live["texts_equal"] <= 2
    # the replay's side is the run's own walk of those prompts: its steps and committed tokens
    assert {pid: v[:2] for pid, v in live["per_prompt"].items()} == {
        r["prompt_id"]: [len(r["walk_accept_lengths"]), sum(r["walk_accept_lengths"])] for r in rows}
    taus = [(v[1] / v[0], v[3] / v[2]) for v in live["per_prompt"].values()]
    assert live["tau_replay"] == pytest.approx(sum(t for t, _ in taus) / 2)
    assert live["tau_live"] == pytest.approx(sum(t for _, t in taus) / 2)
    delta = live["delta_tau_live_minus_replay"]
    assert delta["estimate"] == pytest.approx(live["tau_live"] - live["tau_replay"]) and delta["n"] == 2
    assert delta["low"] <= delta["estimate"] <= delta["high"]
    console = Console(file=StringIO(), width=200)
    render_numerics(console, checked["provenance"])
    shown = console.file.getvalue()
    assert f"{g['tokens_before_first_difference']}/{tokens} tokens" in shown
    assert f"--anchor-batch 1 vs 128: {a['drafts_changed']}/{a['drafts']}" in shown
    assert f"tau replay {live['tau_replay']:.3f} vs live {live['tau_live']:.3f}" in shown
    assert f"{delta['estimate']:+.3f} [{delta['low']:+.3f}, {delta['high']:+.3f}]" in shown
    print(kind, json.dumps(measured))


@pytest.mark.parametrize("setting, message", [
    ({"temperature": 0.7}, "runs at --temperature 0"),
    ({"mode": "live"}, "runs with --mode trajectory"),
])
def test_numerics_check_is_refused_where_it_cannot_measure(setting, message, trained, tmp_path):
    from dflash_eval.commands.evaluate import evaluate

    with pytest.raises(InputError, match=message):
        evaluate(RunOptions(drafters=[str(trained["qwen3"]["good"])], out=tmp_path / "o", device="cpu",
                            target=str(trained["qwen3"]["target"]), limit=1, max_new_tokens=8, numerics_check=1,
                            cache_dir=tmp_path / "cache", **setting))
    assert not (tmp_path / "o").exists()


def test_plan_prices_the_numerics_check(test_bed, drafter_dirs):
    """`plan --numerics-check N`: a phase priced on the first N prompts (a generation alone, two replays and a
    live loop at tau = 1 per drafter), N times one prompt's cost, refused where run refuses the check."""
    from dflash_eval.commands.plan import PlanSettings, numerics_check_cost, plan
    from dflash_eval.core import roofline as R

    def planned(n: int, **extra):
        return plan(str(test_bed["qwen3"]), [str(drafter_dirs["zlab"])],
                    PlanSettings(prompts="demo", max_new_tokens=32, numerics_check=n, **extra))

    none, one, all_ = planned(0), planned(1), planned(12)
    assert "numerics check" not in [p.name for p in none.phases]
    phase = {p.name: p for p in all_.phases}["numerics check"]
    shape, drafter = one.target.shape, one.drafters[0]
    anchors = one.batches["anchor"]
    alone = numerics_check_cost(shape, [drafter], one.lengths[:1], 32, one.accelerator, anchors)
    assert {p.name: p for p in one.phases}["numerics check"].seconds == pytest.approx(alone[1])
    every = [numerics_check_cost(shape, [drafter], [n], 32, one.accelerator, anchors)[1] for n in all_.lengths]
    assert phase.seconds == pytest.approx(sum(every)) and phase.flops > 0
    # at least a generation alone and two forwards per new token (verify, re-run) at batch 1
    floor = 3 * 31 * R.step_time(shape, one.accelerator, 1, 1, min(one.lengths))
    assert min(every) > floor
    with pytest.raises(InputError, match="runs at --temperature 0"):
        planned(2, temperature=0.7)
