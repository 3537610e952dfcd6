"""`--prompts hf:REPO[:CONFIG][:SPLIT]` and the named sets end to end: offline reads of a hub cache written in
huggingface_hub's layout, one-line refusals (a cache miss names the `hf download` command), and mt-bench's
later turns following the target's own greedy answers in a real run on the test bed's target."""

from __future__ import annotations

import json
import re
import sys

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.core.errors import InputError
from dflash_eval.testing.hub_cache import card, parquet_bytes, write_dataset

runner = CliRunner()


def _refs(hf_hub, repo: str) -> str:
    return (hf_hub / ("datasets--" + repo.replace("/", "--")) / "refs" / "main").read_text()


def test_a_multi_turn_run_follows_the_target_s_own_greedy_answers(hf_hub, test_bed, drafter_dirs, tmp_path):
    """mt-bench turn 2 is sent after the assistant message z-lab's loop would append: the target's greedy
    continuation of turn 1 (the very one the run scores for turn 1), decoded with skip_special_tokens; turn 1
    comes out of the cache the answering filled (only the asked-for turn-2 continuations are generated in
    the run); --limit takes whole conversations; the revision is in provenance."""
    from transformers import AutoTokenizer

    from dflash_eval.commands.evaluate import RunOptions, evaluate
    from dflash_eval.core.progress import Reporter
    from dflash_eval.pipeline.hf_prompts import ANSWER_PLACEHOLDER
    from dflash_eval.pipeline.inputs import prepare_inputs
    from dflash_eval.pipeline.turns import answer_earlier_turns

    out = tmp_path / "mt"
    options = RunOptions(drafters=[f"{drafter_dirs['zlab']}:z"], target=str(test_bed["qwen3"]), prompts="mt-bench",
                         limit=2, max_new_tokens=8, device="cpu", cache_dir=tmp_path / "cache", out=out, argv=["test"])
    run = evaluate(options).document
    prov = run["provenance"]
    assert prov["prompts"]["sets"] == {"mt-bench": 4} and prov["work"]["continuations_generated"] == 2
    assert prov["prompts"]["dataset"]["revision"] == _refs(hf_hub, "HuggingFaceH4/mt_bench_prompts")
    rows = {json.loads(line)["prompt_id"]: json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()}
    assert sorted(rows) == ["mt-bench/81/1", "mt-bench/81/2", "mt-bench/82/1", "mt-bench/82/2"]
    tokenizer = AutoTokenizer.from_pretrained(test_bed["qwen3"])
    # the answered set travels in the resolved inputs (no process global): answered again, from the cache
    turns = {p.id: p for p in answer_earlier_turns(prepare_inputs(options), options, Reporter()).planned}
    assert len(turns) == 12  # the whole set is answered, whatever --limit asks for
    for key in ("81", "82"):
        answer = tokenizer.decode(rows[f"mt-bench/{key}/1"]["continuation_ids"], skip_special_tokens=True)
        first = int(key) - 81
        assert turns[f"mt-bench/{key}/2"].chat() == [
            {"role": "user", "content": f"Compose a travel blog post {first}."},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": f"Rewrite it, {first}, starting every sentence with A."}]
    settings = json.loads((out / "run_state.json").read_text())["settings"]["prompts"]
    assert not any(ANSWER_PLACEHOLDER.split("{")[0] in text for _, text, _ in settings)


def test_multi_turn_sets_refuse_sampling_and_responses_and_shards_rebalance(hf_hub, test_bed, tmp_path):
    from dflash_eval.core.progress import Reporter
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.pipeline.inputs import prepare_inputs
    from dflash_eval.pipeline.turns import answer_earlier_turns

    base = dict(drafters=[], target=str(test_bed["qwen3"]), prompts="mt-bench", max_new_tokens=6, device="cpu",
                cache_dir=tmp_path / "cache", out=tmp_path / "x")
    with pytest.raises(InputError, match="temperature > 0"):
        options = RunOptions(temperature=0.7, **base)
        answer_earlier_turns(prepare_inputs(options), options, Reporter())
    responses = tmp_path / "r.jsonl"
    responses.write_text("".join(json.dumps({"id": f"mt-bench/{81 + i}/{k}", "response": "ok"}) + "\n"
                                 for i in range(6) for k in (1, 2)))
    with pytest.raises(InputError, match="FILE.jsonl of messages"):
        options = RunOptions(responses=responses, **base)
        answer_earlier_turns(prepare_inputs(options), options, Reporter())
    shards = []
    for index in (0, 1):
        options = RunOptions(shard=f"{index}/2", **base)
        inputs = answer_earlier_turns(prepare_inputs(options), options, Reporter())
        shards.append({p.id for p in inputs.prompts})
        assert all(p.after is None or p.chat()[1]["content"] != "" for p in inputs.prompts)
    assert not shards[0] & shards[1] and len(shards[0] | shards[1]) == 12


def test_any_cached_dataset_by_name_with_a_prompt_field(hf_hub, tmp_path):
    from dflash_eval.pipeline.prompts import load_prompts

    chats = load_prompts("hf:someone/chats")  # arrow; the messages column, each cut after its last user turn
    assert [p.id for p in chats] == ["hf:someone/chats:default:train/0", "hf:someone/chats:default:train/1"]
    assert chats[0].chat() == [{"role": "user", "content": "Hi"}]
    assert [m["content"] for m in chats[1].chat()] == ["Be brief.", "Name a color.", "Red.", "Another?"]
    gsm = load_prompts("hf:openai/gsm8k:main", prompt_field="question")  # the test split by default
    assert len(gsm) == 20 and gsm[0].text == "Natalia sold 0 clips {x} in April." and gsm[0].set == "hf:openai/gsm8k:main:test"
    assert load_prompts("hf:HuggingFaceH4/MATH-500:test")[0].text == "Compute $x_0$."  # one name: the split here
    turns = load_prompts("hf:HuggingFaceH4/mt_bench_prompts")  # a list of strings: the user turns
    assert len(turns) == 12 and turns[1].after == turns[0].id
    for source, field, problem in (
            ("hf:openai/gsm8k", None, "several configs; name one (hf:openai/gsm8k:CONFIG): main, socratic"),
            ("hf:openai/gsm8k:main:validation", None, "no split 'validation' (splits: train, test)"),
            ("hf:openai/gsm8k:main", "body", "--prompt-field 'body': no such column (columns: question, answer)"),
            ("hf:princeton-nlp/SWE-bench_Lite:test", None, "name the column that holds the prompt with --prompt-field"),
            ("hf:openai", None, "expected a dataset repo id ORG/NAME"),
            ("humaneval", "prompt", "--prompt-field picks the column of an hf:REPO dataset")):
        with pytest.raises(InputError) as caught:
            load_prompts(source, prompt_field=field)
        assert problem in caught.value.one_line()
    other = "b" * 40  # another revision, asked for by commit; refs/main is untouched
    write_dataset(hf_hub, "openai/gsm8k", {"README.md": card([{"config_name": "main", "data_files": {"test": "main/test-*"}}]),
                                        "main/test-00000-of-00001.parquet": parquet_bytes({"question": ["old"]})},
                  revision=other, main=False)
    assert [p.text for p in load_prompts(f"hf:openai/gsm8k:main:test@{other}")] == ["old"]
    assert len(load_prompts("hf:openai/gsm8k:main:test")) == 20


def test_cache_misses_and_missing_pyarrow_are_one_line_with_the_fix(hf_hub, tmp_path, monkeypatch):
    from dflash_eval.pipeline.prompts import load_prompts

    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["prompts", "show", "gsm8k"], env={"HF_HUB_CACHE": str(empty)})
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "hf download --repo-type dataset openai/gsm8k" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["prompts", "show", "livecodebench"], env={"HF_HUB_CACHE": str(empty)})
    assert ("hf download --repo-type dataset livecodebench/code_generation_lite test.jsonl test2.jsonl test3.jsonl "
            "test4.jsonl test5.jsonl test6.jsonl") in result.output
    partial = tmp_path / "partial"
    snapshot = write_dataset(partial, "tatsu-lab/alpaca", {"data/train-00000-of-00001.parquet": b"PAR1"})
    (snapshot / "data" / "train-00000-of-00001.parquet").resolve().unlink()  # an interrupted download: no blob
    monkeypatch.setenv("HF_HUB_CACHE", str(partial))
    with pytest.raises(InputError, match="the download may be incomplete: hf download --repo-type dataset tatsu-lab/alpaca"):
        load_prompts("alpaca")
    write_dataset(partial, "tatsu-lab/alpaca", {"data/train-00000-of-00001.parquet": b"not parquet at all"})
    with pytest.raises(InputError, match=r"train-00000-of-00001.parquet: not a readable .parquet file"):
        load_prompts("alpaca")
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_hub))
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # the base install: no pyarrow
    with pytest.raises(InputError, match=r"needs pyarrow, which is not installed: pip install 'dflash-eval\[hf\]'"):
        load_prompts("gsm8k")
    assert len(load_prompts("math500")) == 6  # JSON lines need nothing


