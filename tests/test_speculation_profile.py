"""`export-serving --engine modelopt`: the demo pair measured at every draft length (`--draft-lengths all`)
becomes a Model-Optimizer `speculation_profile.json` v1.0 that passes Model-Optimizer's own validation (its
rules transcribed below from examples/specdec_bench/specdec_bench/speculation_profile.py, not imported from
our code), whose rates are the run's per-position conditional c_i and reach r_i at each k, and which its own
producer would write from the same histogram."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app


def modelopt_validation(profile_part: dict) -> dict:
    """Model-Optimizer `_consistency_check(mean, marginals, tolerance=0.02)`: implied = 1.0 + sum(marginals),
    passed = |implied - mean| <= tolerance; `_monotonicity_check`: a violation wherever marginals[i] >
    marginals[i - 1] + 1e-9."""
    marginals, mean = profile_part["marginal_accept_rates"], profile_part["mean_accept_length"]
    implied = 1.0 + sum(marginals)
    violations = [i for i in range(1, len(marginals)) if marginals[i] > marginals[i - 1] + 1e-9]
    return {"mean_consistency": abs(implied - mean) <= 0.02, "marginal_monotonicity": not violations}


def modelopt_rates_from_histogram(histogram: dict[str, int], k: int) -> tuple[list[float], list[float]]:
    """What Model-Optimizer's producer derives from an acceptance-length histogram ({length: steps}, the length
    counting the bonus token): AcceptanceRate._process_lengths (Joint_Acceptance_Rate[L] = steps with length
    >= L / steps), build_profile's `_dense_survival` (position i <-> length i + 2; a gap inherits the next
    larger observed value, 0.0 past the largest) and `conditional = m / prev if prev > 0 else 0.0`."""
    lengths = {int(n): c for n, c in histogram.items()}
    total = sum(lengths.values())
    joint = {L: sum(c for n, c in lengths.items() if n >= L) / total for L in lengths}
    survival, carried = {}, 0.0
    for L in range(max(joint), 0, -1):
        carried = joint.get(L, carried)
        survival[L] = carried
    marginal = [survival.get(i + 2, 0.0) for i in range(k)]
    conditional, previous = [], 1.0
    for m in marginal:
        conditional.append(m / previous if previous > 0 else 0.0)
        previous = m
    return marginal, conditional


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    from test_export import demo_run

    run_dir = demo_run(tmp_path_factory.mktemp("profile"), "all")
    return run_dir, json.loads((run_dir / "run.json").read_text())


@pytest.mark.parametrize("drafter", ["ref", "inhouse"])
def test_profile_validates_and_holds_the_runs_rates_at_every_k(measured, drafter, tmp_path):
    run_dir, run = measured
    out = tmp_path / "speculation_profile.json"
    result = CliRunner().invoke(app, ["export-serving", str(run_dir), "--engine", "modelopt", "--drafter-name", drafter,
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    profile = json.loads(out.read_text())
    d = next(x for x in run["drafters"] if x["name"] == drafter)
    B = d["spec"]["block_size"]
    assert (profile["schema_version"], profile["measured"], profile["method"]) == ("1.0", True, "dflash")
    assert profile["accept_length_model"] == "measured_per_k"  # DFlash re-plans its block per k
    assert (profile["block_size"], profile["max_supported_k"]) == (B, B - 1)
    assert profile["num_speculative_tokens"] == B - 1  # no --k and no speedup in the run: the checkpoint's block
    # published beside a checkpoint: no local directory layout (Model-Optimizer's checkpoint_id rule)
    assert not any(str(v).startswith("/") for v in {**profile["draft_checkpoint"], **profile["target_model"]}.values())
    by_k = {e["k"]: e["metrics"] for e in d["by_draft_length"]}
    assert sorted(by_k) == list(range(1, B)) and sorted(map(int, profile["profiles_by_k"])) == list(range(1, B))
    for k, metrics in by_k.items():
        part = profile["profiles_by_k"][str(k)]
        assert modelopt_validation(part) == {"mean_consistency": True, "marginal_monotonicity": True}
        assert all(check["passed"] for check in part["validation"].values())
        assert part["marginal_accept_rates"] == metrics["reach"]  # reach r_i, never the teacher-forced m_i
        assert part["conditional_accept_rates"] == [c if c is not None else 0.0 for c in metrics["conditional"]]
        assert part["mean_accept_length"] == metrics["tau_micro"] == profile["accept_length_by_k"][str(k)]
        assert part["mean_accept_length_per_request"] == metrics["tau_macro"]  # Average_AL: mean over requests
        marginal, conditional = modelopt_rates_from_histogram(part["acceptance_length_histogram"], k)
        assert marginal == pytest.approx(part["marginal_accept_rates"], abs=1e-12)
        assert conditional == pytest.approx(part["conditional_accept_rates"], abs=1e-12)
    top = profile["profiles_by_k"][str(B - 1)]
    assert profile["marginal_accept_rates"] == top["marginal_accept_rates"]
    assert profile["validation"] == top["validation"]
    conditions = profile["measurement_conditions"]
    assert (conditions["prompts"], conditions["temperature"], conditions["max_new_tokens"]) == (3, 0.0, 24)
    assert conditions["dataset"] == "demo" and conditions["tokens_scored"] > 0
    assert conditions["dflash_eval"] and "dflash-eval" in conditions["producer"]
    assert "not dflash-eval's teacher-forced marginal" in profile["conventions"]["marginal_accept_rates"]


def test_top_level_k_is_the_one_asked_and_the_rest_stay(measured):
    run_dir, run = measured
    result = CliRunner().invoke(app, ["export-serving", str(run_dir), "--engine", "modelopt", "--drafter-name", "ref",
                                      "--k", "3"])
    assert result.exit_code == 0, result.output
    profile = json.loads(result.output)
    at_3 = next(e for e in run["drafters"][0]["by_draft_length"] if e["k"] == 3)["metrics"]
    assert profile["num_speculative_tokens"] == 3 and profile["marginal_accept_rates"] == at_3["reach"]
    assert len(profile["profiles_by_k"]) == 7
    assert profile["acceptance_length_histogram"] == {
        str(n + 1): c for n, c in enumerate(at_3["histogram"]) if c}


def test_a_broken_histogram_fails_the_transcribed_rules():
    """The transcription can fail: a rising marginal and a mean that does not match are caught."""
    assert modelopt_validation({"marginal_accept_rates": [0.5, 0.6], "mean_accept_length": 2.1}) == {
        "mean_consistency": True, "marginal_monotonicity": False}
    assert modelopt_validation({"marginal_accept_rates": [0.5, 0.4], "mean_accept_length": 2.5}) == {
        "mean_consistency": False, "marginal_monotonicity": True}
    # Model-Optimizer's own worked case (tests/test_speculation_profile.py): {1: 40, 2: 30, 3: 30}, k = 3
    assert modelopt_rates_from_histogram({"1": 40, "2": 30, "3": 30}, 3) == (
        pytest.approx([0.6, 0.3, 0.0]), pytest.approx([0.6, 0.5, 0.0]))
