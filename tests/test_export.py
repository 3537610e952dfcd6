"""`export-serving`: the vLLM speculative_config (synthetic acceptance rates) and the SGLang simulated
acceptance length that reproduce a drafter's measured acceptance. The exported rates pass vLLM 0.33's own
rules (transcribed below from vllm/config/speculative.py, not imported from our code) and round-trip to
the run's tau at that k; k not measured, or an estimate run, is refused by name."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app


def vllm_rules(config: dict) -> list[str]:
    """vLLM 0.33: SpeculativeConfig.num_speculative_tokens = Field(gt=0); RejectionSampleMethod includes
    "synthetic"; _resolve_synthetic_acceptance_rates(n, rates, length): exactly one of rates / length,
    len(rates) == n, every 0.0 <= r <= 1.0, no rates[i] > rates[i - 1]."""
    n, rates = config["num_speculative_tokens"], config.get("synthetic_acceptance_rates")
    problems = []
    if not (isinstance(n, int) and n > 0):
        problems.append("num_speculative_tokens must be > 0")
    if config.get("rejection_sample_method") not in ("standard", "synthetic", "block"):
        problems.append("unknown rejection_sample_method")
    if (rates is None) == (config.get("synthetic_acceptance_length") is None):
        problems.append("exactly one of synthetic_acceptance_rates or synthetic_acceptance_length")
    if rates is not None:
        if len(rates) != n:  # vLLM raises here, before the other checks
            return problems + [f"must have length {n}"]
        if not all(0.0 <= r <= 1.0 for r in rates):
            problems.append("entries must be in [0, 1]")
        if any(rates[i] > rates[i - 1] for i in range(1, n)):
            problems.append("must be non-increasing")
    length = config.get("synthetic_acceptance_length")
    if length is not None and not 1.0 <= length <= float(n + 1):  # "must be in [1, n + 1]"
        problems.append(f"synthetic_acceptance_length must be in [1, {n + 1}]")
    return problems


def vllm_length_to_rates(length: float, n: int) -> list[float]:
    """vLLM 0.33 SpeculativeConfig._acceptance_length_to_rates ("the minimum-variance schedule"): num_drafts =
    length - 1; [1.0] * int(num_drafts) + [num_drafts - int(num_drafts)] + [0.0] * (n - int(num_drafts) - 1),
    cut to n."""
    drafts = length - 1
    full = int(drafts)
    return ([1.0] * full + [drafts - full] + [0.0] * (n - full - 1))[:n]


def dynamo_rules(flags: list[str]) -> tuple[int, list[float], list[str]]:
    """ai-dynamo/dynamo (#10436): the mocker's argparse (`--aic-nextn` type=int, `--aic-nextn-accept-rates` a
    string "Comma-separated conditional MTP acceptance rates. Entry i is P(draft i accepted | all earlier drafts
    were accepted)", `--aic-mtp-seed` type=int), then _internal/aic.py: AicSession "nextn must be 1..=5 when
    set"; _pad_nextn_accept_rates: float(x) for each non-blank comma field, "must be finite floats in [0, 1]",
    zero-padded / truncated to 5. Returns (nextn, the padded rates, problems)."""
    import math

    values = dict(zip(flags[::2], flags[1::2]))
    nextn = int(values["--aic-nextn"])
    int(values["--aic-mtp-seed"])
    rates = [float(x) for x in values["--aic-nextn-accept-rates"].split(",") if x.strip()]
    problems = []
    if not 1 <= nextn <= 5:
        problems.append(f"nextn must be 1..=5 when set, got {nextn}")
    if any(not math.isfinite(r) or not 0.0 <= r <= 1.0 for r in rates):
        problems.append("aic_nextn_accept_rates must be finite floats in [0, 1]")
    return nextn, (rates + [0.0] * 5)[:5], problems


def demo_run(root, draft_lengths: str):
    """The demo pair (ref = the reference drafter, inhouse = the in-house one) on 3 demo prompts, replayed at
    `draft_lengths` too; returns the run folder."""
    from dflash_eval.demo import drafter_paths, target_path

    reference, inhouse = drafter_paths()
    result = CliRunner().invoke(app, [
        "run", "--target", str(target_path()), "-d", f"{reference}:ref", "-d", f"{inhouse}:inhouse",
        "--prompts", "demo", "--limit", "3", "--max-new-tokens", "24", "--no-thinking", "--draft-lengths",
        draft_lengths, "--out", str(root / "run"), "--cache-dir", str(root / "cache"), "--device", "cpu", "--no-html"])
    assert result.exit_code == 0, result.output
    return root / "run"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return demo_run(tmp_path_factory.mktemp("export"), "3")


def _export(*args):
    return CliRunner().invoke(app, ["export-serving", *map(str, args)])


def _config(text: str) -> dict:
    return json.loads("\n".join(line for line in text.splitlines() if not line.startswith("#")))


@pytest.mark.parametrize("drafter, k", [("ref", 3), ("ref", 7), ("inhouse", 3)])
def test_vllm_rates_pass_vllms_rules_and_round_trip_to_tau(run_dir, drafter, k, tmp_path):
    out = tmp_path / "spec.txt"
    result = _export(run_dir, "--engine", "vllm", "--k", k, "--drafter-name", drafter, "--out", out)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    config = _config(text)
    assert vllm_rules(config) == []
    assert config["method"] == "dflash" and config["num_speculative_tokens"] == k
    assert config["rejection_sample_method"] == "synthetic"
    run = json.loads((run_dir / "run.json").read_text())
    d = next(x for x in run["drafters"] if x["name"] == drafter)
    at_k = next(e for e in d["by_draft_length"] if e["k"] == k)["metrics"]
    assert config["synthetic_acceptance_rates"] == at_k["reach"]  # this k's own walks, not the full block cut
    assert 1 + sum(config["synthetic_acceptance_rates"]) == pytest.approx(at_k["tau_micro"], abs=1e-12)
    measured = [line for line in text.splitlines() if line.startswith("# measured:")]
    assert measured and f"drafter {drafter}" in measured[0] and "3 prompts" in measured[0]
    assert "temperature 0.0" in measured[0]


def test_vllm_synthetic_length_is_tau_at_k_and_vllm_keeps_its_mean(run_dir):
    result = _export(run_dir, "--engine", "vllm", "--k", 3, "--drafter-name", "ref", "--synthetic", "length")
    assert result.exit_code == 0, result.output
    config = _config(result.output)
    assert vllm_rules(config) == [] and "synthetic_acceptance_rates" not in config
    run = json.loads((run_dir / "run.json").read_text())
    at_3 = next(e for e in run["drafters"][0]["by_draft_length"] if e["k"] == 3)["metrics"]
    assert config["synthetic_acceptance_length"] == at_3["tau_micro"]
    served = vllm_length_to_rates(config["synthetic_acceptance_length"], 3)  # what vLLM samples with
    assert 1 + sum(served) == pytest.approx(at_3["tau_micro"], abs=1e-12)
    assert served != at_3["reach"]  # the mean survives, the per-position profile does not (said in the file)
    assert "minimum-variance" in result.output


def test_dynamo_flags_are_the_conditional_rates_and_pass_its_rules(run_dir):
    result = _export(run_dir, "--engine", "dynamo", "--k", 3, "--drafter-name", "inhouse")
    assert result.exit_code == 0, result.output
    flags = next(line for line in result.output.splitlines() if not line.startswith("#")).split()
    nextn, padded, problems = dynamo_rules(flags)
    assert problems == [] and nextn == 3 and padded[3:] == [0.0, 0.0]
    run = json.loads((run_dir / "run.json").read_text())
    d = next(x for x in run["drafters"] if x["name"] == "inhouse")
    at_3 = next(e for e in d["by_draft_length"] if e["k"] == 3)["metrics"]
    assert padded[:3] == [c if c is not None else 0.0 for c in at_3["conditional"]]  # c_i, never r_i
    survive = 1.0
    for i, c in enumerate(padded[:3]):  # the mocker draws draft i with P(c_i | all before accepted)
        survive *= c
        assert survive == pytest.approx(at_3["reach"][i], abs=1e-12)
    refused = _export(run_dir, "--engine", "dynamo", "--k", 7, "--drafter-name", "ref")
    assert refused.exit_code == 2 and "at most 5 draft tokens" in refused.output


def test_sglang_simulated_length_is_tau_at_k(run_dir):
    result = _export(run_dir, "--engine", "sglang", "--k", 3, "--drafter-name", "ref")
    assert result.exit_code == 0, result.output
    env = dict(line.removeprefix("export ").split("=", 1) for line in result.output.splitlines()
               if line.startswith("export "))
    run = json.loads((run_dir / "run.json").read_text())
    at_3 = next(e for e in run["drafters"][0]["by_draft_length"] if e["k"] == 3)["metrics"]
    assert float(env["SGLANG_SIMULATE_ACC_LEN"]) == at_3["tau_micro"]
    assert env["SGLANG_SIMULATE_ACC_METHOD"] == "match-expected"
    assert "--speculative-num-draft-tokens 4" in result.output and "# measured:" in result.output


@pytest.mark.parametrize("args, message", [
    (["--engine", "vllm", "--drafter-name", "ref", "--k", "5"], "not measured at draft length k = 5"),
    (["--engine", "vllm", "--drafter-name", "ref", "--k", "9"], "at most B - 1 = 7"),
    (["--engine", "vllm"], "holds 2 drafters"),
    (["--engine", "trt", "--drafter-name", "ref"], "choose vllm, sglang, dynamo or modelopt"),
    (["--engine", "sglang", "--drafter-name", "ref", "--synthetic", "length"], "--engine sglang takes none"),
    (["--engine", "vllm", "--drafter-name", "nobody"], "no drafter 'nobody'"),
])
def test_refused_by_name(run_dir, args, message):
    result = _export(run_dir, *args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_exported_rates_fail_the_rules_when_broken():
    """The transcribed rules and our own check both catch each kind of bad rate list."""
    from dflash_eval.commands.export_serving import vllm_rate_problems

    for rates, n in (([0.5, 0.6], 2), ([0.5], 2), ([1.2, 0.1], 2), ([0.5, -0.1], 2)):
        config = {"num_speculative_tokens": n, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": rates}
        assert vllm_rules(config) and vllm_rate_problems(rates, n)
    assert vllm_rate_problems([0.5, 0.5, 0.0], 3) == []
