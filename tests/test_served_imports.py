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


# ------------------------------------------------------------------ AIPerf

from dflash_eval.testing import served_payloads as P  # noqa: E402

K = 3  # the fixture drafters' block of 4


@pytest.fixture(scope="module")
def offline_run(trained, tmp_path_factory):
    """The offline run AIPerf's exports are built from: the fixture trainer's good drafter on the tiny qwen3."""
    out = tmp_path_factory.mktemp("aiperf") / "run"
    made = runner.invoke(app, ["run", "-d", f"{trained['qwen3']['good']}:good", "--target", str(trained["qwen3"]["target"]),
                               "--prompts", "demo", "--limit", "4", "--max-new-tokens", "40", "--out", str(out),
                               "--no-html"])
    assert made.exit_code == 0, made.output
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return out, rows


def walk(row):
    return [n - 1 for n in row["walk_accept_lengths"]]


def records_file(tmp_path, rows, edit=None, extra=()):
    """profile_export.jsonl as AIPerf writes it: one MetricRecordInfo a line (orjson: compact), each request's
    conversation_id the run's prompt id (a multi_turn input whose session_id is the prompt id)."""
    lines = []
    for i, r in enumerate(rows):
        spec = P.aiperf_acceptance(walk(r), K, completion_tokens=r["continuation_len"], detailed=True)
        if edit and i == 0:
            edit(spec)
        lines.append(P.aiperf_record(i, r["prompt_id"], spec))
    path = tmp_path / "profile_export.jsonl"
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in [*lines, *extra]))
    return path


def per_request(path, run, *extra):
    return runner.invoke(app, ["served", "--per-request", str(path), "--run", str(run), *extra], env={"COLUMNS": "200"})


def test_aiperf_records_reconcile_with_the_offline_run(offline_run, tmp_path):
    run, rows = offline_run
    warmup = P.aiperf_record(90, rows[0]["prompt_id"], P.aiperf_acceptance([0, 1], K), phase="warmup")
    failed = P.aiperf_record(91, rows[1]["prompt_id"], None, error={"code": 500, "type": "Internal", "message": "x"})
    path = records_file(tmp_path, rows, extra=(warmup, failed))
    data = as_json(per_request(path, run, "--json"))
    assert data["matched"] == 4 and data["engines"] == ["aiperf"] and not data["unmatched"]
    assert [e["delta"] for e in data["prompts"]] == [0.0] * 4 and data["paired_delta"]["estimate"] == 0.0
    # AIPerf's records hold no output text: matched by conversation_id, the text (and so the walk) not compared
    assert all(e["matched_by"] == "id" and e["text"]["status"] == "unknown" and e["walk"] is None for e in data["prompts"])
    assert any("AIPerf records left out: 2 (line 5: a warmup record; line 6: an error record)" in n for n in data["notes"])
    assert "mean_acceptance_length = 1 + accepted / steps" in data["definitions"]["aiperf"]


@pytest.mark.parametrize("edit, words", [
    (lambda s: s["acceptance_histogram"].update({"0": s["acceptance_histogram"].get("0", 0) + 1}),
     "spec_decode_acceptance.acceptance_histogram counts"),
    (lambda s: s.update(num_accepted_draft_tokens=s["num_draft_tokens"] + 1), "spec_decode_acceptance.acceptance_histogram "
     "accounts for"),
    (lambda s: s.update(mean_acceptance_length=s["mean_acceptance_length"] + 0.5), "spec_decode_acceptance.mean_acceptance_length is"),
    (lambda s: s.update(draft_acceptance_rate=1.5), "spec_decode_acceptance.draft_acceptance_rate is 1.5, not a rate"),
    (lambda s: s.update(num_spec_steps=-1), "spec_decode_acceptance.num_spec_steps is -1, not a count"),
])
def test_impossible_aiperf_records_are_refused_by_name(offline_run, tmp_path, edit, words):
    run, rows = offline_run
    result = per_request(records_file(tmp_path, rows, edit), run)
    assert result.exit_code == 2 and words in " ".join(result.output.split()), result.output


