"""Temperature > 0: the rejection rule by hand and by frequency, the live loop's committed text as a valid
sample of the target (chi-square), its reduction to greedy as T -> 0, on dense and hybrid targets.
(z-lab's own sampling code is compared in tests/test_conformance.py.)"""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from dflash_eval.core.metrics import acceptance_probability, expected_accepted_length
from dflash_eval.core.settings.run_settings import Scoring
from dflash_eval.formats.checkpoints import checked_spec
from dflash_eval.formats.files import weight_files
from dflash_eval.model.drafter import load_drafter
from dflash_eval.model.live import live_generate
from dflash_eval.model.sampling import Sampling, generator_for, rejection_step, sampling_probs
from dflash_eval.model.target import load_target
from dflash_eval.pipeline.continuations import Prompt, prompt_ids

# ----------------------------------------------------------------------------------- the rule by hand

@pytest.mark.parametrize("p, q, expected", [
    ([0.7, 0.3], [0.4, 0.6], 0.7),  # min: 0.4 + 0.3
    ([0.5, 0.5], [0.5, 0.5], 1.0),  # identical distributions are always accepted
    ([1.0, 0.0], [0.0, 1.0], 0.0),  # disjoint supports never are
    ([0.25, 0.75], [1.0, 0.0], 0.25),  # a one-hot (argmax) draft: accepted with probability p(x)
])
def test_acceptance_probability_is_one_minus_total_variation(p, q, expected):
    assert acceptance_probability(p, q) == pytest.approx(expected)


@pytest.mark.parametrize("alphas, expected", [
    ([0.7, 0.5], 0.7 + 0.7 * 0.5),  # a block of 3: two drafted slots; E[n] = a1 + a1 a2 = 1.05
    ([1.0, 1.0], 2.0),
    ([0.0, 1.0], 0.0),  # a first rejection ends the block, whatever follows
    ([0.5, 0.5, 0.5], 0.5 + 0.25 + 0.125),
])
def test_expected_accepted_length(alphas, expected):
    assert expected_accepted_length(alphas) == pytest.approx(expected)


def test_sampling_probs_top_k_and_top_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert sampling_probs(logits, Sampling(1.0)).tolist() == pytest.approx([0.5, 0.3, 0.15, 0.05])
    assert sampling_probs(logits, Sampling(1.0, top_k=2)).tolist() == pytest.approx([0.625, 0.375, 0, 0])
    # top_p 0.7: 0.5 (before it 0 < 0.7) and 0.3 (before it 0.5 < 0.7) stay, 0.15 (0.8) goes
    assert sampling_probs(logits, Sampling(1.0, top_p=0.7)).tolist() == pytest.approx([0.625, 0.375, 0, 0])
    # temperature 0.5 squares the odds: 0.25 : 0.09 : ...
    squared = torch.tensor([0.25, 0.09, 0.0225, 0.0025])
    assert sampling_probs(logits, Sampling(0.5)).tolist() == pytest.approx((squared / squared.sum()).tolist())


def test_rejection_step_certain_cases():
    g = torch.Generator().manual_seed(0)
    one_hot = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    # the target puts all its mass on the drafts: everything accepted, the bonus from the last row
    assert rejection_step(torch.tensor([0]), None, one_hot, g) == (1, 1)
    # the target gives the draft no mass: rejected, and the residual is the other token
    assert rejection_step(torch.tensor([1]), None, torch.tensor([[1.0, 0.0], [0.5, 0.5]]), g) == (0, 0)
    # q = p: always accepted whatever u is
    p = torch.tensor([[0.3, 0.7], [0.6, 0.4], [0.5, 0.5]])
    for _ in range(50):
        assert rejection_step(torch.tensor([1, 0]), p[:2], p, g)[0] == 2


@pytest.mark.parametrize("policy", ["sample", "argmax"])
def test_one_verified_slot_commits_a_sample_of_the_target(policy):
    """Whatever the drafter proposes, the first committed token is distributed as the target's p."""
    g = torch.Generator().manual_seed(1)
    target = torch.tensor([[0.5, 0.3, 0.2], [1 / 3, 1 / 3, 1 / 3]])
    q = torch.tensor([[0.1, 0.2, 0.7]])  # a poor drafter
    counts = torch.zeros(3)
    trials = 6000
    for _ in range(trials):
        if policy == "sample":
            draft = torch.multinomial(q[0], 1, generator=g)
            n, following = rejection_step(draft, q, target, g)
        else:
            draft = torch.tensor([2])  # its argmax
            n, following = rejection_step(draft, None, target, g)
        counts[int(draft[0]) if n == 1 else following] += 1
    result = chisquare(counts.tolist(), [trials * x / sum(target[0].tolist()) for x in target[0].tolist()])
    assert result.pvalue > 1e-3, (counts, result)


# ----------------------------------------------------------------------------------------- the loop

@pytest.fixture(scope="module", params=["qwen3", "qwen3_5_text"])
def pair(request, trained):
    kind = request.param
    target = load_target(str(trained[kind]["target"]), device="cpu", dtype="float32")
    spec, _ = checked_spec(trained[kind]["good"], target.info)
    drafter = load_drafter(spec, weight_files(trained[kind]["good"])).attach_target(target.embed_tokens, target.lm_head)
    ids = prompt_ids(target.tokenizer, Prompt("x", "Write a function that returns the maximum of three numbers."),
                     False)
    return kind, target, drafter, ids


