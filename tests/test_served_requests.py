"""`served --per-request FILE --run RUN`: served requests reconciled with the offline run prompt by prompt.

The served files are written as vLLM 0.33 and SGLang 0.5.23 serialize their responses
(dflash_eval/testing/served_payloads.py), filled from the offline run's own walks: they must reconcile
exactly. Then one difference is injected at a time (a request with lower acceptance, a non-greedy text,
a request for no prompt, impossible numbers) and each must be found and named."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.testing import served_payloads as P

runner = CliRunner()
K = 3  # the fixture drafters' block of 4


@pytest.fixture(scope="module")
def demo_run(trained, tmp_path_factory):
    """The offline run the served files are built from: the fixture trainer's good drafter on the tiny qwen3."""
    out = tmp_path_factory.mktemp("per-request") / "run"
    made = runner.invoke(app, ["run", "-d", f"{trained['qwen3']['good']}:good", "--target", str(trained["qwen3"]["target"]),
                               "--prompts", "demo", "--limit", "4", "--max-new-tokens", "40", "--out", str(out),
                               "--cache-dir", str(out.parent / "cache")])
    assert made.exit_code == 0, made.output
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return out, rows


def walk(row):
    return [n - 1 for n in row["walk_accept_lengths"]]


def vllm_line(row, accepted=None, detailed=True, ids=None, key=True, request=None):
    ids = row["continuation_ids"] if ids is None else ids
    spec = P.vllm_spec_metrics(walk(row) if accepted is None else accepted, K, detailed=detailed)
    body = P.vllm_chat_response("demo", "".join(row["continuation_pieces"]), ids, row["prompt_len"], spec)
    line = {"response": body, "request": request or {"model": "demo", "temperature": 0.0, "max_tokens": 40}}
    if key:
        line["id"] = row["prompt_id"]
    return P.starlette_json(line)


