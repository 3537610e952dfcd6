"""`served` reads what llama.cpp, AIPerf and SGLang's detailed stats write now: each payload written exactly as
its producer writes it (the producer's file and function cited at each writer), one case reconciled with a
real offline run of the test bed, and the impossible counters refused by name."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.testing.served_payloads import llamacpp_metrics

runner = CliRunner()

# Verbatim as llama.cpp's tools/server/server-task.cpp `server_task_result_metrics::to_metrics()` prints it
# (ggml-org/llama.cpp #26389): counters then gauges, `# HELP` / `# TYPE` / `llamacpp:NAME VALUE`, each value a
# double through std::stringstream (6 significant digits), then the per-position uint64 counter. 10 drafts of
# n_max 3, 30 drafted, 12 accepted (6 at position 0, 4 at 1, 2 at 2).
VERBATIM = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 40
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 0
# HELP llamacpp:prompt_seconds_total Total time spent processing prompts
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 0.125
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 22
# HELP llamacpp:tokens_predicted_seconds_total Total time spent generating tokens
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 1.5
# HELP llamacpp:n_decode_total Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 17
# HELP llamacpp:n_tokens_max Largest observed sequence length (prompt + generation)
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 62
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 30
# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted by the target model
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 12
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 10
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 0
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 0
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 1
# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 6
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 4
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 2
"""


def served(tmp_path, *texts, args=(), suffix=".txt"):
    paths = []
    for i, text in enumerate(texts):
        path = tmp_path / f"scrape{i}{suffix}"
        path.write_text(text)
        paths.append(str(path))
    return runner.invoke(app, ["served", *paths, *args], env={"COLUMNS": "200"})


def as_json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ------------------------------------------------------------------ llama.cpp


def test_the_writer_prints_what_llama_server_prints():
    assert llamacpp_metrics(10, 30, 12, [6, 4, 2], predicted=22, prompt=40) == VERBATIM


def test_one_llamacpp_scrape_by_hand(tmp_path):
    data = as_json(served(tmp_path, VERBATIM, args=["--json"]))
    s = data["served"]
    assert data["tau"] == pytest.approx(2.2) and data["per_position"] == pytest.approx([0.6, 0.4, 0.2])
    assert s["engine"] == "llamacpp" and s["accept_length_histogram"] == [4, 2, 2, 2]
    assert s["tau_definition"]["key"] == "llamacpp" and "server-task.cpp" in s["reference"]
    assert s["conversion"]["ours"] == pytest.approx(2.2) and "1 + 12 / 10" in s["conversion"]["formula"]
    text = served(tmp_path, VERBATIM)
    assert text.exit_code == 0 and "tau definition: llama.cpp mean acceptance length" in text.stdout


def test_two_llamacpp_scrapes_are_subtracted_and_a_restart_is_refused_by_name(tmp_path):
    before = llamacpp_metrics(4, 12, 5, [3, 1, 1])
    after = llamacpp_metrics(14, 42, 17, [9, 5, 3])
    data = as_json(served(tmp_path, before, after, args=["--json"]))
    assert data["served"]["counts"] == {"drafts": 10, "draft_tokens": 30, "accepted": 12, "accepted_per_pos": [6, 4, 2]}
    # before any speculative request finished, llama.cpp writes no per-position series: zeros, exactly
    data = as_json(served(tmp_path, llamacpp_metrics(0, 0, 0, None), VERBATIM, args=["--json"]))
    assert data["served"]["counts"]["accepted_per_pos"] == [6, 4, 2]
    restarted = served(tmp_path, after, before)
    assert restarted.exit_code == 2
    assert "counter reset between the scrapes: llamacpp:spec_decode_num_drafts_total fell from 14 to 4" in restarted.output
    missing = served(tmp_path, llamacpp_metrics(4, 12, 5, None), after)
    assert missing.exit_code == 2 and "counts 4 drafts but has no llamacpp:spec_decode_num_accepted_tokens_per_pos_total" \
        in " ".join(missing.output.split())


def test_llamacpp_counts_printed_rounded_are_said_with_their_interval(tmp_path):
    text = llamacpp_metrics(1234567, 3 * 1234567, 2345678, [1200000, 800000, 345678])
    assert "llamacpp:spec_decode_num_drafts_total 1.23457e+06" in text  # what std::ostream prints
    data = as_json(served(tmp_path, text, args=["--json"]))
    note = next(n for n in data["served"]["notes"] if "6 significant digits" in n)
    assert "llamacpp:spec_decode_num_drafts_total to +/-5" in note
    low, high = 1 + (2345680 - 5) / (1234570 + 5), 1 + (2345680 + 5) / (1234570 - 5)
    assert f"[{low:.5f}, {high:.5f}]" in note


@pytest.mark.parametrize("text, words", [
    (llamacpp_metrics(10, 30, 31, [10, 10, 10]), "31 accepted tokens exceed the 30 drafted tokens"),
    (llamacpp_metrics(10, 30, 12, [4, 6, 2]), "position 1 has 6 accepted tokens, more than the 4 of position 0"),
    (llamacpp_metrics(10, 30, 12, [11, 1, 0]), "position 0 has 11 accepted tokens, more than the 10 drafts"),
    (VERBATIM.replace("llamacpp:spec_decode_num_drafts_total 10", "llamacpp:spec_decode_num_drafts_total 10.5"),
     "llamacpp:spec_decode_num_drafts_total is 10.5, not a count"),
    (VERBATIM.replace('{position="1"} 4', '{position="3"} 4'), "has positions [0, 2, 3], not 0..n_max-1"),
])
def test_impossible_llamacpp_counters_are_refused_by_name(tmp_path, text, words):
    result = served(tmp_path, text)
    assert result.exit_code == 2 and words in " ".join(result.output.split()), result.output


def test_a_llamacpp_scrape_reconciled_with_an_offline_run(drafter_dirs, test_bed, tmp_path):
    """The scrape a llama-server running the same drafter on the same text would leave (drafts = walk steps,
    accepted at position i = steps reaching slot i + 1): served minus offline is 0 at every position and tau."""
    out = tmp_path / "run"
    made = runner.invoke(app, ["run", "-d", str(drafter_dirs["sliding"]), "--target", str(test_bed["qwen3"]),
                               "--out", str(out), "--limit", "2", "--max-new-tokens", "24", "--no-html"])
    assert made.exit_code == 0, made.output
    counts = json.loads((out / "run.json").read_text())["drafters"][0]["counts"]
    steps, reach = counts["steps"], counts["reach_counts"]
    before = llamacpp_metrics(0, 0, 0, None)
    after = llamacpp_metrics(steps, 3 * steps, sum(reach), reach)
    data = as_json(served(tmp_path, before, after, args=["--json", "--run", str(out)]))
    assert all(row["gap"] == pytest.approx(0) for row in data["gap"]["per_position"])
    assert data["gap"]["tau"]["gap"] == pytest.approx(0) and data["gap"]["tau"]["comparable"]
    assert any("llama.cpp defaults a DFlash2 drafter to sample_from_anchor=true" in c for c in data["likely_causes"])