@pytest.mark.parametrize("policy", ["sample", "argmax"])
def test_as_temperature_goes_to_zero_the_loop_is_the_greedy_loop(pair, policy):
    _, target, drafter, ids = pair
    greedy = live_generate(target, drafter, ids, Scoring(24))
    cold = live_generate(target, drafter, ids, Scoring(24), sampling=Sampling(1e-6, draft_policy=policy), generator=generator_for(0, "x", 0))
    assert cold.tokens == greedy.tokens and cold.walk_accept_lengths == greedy.walk_accept_lengths


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["sample", "argmax"])
def test_the_first_step_commits_tokens_distributed_as_the_target(pair, policy):
    """The token after the first one, given the first, over many seeded loops: its frequencies match the
    target's processed distribution (chi-square), whether the draft was accepted or replaced."""
    kind, target, drafter, ids = pair
    sampling = Sampling(1.0, top_k=6, draft_policy=policy)
    runs = [live_generate(target, drafter, ids, Scoring(3), sampling=sampling, generator=generator_for(7, kind, k))
            for k in range(500)]
    firsts = [r.continuation[0] for r in runs]
    first = max(set(firsts), key=firsts.count)
    seconds = [r.continuation[1] for r in runs if r.continuation[0] == first and len(r.continuation) > 1]
    assert len(seconds) >= 100, (kind, len(seconds))
    with torch.inference_mode():
        logits = target.model(input_ids=torch.tensor([ids + [first]])).logits[0, -1]
    p = sampling_probs(logits, sampling)
    support = p.nonzero().view(-1).tolist()
    observed = [seconds.count(t) for t in support]
    assert sum(observed) == len(seconds)  # nothing outside the target's top-k support
    mass = [float(p[t]) for t in support]
    result = chisquare(observed, [len(seconds) * m / sum(mass) for m in mass])
    assert result.pvalue > 1e-3, (kind, policy, observed, result)
    accepted = sum(1 for r in runs if r.walk_accept_lengths and r.walk_accept_lengths[0] > 1)
    assert accepted > 0  # the drafts were accepted some of the time: the acceptance path was exercised


# ---------------------------------------------------------------------------------------------- the CLI

@pytest.mark.slow
def test_run_at_temperature_one_with_samples_and_both_policies(trained, tmp_path):
    import json

    from typer.testing import CliRunner

    from dflash_eval.cli import app

    runner = CliRunner()
    out = tmp_path / "run"
    args = ["run", "-d", str(trained["qwen3"]["good"]), "--target", str(trained["qwen3"]["target"]), "--limit", "3",
            "--max-new-tokens", "16", "--mode", "live", "--temperature", "1.0", "--samples", "3", "--draft-policy",
            "both", "--out", str(out), "--cache-dir", str(tmp_path / "c"), "--no-html"]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    run = json.loads((out / "run.json").read_text())
    prov = run["provenance"]
    assert prov["temperature"] == 1.0 and prov["sampling"]["samples"] == 3 and prov["sampling"]["draft_policy"] == "both"
    names = [d["name"] for d in run["drafters"]]
    assert names == ["qwen3-good@sample", "qwen3-good@argmax"]
    assert [d["draft_policy"] for d in run["drafters"]] == ["sample", "argmax"]
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 3 * 2 and {r["sample"] for r in rows} == {0, 1, 2}
    for drafter in run["drafters"]:  # the samples of a prompt pool into one unit: 3 prompts, steps add up
        counts = drafter["counts"]
        assert len(counts["per_prompt"]) == 3
        mine = [r for r in rows if r["drafter"] == drafter["name"]]
        assert counts["steps"] == sum(len(r["walk_accept_lengths"]) for r in mine)
        assert 1.0 <= drafter["metrics"]["tau_macro"] <= 4.0
    # both policies saw the same random stream for sample k of a prompt: the same first token
    first = {(r["drafter"], r["prompt_id"], r["sample"]): r["continuation_ids"][0] for r in rows}
    assert all(first[("qwen3-good@sample", p, k)] == first[("qwen3-good@argmax", p, k)] for _, p, k in first)
    again = runner.invoke(app, args)  # finished: rerunning resumes with nothing to do, same numbers
    assert again.exit_code == 0, again.output
    assert json.loads((out / "run.json").read_text())["drafters"][0]["metrics"] == run["drafters"][0]["metrics"]
    compared = runner.invoke(app, ["diff", f"{out}:qwen3-good@sample", f"{out}:qwen3-good@argmax", "--json"])
    assert compared.exit_code == 0, compared.output
    result = json.loads(compared.stdout)  # paired by prompt over every sample, not one sample per prompt
    from dflash_eval.core.metrics import AcceptanceCounts, tau_macro

    taus = [tau_macro(AcceptanceCounts.from_dict(d["counts"])) for d in run["drafters"]]
    assert result["delta_tau_macro"]["estimate"] == pytest.approx(taus[1] - taus[0])
    assert result["delta_tau_macro"]["n"] == 3


@pytest.mark.parametrize("extra, message", [
    (["--samples", "4"], "--samples > 1 needs --temperature > 0"),
    # out of the option's domain: said at parse time (issue 49), the library's own check (model/sampling) behind it
    (["--mode", "live", "--temperature", "-1"], "invalid value for '--temperature': -1 is not >= 0"),
    (["--mode", "live", "--temperature", "1", "--top-p", "0"], "invalid value for '--top-p': 0 is not > 0"),
    (["--mode", "live", "--temperature", "1", "--draft-policy", "greedy"], "unknown --draft-policy 'greedy'"),
    (["--draft-policy", "both"], "--draft-policy both compares the policies at temperature > 0"),
])
def test_sampling_settings_refused_by_name(trained, tmp_path, extra, message):
    from typer.testing import CliRunner

    from dflash_eval.cli import app

    result = CliRunner().invoke(app, ["run", "-d", str(trained["qwen3"]["good"]), "--out", str(tmp_path / "o"),
                                      *extra])
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert not (tmp_path / "o").exists()
