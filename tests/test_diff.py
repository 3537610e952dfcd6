"""`dflash-eval diff`: fair, paired comparisons on real runs of the tiny fixtures."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()


def run(tmp_path, name, *args, drafters, limit="2", max_new="12"):
    out = tmp_path / name
    command = ["run", *sum((["-d", str(d)] for d in drafters), []), "--out", str(out), "--cache-dir",
               str(tmp_path / "cache"), "--limit", limit, "--max-new-tokens", max_new, *args]
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    return out


def diff(*args):
    return runner.invoke(app, ["diff", *map(str, args)], env={"COLUMNS": "160"})


def test_a_run_diffed_against_itself_is_indistinguishable(drafter_dirs, test_bed, tmp_path):
    out = run(tmp_path, "r", "--target", str(test_bed["qwen3"]), drafters=[drafter_dirs["zlab"]])
    result = diff(out, out)
    assert result.exit_code == 0, result.output
    # a self-diff is flagged, and a few prompts give no verdict at all (and say why)
    assert "warning: A and B are the same drafter of the same run (zlab)" in result.stdout
    assert "too few prompts for a verdict (n = 2, smallest attainable p = 0.5 >= 0.05)" in result.stdout
    data = json.loads(diff(out, out, "--json").stdout)
    assert data["delta_tau_macro"]["estimate"] == 0 and data["delta_tau_macro"]["p_value"] == 1
    assert data["warnings"]


def test_the_better_of_two_fixture_drafters_is_named_with_an_interval_excluding_zero(trained, tmp_path):
    """Correctly trained vs trained with the anchor in its context: 12 prompts, exact permutation test."""
    out = run(tmp_path, "r", "--target", str(trained["qwen3"]["target"]), limit="12", max_new="40",
              drafters=[f"{trained['qwen3']['anchor_bug']}:bugged", f"{trained['qwen3']['good']}:fixed"])
    result = diff(f"{out}:bugged", f"{out}:fixed", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    delta = data["delta_tau_macro"]
    assert data["verdict"].startswith("fixed is better than bugged")
    assert delta["low"] > 0 and delta["p_value"] < 0.01 and delta["n"] == 12
    reverse = json.loads(diff(f"{out}:fixed", f"{out}:bugged", "--json").stdout)
    assert reverse["verdict"].startswith("bugged is worse than fixed") and reverse["delta_tau_macro"]["high"] < 0
    shown = diff(f"{out}:bugged", f"{out}:fixed")
    assert "Improved most (B better)" in shown.stdout and "first divergent block" in shown.stdout


def _copy_target(test_bed, tmp_path, name, change):
    copy = tmp_path / name
    shutil.copytree(test_bed["qwen3"], copy)
    change(copy)
    return copy


def _other_weights(test_bed, tmp_path):
    from dflash_eval.testing.tiny import build_target

    return build_target("qwen3", tmp_path / "qwen3-seed1", test_bed["tokenizer"], seed=1)


def _other_tokenizer(test_bed, tmp_path):
    from dflash_eval.demo.tiny_tokenizer import train_tokenizer

    corpus = ["for item in items:\n    total += item\n", "while True:\n    break\n"] * 40
    other = train_tokenizer(tmp_path / "other-tok", corpus=corpus)

    def swap(copy):
        shutil.copy(other / "tokenizer.json", copy / "tokenizer.json")

    return _copy_target(test_bed, tmp_path, "qwen3-other-tok", swap)


def _other_template(test_bed, tmp_path):
    def edit(copy):
        template = (copy / "chat_template.jinja").read_text()
        (copy / "chat_template.jinja").write_text("{{- '<|im_start|>system\\nBe brief.<|im_end|>\\n' }}" + template)

    return _copy_target(test_bed, tmp_path, "qwen3-other-template", edit)


@pytest.mark.parametrize("setting,second,expected", [
    ("target weights", lambda bed, tmp: (["--target", str(_other_weights(bed, tmp))], {}), "target fingerprint differs"),
    ("tokenizer", lambda bed, tmp: (["--target", str(_other_tokenizer(bed, tmp))], {}), "tokenizer differs"),
    ("chat template", lambda bed, tmp: (["--target", str(_other_template(bed, tmp))], {}), "chat template differs"),
    ("thinking", lambda bed, tmp: (["--target", str(bed["qwen3"]), "--thinking"], {}), "thinking flag differs"),
    ("prompt set", lambda bed, tmp: (["--target", str(bed["qwen3"])], {"limit": "3"}), "prompt set differs"),
    ("max_new_tokens", lambda bed, tmp: (["--target", str(bed["qwen3"])], {"max_new": "16"}), "max_new_tokens differs"),
    ("block size", lambda bed, tmp: (["--target", str(bed["qwen3"])], {"drafter": "b8"}), "block size differs"),
])
def test_each_unfair_setting_is_refused_by_name(setting, second, expected, drafter_dirs, test_bed, tmp_path):
    from dflash_eval.testing.testbed import write_random_drafter

    first = run(tmp_path, "a", "--target", str(test_bed["qwen3"]), drafters=[drafter_dirs["zlab"]])
    args, options = second(test_bed, tmp_path)
    drafter = drafter_dirs["zlab"]
    if options.pop("drafter", None):
        drafter = write_random_drafter(test_bed["qwen3"], tmp_path / "b8", "zlab", block_size=8)
    other = run(tmp_path, "b", *args, drafters=[drafter], **options)
    result = diff(first, other)
    assert result.exit_code == 2, result.output
    assert expected in result.stderr and "--force" in result.stderr and result.stderr.count("\n") == 1
    forced = diff(first, other, "--force")
    if setting != "prompt set":  # a forced comparison still needs paired prompts: it runs on the common ones
        assert forced.exit_code == 0 and "UNFAIR COMPARISON" in forced.stdout


def test_different_continuations_are_refused_with_their_share(drafter_dirs, test_bed, tmp_path):
    first = run(tmp_path, "a", "--target", str(test_bed["qwen3"]), drafters=[drafter_dirs["zlab"]])
    rows = [json.loads(line) for line in (first / "samples.jsonl").read_text().splitlines()]
    responses = tmp_path / "responses.jsonl"
    lines = []
    for row in rows:
        ids = list(row["continuation_ids"])
        ids[-1] = (ids[-1] + 1) % 500
        lines.append(json.dumps({"id": row["prompt_id"], "response_ids": ids}))
    responses.write_text("\n".join(lines) + "\n")
    other = run(tmp_path, "b", "--target", str(test_bed["qwen3"]), "--responses", str(responses),
                drafters=[drafter_dirs["zlab"]])
    result = diff(first, other)
    total = sum(r["continuation_len"] for r in rows)
    assert result.exit_code == 2
    assert f"target continuations differ in {100 * len(rows) / total:.2f}% of tokens" in result.stderr
    assert diff(first, other, "--max-continuation-mismatch", "0.5").exit_code == 0


def test_best_speedups_compare_as_one_model_when_only_the_drafters_differ():
    """A roofline models each drafter's own shape on one accelerator, target and context: two such tables are
    one step-time model (no warning); another accelerator, or a file against a roofline, is not."""
    from dflash_eval.commands.diff import _step_model

    base = {"accelerator": "h200", "peak_flops": 1.0, "bandwidth": 2.0, "context_tokens": 100, "dtype_bytes": 2,
            "target_shape": {"hidden_size": 64}}
    a = {"source": "roofline", "inputs": {**base, "drafter_block_size": 8, "drafter_shape": {"n_taps": 3}}}
    b = {"source": "roofline", "inputs": {**base, "drafter_block_size": 16, "drafter_shape": {"n_taps": 5}}}
    assert _step_model(a) == _step_model(b)
    assert _step_model(a) != _step_model({**b, "inputs": {**b["inputs"], "accelerator": "h100"}})
    assert _step_model(a) != _step_model({"source": "file", "inputs": a["inputs"]})
    files = [{"source": "file", "inputs": {"file": "t.json", "drafter": [[1, 3, d]]}} for d in (0.1, 0.2)]
    assert _step_model(files[0]) != _step_model(files[1])  # a file's drafter times are part of its model
