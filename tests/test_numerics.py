"""`run --numerics-check N` (pipeline/numerics.py): in bf16 on CPU, on the dense and the hybrid test targets,
the measured counts are recorded in run.json and shown in the terminal, they count what they say, and the
run's own numbers and rows are exactly those of the same run without the check."""

from __future__ import annotations

import json

import pytest

from dflash_eval.core.errors import InputError
from dflash_eval.core.options import RunOptions
from dflash_eval.pipeline.numerics import common_prefix, drafts_changed, merge_measured


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
    """merge: each shard checked its own first N prompts; the merged run.json holds every shard's counts."""
    a = {"prompts_asked": 2, "generation": {"prompts": 2, "prompts_identical": 1, "tokens": 90,
                                             "tokens_before_first_difference": 70},
         "anchor_batch": {"d": {"run": 64, "other": 1, "prompts": 2, "anchors": 80, "anchors_changed": 1,
                                "drafts": 240, "drafts_changed": 2}},
         "live": {"d": {"prompts": 2, "texts_equal": 2, "walks_equal": 1}}}
    b = {"prompts_asked": 2, "generation": {"prompts": 1, "prompts_identical": 1, "tokens": 40,
                                             "tokens_before_first_difference": 40},
         "anchor_batch": {"d": {"run": 64, "other": 1, "prompts": 1, "anchors": 39, "anchors_changed": 0,
                                "drafts": 117, "drafts_changed": 0}},
         "live": {"d": {"prompts": 1, "texts_equal": 1, "walks_equal": 1}}}
    merged = merge_measured([a, None, b])
    assert merged == {"prompts_asked": 4, "generation": {"prompts": 3, "prompts_identical": 2, "tokens": 130,
                                                          "tokens_before_first_difference": 110},
                      "anchor_batch": {"d": {"run": 64, "other": 1, "prompts": 3, "anchors": 119,
                                             "anchors_changed": 1, "drafts": 357, "drafts_changed": 2}},
                      "live": {"d": {"prompts": 3, "texts_equal": 3, "walks_equal": 2}}}
    assert merge_measured([None, {}]) is None


@pytest.mark.parametrize("kind", ["qwen3", "qwen3_5_text"])
def test_numerics_check_in_bf16_is_recorded_and_changes_nothing(kind, trained, tmp_path):
    from io import StringIO

    from rich.console import Console

    from dflash_eval.commands.evaluate import evaluate
    from dflash_eval.core.results import read_samples
    from dflash_eval.render.terminal import render_numerics

    def run(name: str, check: int) -> dict:
        return evaluate(RunOptions(drafters=[f"{trained[kind]['good']}:good"], out=tmp_path / name,
                                   target=str(trained[kind]["target"]), limit=3, max_new_tokens=16, device="cpu",
                                   dtype="bfloat16", cache_dir=tmp_path / "cache", numerics_check=check))

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
    assert live["prompts"] == 2 and 0 <= live["walks_equal"] <= 2 and 0 <= live["texts_equal"] <= 2
    console = Console(file=StringIO(), width=200)
    render_numerics(console, checked["provenance"])
    shown = console.file.getvalue()
    assert f"{g['tokens_before_first_difference']}/{tokens} tokens" in shown
    assert f"--anchor-batch 1 vs 128: {a['drafts_changed']}/{a['drafts']}" in shown
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
