"""The offline estimate at temperature > 0: the walk's expectation by hand, sums that pool and merge, and
the estimate reducing to the exact greedy number as the temperature goes to 0."""

from __future__ import annotations

import json

import pytest

from dflash_eval.core.estimates import EstimateSums, expected_walk, summary


@pytest.mark.parametrize("alphas, seq_len, prompt_len, expected", [
    # 3 tokens after the prompt; anchor p has one slot that can count: a reject (1 - a) costs a second step
    ([[0.25], [0.9]], 3, 0, (2 - 0.25, 2.0)),
    # every draft accepted, B = 4, 7 tokens to commit after the first: steps of 4 then 3 -> S 2, C 7
    ([[1.0, 1.0, 1.0]] * 6 + [[]], 8, 0, (2.0, 7.0)),
    # nothing ever accepted: one token per step
    ([[0.0, 0.0, 0.0]] * 4 + [[0.0]], 6, 0, (5.0, 5.0)),
    # a prompt of 2: the walk starts at anchor 2; a slot accepted with 1/2 each time, 2 tokens to commit
    ([[0.5], [0.5]], 5, 2, (1.5, 2.0)),
])
def test_expected_walk_by_hand(alphas, seq_len, prompt_len, expected):
    steps, committed = expected_walk(alphas, seq_len, prompt_len)
    assert (steps, committed) == pytest.approx(expected)


def test_committed_tokens_always_sum_to_the_text():
    """Whatever the probabilities, the expected committed tokens are the text after the first token."""
    alphas = [[0.9, 0.3, 0.7], [0.2, 0.8, 0.5], [0.6, 0.6, 0.1], [0.4, 0.9], [0.5], []]
    steps, committed = expected_walk(alphas, 10, 3)
    assert committed == pytest.approx(10 - 1 - 3) and 1 <= steps <= 6


def test_sums_pool_samples_of_a_prompt_and_divide_last():
    one = EstimateSums.from_anchors("p", 3, [[0.5, 0.5], [1.0]], 4, 1)
    assert one.alpha_sum == [1.5, 0.5] and one.slot_anchors == [2, 1] and one.reach_sum == [1.5, 0.25]
    two = EstimateSums.from_anchors("p", 3, [[1.0, 1.0], [1.0]], 4, 1)
    pooled = one.pooled(two)
    assert pooled.per_prompt["p"] == pytest.approx(tuple(x + y for x, y in zip(one.per_prompt["p"], two.per_prompt["p"])))
    assert EstimateSums.from_dict(json.loads(json.dumps(pooled.to_dict()))) == pooled
    m = summary(pooled)
    assert m["estimate"] and m["tau_macro_ci"] is None and "n = 1 < 5" in m["tau_macro_ci_note"]
    assert m["alpha"] == pytest.approx([3.5 / 4, 1.5 / 2])  # (0.5 + 1 + 1 + 1) / 4 anchors, (0.5 + 1) / 2
    steps, committed = pooled.per_prompt["p"]
    assert m["tau_macro"] == pytest.approx(committed / steps)


@pytest.mark.parametrize("policy", ["sample", "argmax"])
def test_as_temperature_goes_to_zero_the_estimate_is_the_greedy_tau(trained, tmp_path, policy):
    from dflash_eval.commands.evaluate import RunOptions, evaluate

    common = dict(drafters=[str(trained["qwen3"]["good"])], target=str(trained["qwen3"]["target"]), limit=6,
                  max_new_tokens=40, device="cpu", cache_dir=tmp_path / "cache")
    greedy = evaluate(RunOptions(out=tmp_path / "greedy", **common)).document["drafters"][0]["metrics"]
    cold = evaluate(RunOptions(out=tmp_path / "cold", temperature=1e-6, draft_policy=policy, **common)).document
    estimate = cold["drafters"][0]["metrics"]
    assert cold["provenance"]["estimate"] and estimate["estimate"]
    assert estimate["tau_macro"] == pytest.approx(greedy["tau_macro"], abs=1e-9)
    assert estimate["tau_micro"] == pytest.approx(greedy["tau_micro"], abs=1e-9)
    assert estimate["alpha"] == pytest.approx(greedy["marginal"], abs=1e-9)