def test_aiperf_summary_reconciles_and_says_both_lengths(offline_run, tmp_path):
    run, rows = offline_run
    specs = [P.aiperf_acceptance(walk(r), K, completion_tokens=r["continuation_len"]) for r in rows]
    summary = P.aiperf_summary(specs, "demo", "spec_al_humaneval")
    data = as_json(served(tmp_path, json.dumps(summary, indent=2), args=["--json", "--run", str(run)], suffix=".json"))
    s = data["served"]
    assert s["engine"] == "aiperf" and s["tau_definition"]["key"] == "aiperf_token_weighted"
    assert s["accept_length_histogram"] == [int(summary["pooled_spec_decode_acceptance_histogram"].get(str(j), 0))
                                            for j in range(len(s["accept_length_histogram"]))]
    assert data["gap"]["tau"]["gap"] == pytest.approx(0) and data["gap"]["tau"]["low"] is not None
    assert any("mean over requests of each request's 1 + accepted / steps" in n for n in s["notes"])
    # AIPerf's spec_al_humaneval beside the run's demo prompts: not the same prompts, said
    assert "AIPerf's spec_al_humaneval" in data["parity"] and "has no prompt set in this run" in data["parity"]
    bad = dict(summary, total_accepted_draft_tokens={"unit": "tokens", "avg": summary["total_draft_tokens"]["avg"] + 1})
    refused = served(tmp_path, json.dumps(bad), suffix=".json")
    assert refused.exit_code == 2 and "pooled_spec_decode_acceptance_histogram accounts for" in " ".join(refused.output.split())
    bad = dict(summary, total_spec_decode_steps={"unit": "count", "avg": 2.5})
    refused = served(tmp_path, json.dumps(bad), suffix=".json")
    assert refused.exit_code == 2 and "total_spec_decode_steps.avg is 2.5, not a count" in refused.output


def test_aiperf_speed_bench_csv_beside_an_offline_run(drafter_dirs, test_bed, tmp_path):
    out = tmp_path / "run"
    made = runner.invoke(app, ["run", "-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]), "--prompts",
                               "humaneval", "--limit", "2", "--max-new-tokens", "12", "--no-html", "--out", str(out)])
    assert made.exit_code == 0, made.output
    micro = json.loads((out / "run.json").read_text())["drafters"][0]["metrics"]["tau_micro"]
    text = P.aiperf_speed_bench_csv({"Qwen/Qwen3-8B": {"humaneval": micro, "mbpp": 0.56, "gsm8k": 40.0}},
                                    ["gsm8k", "humaneval", "mbpp"])
    assert text.startswith("Model,gsm8k,humaneval,mbpp,Overall\r\n")
    data = as_json(served(tmp_path, text, args=["--json", "--run", str(out)], suffix=".csv"))
    rows = {r["category"]: r for r in data["categories"]}
    assert rows["humaneval"]["difference"] == pytest.approx(round(micro, 2) - micro)
    assert "the raw prompt, not z-lab's" in rows["humaneval"]["parity"] and "not the same prompts" in rows["humaneval"]["parity"]
    assert [f["rule"] for f in rows["mbpp"]["flags"]] == ["tau_below_one"]  # an accept_rate cell
    assert [f["rule"] for f in rows["gsm8k"]["flags"]] == ["tau_above_block"]  # B = 4: a throughput?
    assert rows["gsm8k"]["difference"] is None and rows["mbpp"]["offline"] is None
    assert data["definition"]["key"] == "aiperf_speed_bench" and data["overall"] == pytest.approx(
        round((round(micro, 2) + 0.56 + 40.0) / 3, 2))
    shown = served(tmp_path, text, args=["--run", str(out)], suffix=".csv")
    assert shown.exit_code == 0 and "IMPLAUSIBLE (tau_above_block)" in shown.stdout
    two = P.aiperf_speed_bench_csv({"a": {"humaneval": 2.0}, "b": {"humaneval": 3.0}}, ["humaneval"])
    ambiguous = served(tmp_path, two, suffix=".csv")
    assert ambiguous.exit_code == 2 and "holds 2 models ('a', 'b'): choose one with --model" in ambiguous.output
    assert as_json(served(tmp_path, two, args=["--json", "--model", "b"], suffix=".csv"))["model"] == "b"


# ------------------------------------------------------------------ SGLang's detailed ordered lengths (#34814)


def sglang_file(tmp_path, rows, widths=None, edit=None):
    lines = []
    for i, r in enumerate(rows):
        accepted = walk(r)
        stats = P.sglang_detailed_stats(accepted, widths(len(accepted)) if widths else [K + 1] * len(accepted))
        body = P.sglang_generate_response("".join(r["continuation_pieces"]), r["continuation_ids"], accepted, K,
                                          r["prompt_len"], detailed=stats)
        if edit and i == 0:
            edit(body["meta_info"])
        lines.append(P.starlette_json({"id": r["prompt_id"], "response": body}))
    path = tmp_path / "sglang.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_sglang_detailed_lengths_give_the_walk_step_by_step(offline_run, tmp_path):
    run, rows = offline_run
    data = as_json(per_request(sglang_file(tmp_path, rows), run, "--json"))
    assert data["engines"] == ["sglang"] and [e["delta"] for e in data["prompts"]] == [0.0] * 4
    # the ordered accept lengths make the walk comparable step by step (0.5.23's counters alone do not)
    assert all(e["walk"]["parted_at"] is None and e["walk"]["compared"] > 0 for e in data["prompts"])