def test_prompts_list_says_which_sets_this_machine_has(hf_hub, tmp_path):
    result = runner.invoke(app, ["prompts", "list"], env={"HF_HUB_CACHE": str(hf_hub), "COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert result.output.count("│ yes, ") == 8 and "hf download" not in result.output
    revision = _refs(hf_hub, "HuggingFaceH4/mt_bench_prompts")[:12]
    assert re.search(rf"mt-bench +│ HuggingFaceH4/mt_bench_prompts +│ yes, {revision}", result.output)
    empty = tmp_path / "none"
    empty.mkdir()
    result = runner.invoke(app, ["prompts", "list"], env={"HF_HUB_CACHE": str(empty), "COLUMNS": "250"})
    assert result.output.count("│ no ") == 8
    assert "hf download --repo-type dataset princeton-nlp/SWE-bench_Lite" in result.output


def test_run_with_an_hf_source_and_a_prompt_field_from_the_cli(hf_hub, test_bed, drafter_dirs, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "-d", str(drafter_dirs["zlab"]), "-t", str(test_bed["qwen3"]), "--prompts",
                                 "hf:openai/gsm8k:main:test", "--prompt-field", "question", "--limit", "2",
                                 "--max-new-tokens", "4", "--device", "cpu", "--no-html", "--out", str(out),
                                 "--cache-dir", str(tmp_path / "cache")], env={"HF_HUB_CACHE": str(hf_hub)})
    assert result.exit_code == 0, result.output
    dataset = json.loads((out / "run.json").read_text())["provenance"]["prompts"]["dataset"]
    assert dataset == {"repo": "openai/gsm8k", "revision": _refs(hf_hub, "openai/gsm8k"), "config": "main",
                       "split": "test", "files": ["main/test-00000-of-00001.parquet"], "field": "question",
                       "construction": "dflash-eval hf: (pipeline/hf_prompts.py)", "draw": None}


def test_the_paper_s_tau_stands_beside_a_named_set_s_run(hf_hub, test_bed, drafter_dirs, tmp_path):
    """A target the paper's table knows (a folder named Qwen3-8B) on gsm8k: the report prints the paper's tau
    for gsm8k and says that 2 prompts are not the paper's 128."""
    import shutil

    from dflash_eval.formats.references import published_tau

    target = shutil.copytree(test_bed["qwen3"], tmp_path / "Qwen3-8B")
    result = runner.invoke(app, ["run", "-d", str(drafter_dirs["zlab"]), "-t", str(target), "--prompts", "gsm8k",
                                 "--limit", "2", "--max-new-tokens", "4", "--device", "cpu", "--out",
                                 str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache")],
                           env={"HF_HUB_CACHE": str(hf_hub), "COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    paper = published_tau("Qwen/Qwen3-8B", "gsm8k")
    assert f"paper tau for gsm8k at temperature 0 (z-lab drafter): {paper:.2f}" in result.output
    assert "2 gsm8k prompts (paper: 128; --prompts paper:gsm8k gives its rows)" in result.output
    html = (tmp_path / "run" / "report.html").read_text()
    assert re.search(rf"<td>gsm8k</td>.*?<td class=\"n\">{paper:.2f}</td>", html, re.S)  # the per-set paper tau