def write(tmp_path, lines, name="responses.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def reconcile(path, run, *extra):
    return runner.invoke(app, ["served", "--per-request", str(path), "--run", str(run), *extra],
                         env={"COLUMNS": "200"})


def as_json(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_file_built_from_the_offline_walks_reconciles_exactly(demo_run, tmp_path):
    run, rows = demo_run
    # vLLM detailed chat responses, SGLang /generate responses, vLLM CompletionOutput dumps (summary level)
    vllm = write(tmp_path, [vllm_line(r) for r in rows], "vllm.jsonl")
    sglang = write(tmp_path, [P.starlette_json({"id": r["prompt_id"], "response": P.sglang_generate_response(
        "".join(r["continuation_pieces"]), r["continuation_ids"], walk(r), K, r["prompt_len"])}) for r in rows],
        "sglang.jsonl")
    offline = write(tmp_path, [P.starlette_json({"id": r["prompt_id"], "response": P.vllm_completion_output(
        "".join(r["continuation_pieces"]), r["continuation_ids"], walk(r), K, detailed=False)}) for r in rows],
        "outputs.jsonl")
    for path, engine in ((vllm, "vllm"), (sglang, "sglang"), (offline, "vllm")):
        data = as_json(reconcile(path, run, "--json"))
        assert data["matched"] == 4 and data["engines"] == [engine] and not data["unmatched"]
        assert [e["delta"] for e in data["prompts"]] == [0.0] * 4
        assert data["paired_delta"]["estimate"] == 0.0
        assert all(e["text"]["status"] == "greedy" for e in data["prompts"])
        assert not data["differs_from_offline"] and not data["parted"] and not data["below_offline"]
        assert all(row["gap"] == 0.0 for row in data["histogram_shift"])
    sg = as_json(reconcile(sglang, run, "--json"))["prompts"][0]
    # SGLang's own length counts the prefill token: completion tokens / steps, above our tau
    row = rows[0]
    assert sg["served"]["reported_length"] == pytest.approx(row["continuation_len"] / len(walk(row)))
    assert sg["served"]["tau"] == pytest.approx(1 + sum(walk(row)) / len(walk(row)))
    assert sg["served"]["tau"] < sg["served"]["reported_length"]
    detailed = as_json(reconcile(vllm, run, "--json"))
    assert all(e["walk"]["parted_at"] is None and e["walk"]["compared"] == len(walk(r))
               for e, r in zip(detailed["prompts"], rows))
    shown = reconcile(vllm, run, "--html-file", str(tmp_path / "requests.html"))
    assert shown.exit_code == 0 and "served - offline tau over prompts: delta +0.000" in shown.stdout
    assert "Served requests against the offline run" in (tmp_path / "requests.html").read_text()


def test_each_injected_difference_is_found_and_named(demo_run, tmp_path):
    run, rows = demo_run
    low = P.capped_walk(rows[0], 1)  # the same (lossless) text, at most one draft accepted per step
    assert sum(low) < sum(walk(rows[0])) and sum(low) + len(low) == len(walk(rows[0])) + sum(walk(rows[0]))
    wrong = list(rows[2]["continuation_ids"])
    wrong[5] = (wrong[5] + 1) % 1000
    lines = [vllm_line(rows[0], accepted=low), vllm_line(rows[1]), vllm_line(rows[2], ids=wrong),
             vllm_line(rows[3], key=False, request={"messages": [{"role": "user", "content": "not a demo prompt"}]})]
    data = as_json(reconcile(write(tmp_path, lines), run, "--json"))
    assert data["matched"] == 3 and data["unmatched"] == [
        {"request": "line 4", "why": "no prompt of the run has this id, text or token ids"}]
    assert data["offline_prompts_without_request"] == [rows[3]["prompt_id"]]
    by = {e["prompt"]: e for e in data["prompts"]}
    lower = by[rows[0]["prompt_id"]]
    assert lower["delta"] < 0 and data["below_offline"] == [rows[0]["prompt_id"]]
    first = next(i for i, (a, b) in enumerate(zip(low, walk(rows[0]))) if a != b)
    assert lower["walk"]["parted_at"] == first and data["parted"] == [rows[0]["prompt_id"]]
    assert lower["blocks"] and lower["blocks"][0]["step"] == first and lower["blocks"][0]["served_accepted"] == low[first]
    bad = by[rows[2]["prompt_id"]]
    assert data["differs_from_offline"] == [rows[2]["prompt_id"]] and bad["text"]["token"] == 5
    shown = reconcile(write(tmp_path, lines), run)
    assert f"differs from the offline greedy text: prompt {rows[2]['prompt_id']}: the served text differs from the " \
           "offline greedy text at token 5" in shown.stdout
    # a server's kernels can do that alone: what is known is said, never "not lossless", and the pairing that
    # can judge it is offered
    assert "lossless" not in shown.stdout.replace("to judge losslessness", "") and "NOT GREEDY" not in shown.stdout
    assert "to judge losslessness give --non-speculative FILE" in shown.stdout
    assert f"walks part: prompt {rows[0]['prompt_id']}: the walks part at step {first}" in shown.stdout
    assert "the server accepts less than offline beyond noise on: " + rows[0]["prompt_id"] in shown.stdout


def test_requests_without_ids_are_matched_by_their_prompt(demo_run, tmp_path):
    from dflash_eval.model.target import load_tokenizer
    from dflash_eval.pipeline.prompts import load_prompts, prompt_ids

    run, rows = demo_run
    prompts = {p.id: p for p in load_prompts("demo")}
    from dflash_eval.core.documents.results import read_run_document

    tokenizer = load_tokenizer(read_run_document(run)["provenance"]["target"]["path"])
    first, second = rows[0], rows[1]
    by_chat = vllm_line(first, key=False, request={"messages": prompts[first["prompt_id"]].chat(), "temperature": 0})
    body = P.sglang_generate_response("".join(second["continuation_pieces"]), second["continuation_ids"], walk(second),
                                      K, second["prompt_len"])
    by_ids = P.starlette_json({"request": {"input_ids": prompt_ids(tokenizer, prompts[second["prompt_id"]], read_run_document(run)["provenance"]["enable_thinking"])},
                               "response": body})
    data = as_json(reconcile(write(tmp_path, [by_chat, by_ids]), run, "--json"))
    assert [(e["prompt"], e["matched_by"]) for e in data["prompts"]] == [(first["prompt_id"], "chat messages"),
                                                                        (second["prompt_id"], "prompt token ids")]
    twice = reconcile(write(tmp_path, [vllm_line(first), vllm_line(first)]), run)
    assert twice.exit_code == 2 and "line 1 (id 'demo/0') and line 2 (id 'demo/0') both match prompt 'demo/0'" \
        in twice.output


@pytest.mark.parametrize("edit, named", [
    (lambda b: b["metrics"]["speculative_decoding"].update(num_accepted_draft_tokens=10 ** 6),
     "metrics.speculative_decoding.acceptance_histogram accounts for"),
    (lambda b: b["metrics"]["speculative_decoding"].update(draft_acceptance_rate=1.5),
     "metrics.speculative_decoding.draft_acceptance_rate is 1.5, not a rate in [0, 1]"),
    (lambda b: b["metrics"]["speculative_decoding"].update(mean_acceptance_length=0.3),
     "metrics.speculative_decoding.mean_acceptance_length is 0.3, not an acceptance length"),
    (lambda b: b["metrics"]["speculative_decoding"]["per_step_accepted"].__setitem__(0, 99),
     "per_step_accepted sums to"),
    (lambda b: b.update(metrics=None), "holds no per-request speculative-decoding metrics"),
])
def test_impossible_request_numbers_are_refused_by_name(demo_run, tmp_path, edit, named):
    run, rows = demo_run
    line = json.loads(vllm_line(rows[0]))
    edit(line["response"])
    result = reconcile(write(tmp_path, [json.dumps(line)]), run)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "responses.jsonl: line 1" in result.output and named in result.output, result.output


def test_impossible_sglang_numbers_are_refused_by_name(demo_run, tmp_path):
    run, rows = demo_run
    row = rows[0]
    body = P.sglang_generate_response("x", row["continuation_ids"], walk(row), K, row["prompt_len"])
    body["meta_info"]["spec_accept_length"] = 0.3
    result = reconcile(write(tmp_path, [json.dumps({"id": row["prompt_id"], "response": body})]), run)
    assert result.exit_code == 2 and "meta_info.spec_accept_length is 0.3, not an acceptance length" in result.output
    body = P.sglang_generate_response("x", row["continuation_ids"], walk(row), K, row["prompt_len"])
    body["meta_info"]["spec_num_correct_drafts"] += 1000
    result = reconcile(write(tmp_path, [json.dumps({"id": row["prompt_id"], "response": body})]), run)
    assert result.exit_code == 2 and "line 1" in result.output and "spec_num_correct_drafts" in result.output


def plain_line(row, ids=None, engine="vllm", key=True):
    """The same server's response with speculative decoding off, as it serializes it: vLLM's chat response with
    `metrics.speculative_decoding` None, SGLang's /generate without the spec_* fields."""
    ids = row["continuation_ids"] if ids is None else ids
    text = "".join(row["continuation_pieces"])
    if engine == "vllm":
        body = P.vllm_chat_response("demo", text, ids, row["prompt_len"], None)
        line = {"response": body, "request": {"model": "demo", "temperature": 0.0, "max_tokens": 40}}
    else:
        line = {"response": P.sglang_generate_response(text, ids, [], K, row["prompt_len"])}
    if key:
        line["id"] = row["prompt_id"]
    return P.starlette_json(line)


def test_the_same_servers_non_speculative_text_judges_losslessness(demo_run, tmp_path):
    """Kernel numerics move the server's greedy text off the offline one (prompt 0: the server's own greedy
    text, with or without speculation, differs at token 3); speculation changes prompt 2's text (at token
    6, where its non-speculative text holds the offline token). Only the second is named as changed by
    speculation; the first is lossless and said to differ from the offline text."""
    run, rows = demo_run
    kernel = list(rows[0]["continuation_ids"])
    kernel[3] = (kernel[3] + 1) % 1000  # the server's kernels, speculative or not
    changed = list(rows[2]["continuation_ids"])
    changed[6] = (changed[6] + 1) % 1000  # speculation only
    speculative = [vllm_line(rows[0], ids=kernel, detailed=False), vllm_line(rows[1]), vllm_line(rows[2], ids=changed)]
    for engine in ("vllm", "sglang"):
        plain = [plain_line(rows[0], ids=kernel, engine=engine), plain_line(rows[1], engine=engine),
                 plain_line(rows[2], engine=engine), plain_line(rows[3], engine=engine)]
        paths = [write(tmp_path, speculative, "spec.jsonl"), "--run", str(run), "--non-speculative",
                 str(write(tmp_path, plain, f"plain-{engine}.jsonl"))]
        data = as_json(runner.invoke(app, ["served", "--per-request", *paths, "--json"]))
        ids = [r["prompt_id"] for r in rows]
        assert data["differs_from_offline"] == [ids[0], ids[2]]
        judged = data["non_speculative"]
        assert judged["lossless"] == [ids[0], ids[1]] and judged["changed"] == [ids[2]]
        assert judged["matched"] == 4 and not judged["unmatched"] and not judged["requests_without_reference"]
        by = {e["prompt"]: e for e in data["prompts"]}
        assert by[ids[2]]["plain"]["token"] == 6 and by[ids[2]]["plain"]["plain_token"] == rows[2]["continuation_ids"][6]
        shown = runner.invoke(app, ["served", "--per-request", *paths], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, shown.output
        assert f"CHANGED BY SPECULATION: prompt {ids[2]}: the speculative text leaves the same server's non-speculative " \
               "greedy text at token 6" in shown.stdout
        assert "2 of 3 prompts lossless" in shown.stdout and f"prompt {ids[0]}: the served text differs from the " \
               "offline greedy text at token 3" in shown.stdout
        assert "CHANGED BY SPECULATION: prompt " + ids[0] not in shown.stdout
        assert "to judge losslessness give" not in shown.stdout


def test_a_non_speculative_file_that_is_not_one_is_refused_by_name(demo_run, tmp_path):
    run, rows = demo_run
    spec = write(tmp_path, [vllm_line(rows[0])], "spec.jsonl")

    def judged(lines, *extra):
        return runner.invoke(app, ["served", "--per-request", str(spec), "--run", str(run), "--non-speculative",
                                   str(write(tmp_path, lines, "plain.jsonl")), *extra])

    speculative_too = judged([vllm_line(rows[0])])
    assert speculative_too.exit_code == 2 and "plain.jsonl: line 1: metrics.speculative_decoding.num_spec_steps = " \
        in speculative_too.output and "speculative decoding off" in speculative_too.output
    sglang = P.starlette_json({"id": rows[0]["prompt_id"], "response": P.sglang_generate_response(
        "x", rows[0]["continuation_ids"], walk(rows[0]), K, rows[0]["prompt_len"])})
    assert "meta_info.spec_verify_ct" in judged([sglang]).output
    sampled = json.loads(plain_line(rows[0]))
    sampled["request"]["temperature"] = 0.7
    result = judged([json.dumps(sampled)])
    assert result.exit_code == 2 and "line 1: temperature 0.7: the non-speculative reference must be greedy" in result.output
    twice = judged([plain_line(rows[0]), plain_line(rows[0])])
    assert twice.exit_code == 2 and "both match prompt" in twice.output
    alone = runner.invoke(app, ["served", str(spec), "--non-speculative", str(spec)])
    assert alone.exit_code == 2 and "--non-speculative pairs with --per-request" in alone.output
    assert "Traceback" not in speculative_too.output + result.output + alone.output


def test_served_requests_of_another_length_are_cut_to_the_span_both_generated(demo_run, tmp_path):
    """Issue 49 D: 64-token served requests were paired with a 16-token offline run, two populations in one
    table without a word (the served walk's later, different text lowered its tau). Each row now pairs one
    span: the longer side is cut to the tokens both generated (per-step arrays), said on screen; a served
    walk that cannot be cut is left out, named."""
    run, rows = demo_run
    row = rows[0]
    extra = 24
    ids = list(row["continuation_ids"]) + [row["continuation_ids"][-1]] * extra
    served_walk = walk(row) + [0] * extra  # the text beyond the offline run's cap, one token a step
    data = as_json(reconcile(write(tmp_path, [vllm_line(row, accepted=served_walk, ids=ids)]), run, "--json"))
    entry = data["prompts"][0]
    assert entry["delta"] == 0.0 and entry["served"]["steps"] == len(walk(row)) and not data["below_offline"]
    assert any(n.startswith("1 of 1 prompts generated another number of tokens served than offline (served up to "
                            f"{len(ids)}, offline up to {len(row['continuation_ids'])})") for n in data["notes"])
    shown = reconcile(write(tmp_path, [vllm_line(row, accepted=served_walk, ids=ids)]), run)
    assert "note: 1 of 1 prompts generated another number of tokens" in shown.stdout
    summary = vllm_line(row, accepted=served_walk, ids=ids, detailed=False)
    data = as_json(reconcile(write(tmp_path, [summary]), run, "--json"))
    assert data["prompts"] == [] and any(n.startswith("left out of every table: 1 prompts") for n in data["notes"])


def test_more_verify_steps_than_output_tokens_are_refused(demo_run, tmp_path):
    """Issue 49 D: an SGLang body with spec_verify_ct 3 and two output tokens was read (each step commits a
    token at least: EagleVerifyInput.verify)."""
    run, rows = demo_run
    body = {"text": "ab", "output_ids": [5, 6],
            "meta_info": {"spec_verify_ct": 3, "spec_num_correct_drafts": 0, "completion_tokens": 2}}
    result = reconcile(write(tmp_path, [json.dumps({"id": rows[0]["prompt_id"], "response": body})]), run)
    assert result.exit_code == 2 and "line 1 (id 'demo/0'): 3 verify steps for 2 output tokens" in result.output, result.output