def test_sglang_ragged_verification_gives_no_drafted_count(offline_run, tmp_path):
    run, rows = offline_run
    ragged = sglang_file(tmp_path, rows, widths=lambda n: [K + 1 if i % 2 else K for i in range(n)])
    data = as_json(per_request(ragged, run, "--json"))
    notes = data["prompts"][0]["notes"]
    assert any("ragged verification (verify widths 3..4): no drafted count and no acceptance rate" in n for n in notes)
    assert [e["delta"] for e in data["prompts"]] == [0.0] * 4  # tau = 1 + accepted / steps needs no width


@pytest.mark.parametrize("edit, words", [
    (lambda m: m["speculative_decoding_stats"]["accept_lengths"].__setitem__(0, m["speculative_decoding_stats"]
                                                                             ["accept_lengths"][0] + 1),
     "meta_info.speculative_decoding_stats.accept_lengths sums to"),
    (lambda m: m["speculative_decoding_stats"]["verify_lengths"].pop(), "verify_lengths and"),
    (lambda m: m["speculative_decoding_stats"].update(verify_lengths=[1] * len(m["speculative_decoding_stats"]
                                                                               ["verify_lengths"])),
     "drafts of a 1-token verification"),
])
def test_impossible_sglang_lengths_are_refused_by_name(offline_run, tmp_path, edit, words):
    run, rows = offline_run
    rows = [r for r in rows if any(n > 1 for n in r["walk_accept_lengths"])]
    result = per_request(sglang_file(tmp_path, rows, edit=edit), run)
    assert result.exit_code == 2 and words in " ".join(result.output.split()), result.output


# ------------------------------------------------------------------ the first divergence and the target's logit gap


def test_first_divergence_with_the_targets_logit_gap(offline_run, trained, tmp_path):
    """A served text that leaves the offline greedy text at token 5: named, the rest said to be on another text,
    the taus before it given, and (--logit-gap) the target's logit gap there, checked against transformers'
    own forward of the target."""
    import torch
    from transformers import AutoModelForCausalLM

    from dflash_eval.model.target import load_tokenizer
    from dflash_eval.pipeline.prompts import load_prompts, prompt_ids
    from dflash_eval.serving.commands.divergence import NEAR_TIE

    run, rows = offline_run
    row, at = rows[0], 5
    ids = list(row["continuation_ids"])
    other = (ids[at] + 1) % 50 or 1
    ids[at] = other
    spec = P.vllm_spec_metrics(walk(row), K, detailed=True)
    body = P.vllm_chat_response("demo", "", ids, row["prompt_len"], spec)
    path = tmp_path / "responses.jsonl"
    path.write_text(P.starlette_json({"id": row["prompt_id"], "response": body,
                                      "request": {"model": "demo", "temperature": 0.0}}) + "\n")
    data = as_json(per_request(path, run, "--json", "--logit-gap"))
    text = data["prompts"][0]["text"]
    assert text["status"] == "differs" and text["token"] == at and text["served_token"] == other
    assert text["rest_on_different_text"] and text["tokens_after"] == len(ids) - at - 1
    assert "vllm #54928" in text["means"] and data["flags"][0]["rule"] == "text_not_greedy"
    before = text["before_divergence"]
    assert before["served_tau"] == before["offline_tau"] and before["steps"][0] == before["steps"][1]
    target = trained["qwen3"]["target"]
    prompt = next(p for p in load_prompts("demo") if p.id == row["prompt_id"])
    context = prompt_ids(load_tokenizer(target), prompt, False) + row["continuation_ids"][:at]
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([context])).logits[0, -1]
    expected = float(logits[row["continuation_ids"][at]] - logits[other])
    gap = text["logit_gap"]
    assert gap["status"] == "measured" and gap["gap"] == pytest.approx(expected, abs=1e-4)
    assert gap["offline_is_argmax"] and gap["verdict"] == ("near-tie" if abs(expected) < NEAR_TIE else
                                                           "clear argmax the server did not take")
    shown = per_request(path, run, "--logit-gap")
    assert shown.exit_code == 0 and "target logits at token 5" in shown.stdout and "before that token" in shown.stdout
    assert per_request(path, run).exit_code == 0  # without --logit-gap no target is loaded


def test_served_acceptance_of_exactly_one_at_every_position_is_flagged(tmp_path):
    """onnxruntime-genai #2460's shape: every position accepted on every draft (40 drafts, k = 3)."""
    data = as_json(served(tmp_path, llamacpp_metrics(40, 120, 120, [40, 40, 40]), args=["--json"]))
    assert [f["rule"] for f in data["flags"]] == ["all_one"]
    shown = served(tmp_path, llamacpp_metrics(40, 120, 120, [40, 40, 40]))
    assert "IMPLAUSIBLE (all_one)" in shown.stdout and "onnxruntime-genai #2460" in " ".join(shown.stdout.split())
    assert as_json(served(tmp_path, VERBATIM, args=["--json"]))["flags"] == []