def test_estimate_run_is_labelled_everywhere(trained, tmp_path):
    from typer.testing import CliRunner

    from dflash_eval.cli import app

    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", "-d", str(trained["qwen3"]["good"]), "--target",
                                      str(trained["qwen3"]["target"]), "--limit", "5", "--max-new-tokens", "24",
                                      "--temperature", "0.8", "--samples", "2", "--out", str(out), "--cache-dir",
                                      str(tmp_path / "c")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "ESTIMATE at temperature 0.8" in result.stdout and "definition: estimate" in result.stdout
    run = json.loads((out / "run.json").read_text())
    assert run["provenance"]["estimate"] is True and run["provenance"]["continuations"] == "sampled (K per prompt)"
    metrics = run["drafters"][0]["metrics"]
    assert metrics["estimate"] is True and metrics["tau_macro_ci"] is not None and 1 <= metrics["tau_macro"] <= 4
    assert (out / "per_position.csv").read_text().startswith("drafter,tau_macro_estimate,")
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 5 * 2 and all(len(r["anchor_alphas"]) == r["continuation_len"] - 1 for r in rows)
    shown = CliRunner().invoke(app, ["report", str(out)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "ESTIMATE" in shown.stdout, shown.output
    page = (out / "report.html").read_text()
    assert "ESTIMATE at temperature 0.8" in page and "definition: estimate" in page and "<svg" in page
    same = CliRunner().invoke(app, ["diff", str(out), str(out), "--json"])
    assert same.exit_code == 0, same.output
    result = json.loads(same.stdout)
    assert result["estimate"] and result["delta_tau_macro"]["estimate"] == 0.0
    assert result["verdict"].startswith("ESTIMATE: ") and result["prompts"] == 5


def test_diff_pairs_two_estimates_by_prompt(trained, tmp_path):
    import json

    from typer.testing import CliRunner

    from dflash_eval.cli import app
    from dflash_eval.core.compare import delta_tau_per_prompt

    out = tmp_path / "run"
    args = ["run", "-d", str(trained["qwen3"]["good"]), "-d", f"{trained['qwen3']['anchor_bug']}:bug", "--target",
            str(trained["qwen3"]["target"]), "--limit", "6", "--max-new-tokens", "24", "--temperature", "0.3",
            "--samples", "2", "--out", str(out), "--cache-dir", str(tmp_path / "c"), "--no-html"]
    assert CliRunner().invoke(app, args).exit_code == 0
    shown = CliRunner().invoke(app, ["diff", f"{out}:qwen3-good", f"{out}:bug"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "ESTIMATES: A =" in shown.stdout and "alpha per slot, B - A" in shown.stdout
    run = json.loads((out / "run.json").read_text())
    good, bug = ({k: tuple(v) for k, v in d["estimate"]["per_prompt"].items()} for d in run["drafters"])
    expected = delta_tau_per_prompt(good, bug)
    result = json.loads(CliRunner().invoke(app, ["diff", f"{out}:qwen3-good", f"{out}:bug", "--json"]).stdout)
    assert result["delta_tau_macro"] == expected.to_dict()
    counted = tmp_path / "counted"
    assert CliRunner().invoke(app, ["run", "-d", str(trained["qwen3"]["good"]), "--target",
                                    str(trained["qwen3"]["target"]), "--limit", "6", "--max-new-tokens", "24",
                                    "--out", str(counted), "--cache-dir", str(tmp_path / "c"), "--no-html"]).exit_code == 0
    mixed = CliRunner().invoke(app, ["diff", f"{out}:qwen3-good", str(counted), "--force"])
    assert mixed.exit_code == 2 and "compare like with like" in mixed.stderr


def test_read_run_on_an_estimate(trained, tmp_path):
    import dflash_eval
    from dflash_eval.commands.evaluate import RunOptions, evaluate

    evaluate(RunOptions(drafters=[str(trained["qwen3"]["good"])], target=str(trained["qwen3"]["target"]), limit=3,
                        max_new_tokens=16, device="cpu", cache_dir=tmp_path / "c", out=tmp_path / "run",
                        temperature=0.5, samples=2))
    frames = dflash_eval.read_run(tmp_path / "run")
    assert bool(frames.drafters.estimate.iloc[0]) and len(frames.prompts) == 3 * 2
    assert list(frames.slots.slot) == [1, 2, 3] and frames.slots.alpha.between(0, 1).all()
    assert frames.blocks.empty
