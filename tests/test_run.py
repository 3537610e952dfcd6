"""`dflash-eval run` end to end on the tiny fixtures: outputs, one tap pass, caching, refusals."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()


def run_cli(*args, cache):
    return runner.invoke(app, ["run", *args, "--cache-dir", str(cache), "--max-new-tokens", "24", "--limit", "3"],
                         env={"COLUMNS": "200"})


def test_three_drafters_share_one_tap_pass_per_prompt_and_continuations_are_cached(drafter_dirs, test_bed, tmp_path):
    cache = tmp_path / "cache"
    args = ["--target", str(test_bed["qwen3"]), "-d", str(drafter_dirs["zlab"]), "-d",
            f"{drafter_dirs['speculators']}:spec", "-d", str(drafter_dirs["sliding"])]
    first = run_cli(*args, "--out", str(tmp_path / "a"), cache=cache)
    assert first.exit_code == 0, first.output
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    assert run["provenance"]["work"] == {"tap_passes": 3, "continuations_generated": 3, "prompts_evaluated": 3}
    assert [d["name"] for d in run["drafters"]] == ["zlab", "spec", "sliding"]
    # identical weights in two formats: identical metrics
    assert run["drafters"][0]["metrics"] == run["drafters"][1]["metrics"]
    second = run_cli(*args, "--out", str(tmp_path / "b"), cache=cache)
    assert second.exit_code == 0, second.output
    again = json.loads((tmp_path / "b" / "run.json").read_text())
    assert again["provenance"]["work"]["continuations_generated"] == 0
    assert [d["metrics"] for d in again["drafters"]] == [d["metrics"] for d in run["drafters"]]


def test_output_contract(drafter_dirs, test_bed, tmp_path):
    result = run_cli("-d", str(drafter_dirs["speculators"]), "--out", str(tmp_path / "r"), cache=tmp_path / "c")
    assert result.exit_code == 0, result.output
    assert "tau macro" in result.stdout
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    prov = run["provenance"]
    assert run["schema_version"] == 1
    assert prov["target"]["path"] == str(test_bed["qwen3"].resolve())  # taken from the recorded verifier
    assert prov["enable_thinking"] is False and prov["max_new_tokens"] == 24 and prov["mode"] == "trajectory"
    assert prov["self_consistency"]["agree"] == prov["self_consistency"]["total"] > 0  # fp32 CPU: 100%
    for key in ("tokenizer_hash", "chat_template_hash", "git_sha", "argv", "kernels", "dtype", "device"):
        assert key in prov
    drafter = run["drafters"][0]
    assert drafter["format"] == "speculators" and drafter["spec"]["speculators_taps"] == [2, 3, 4]
    m = drafter["metrics"]
    B = drafter["spec"]["block_size"]
    assert len(m["reach"]) == len(m["conditional"]) == len(m["marginal"]) == B - 1
    assert len(m["histogram"]) == B and sum(m["histogram"]) == m["steps"]
    # three prompts: too few for a bootstrap interval, and the run says so instead of printing [x, x]
    assert m["tau_macro_ci"] is None and m["tau_macro_ci_note"] == "n/a (n = 3 < 5 prompts)"
    assert m["slot_counts"]["reach"][0][1] == m["steps"]
    rows = [json.loads(line) for line in (tmp_path / "r" / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    for row in rows:
        assert sum(row["walk_accept_lengths"]) == row["continuation_len"] - 1  # every token after y0 committed
        assert row["walk_anchors"][0] == row["prompt_len"]
    with (tmp_path / "r" / "per_position.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert table[0]["drafter"] == "speculators" and "acceptance_at_pos_1" in table[0]


def test_bad_drafter_never_touches_the_output_folder(drafter_dirs, test_bed, tmp_path):
    out = tmp_path / "out"
    good = run_cli("-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]), "--out", str(out), cache=tmp_path / "c")
    assert good.exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    broken = tmp_path / "broken"
    shutil.copytree(drafter_dirs["zlab"], broken)
    (broken / "model.safetensors").write_bytes((broken / "model.safetensors").read_bytes()[:100])
    result = run_cli("-d", str(broken), "--target", str(test_bed["qwen3"]), "--out", str(out), cache=tmp_path / "c")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "truncated" in result.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_rerun_with_other_settings_into_the_same_folder_is_refused(drafter_dirs, test_bed, tmp_path):
    out = tmp_path / "out"
    assert run_cli("-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]), "--out", str(out),
                   cache=tmp_path / "c").exit_code == 0
    before = (out / "run.json").read_bytes()
    other = run_cli("-d", str(drafter_dirs["sliding"]), "--target", str(test_bed["qwen3"]), "--out", str(out),
                    cache=tmp_path / "c")
    assert other.exit_code == 2 and "different settings" in other.stderr
    assert (out / "run.json").read_bytes() == before


@pytest.mark.parametrize("args,message", [
    (["--prompts", "missing.jsonl"], "cannot read prompts"),
    (["--mode", "fast"], "unknown --mode"),
])
def test_bad_options_are_one_line_errors(drafter_dirs, test_bed, tmp_path, args, message):
    result = run_cli("-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]), "--out",
                     str(tmp_path / "o"), *args, cache=tmp_path / "c")
    assert result.exit_code == 2 and message in result.stderr
    assert not (tmp_path / "o").exists()


def test_reference_zlab_resolves_from_the_hf_cache(drafter_dirs, test_bed, tmp_path, monkeypatch):
    """`--reference z-lab` for a target named like a published one: the z-lab drafter comes from a real
    HF cache layout (offline), the in-house speculators drafter finds the target it records."""
    from huggingface_hub import constants
    from test_reference_drafters import cache_repo

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    target = tmp_path / "Qwen3-8B"  # the tiny qwen3, under the name the registry knows
    shutil.copytree(test_bed["qwen3"], target)
    files = {p.name: p.read_bytes() for p in drafter_dirs["zlab"].iterdir()}
    cache_repo(cache, "z-lab/Qwen3-8B-DFlash-b16", files)
    result = run_cli("-d", f"{drafter_dirs['sliding']}:mine", "--target", str(target), "--reference", "z-lab",
                     "--out", str(tmp_path / "r"), cache=tmp_path / "c")
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert [d["name"] for d in run["drafters"]] == ["mine", "z-lab"]
    assert "models--z-lab--Qwen3-8B-DFlash-b16" in run["drafters"][1]["path"]

    missing = run_cli("-d", str(drafter_dirs["sliding"]), "--target", str(test_bed["qwen3"]), "--reference", "z-lab",
                      "--out", str(tmp_path / "r2"), cache=tmp_path / "c")
    assert missing.exit_code == 2 and "no published z-lab drafter" in missing.stderr
    assert not (tmp_path / "r2").exists()


def test_killed_run_resumes_to_the_same_results(trained, tmp_path):
    """Kill `run` (SIGKILL, mid-run) after some prompts, rerun the same command: the final run.json
    metrics equal those of an uninterrupted run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    good = trained["qwen3"]["good"]
    args = ["-d", str(good), "--target", str(trained["qwen3"]["target"]), "--max-new-tokens", "40",
            "--cache-dir", str(tmp_path / "cache")]
    whole = runner.invoke(app, ["run", *args, "--out", str(tmp_path / "whole")])
    assert whole.exit_code == 0, whole.output
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "dflash_eval.cli", "run", *args, "--out", str(out)]
    env = {**os.environ, "DFLASH_EVAL_SLOW_PROMPTS": "0.5"}  # half a second per prompt: time to kill mid-run
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples = out / "samples.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline:
        if samples.exists() and len(samples.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done_before = len(samples.read_text().splitlines())
    assert 3 <= done_before < 12 and not (out / "run.json").exists()
    # the folder knows it is unfinished: report says so, --partial renders what is there under a banner
    said = runner.invoke(app, ["report", str(out)])
    assert said.exit_code == 2 and f"incomplete run: {done_before} of 12 prompts done" in said.stderr
    assert "--partial" in said.stderr
    shown = runner.invoke(app, ["report", str(out), "--partial"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "INCOMPLETE RUN" in shown.stdout and "of 12 prompts done" in shown.stdout
    partial = json.loads((out / "run.partial.json").read_text())
    assert partial["incomplete"]["total"] == 12 and partial["incomplete"]["done"] <= done_before
    resumed = runner.invoke(app, ["run", *args, "--out", str(out)])
    assert resumed.exit_code == 0, resumed.output
    assert "resuming" in resumed.stdout
    first = json.loads((tmp_path / "whole" / "run.json").read_text())
    second = json.loads((out / "run.json").read_text())
    assert not (out / "run.partial.json").exists()
    assert second["provenance"]["work"]["prompts_evaluated"] == 12 - done_before
    assert second["drafters"][0]["metrics"] == first["drafters"][0]["metrics"]
    assert second["drafters"][0]["counts"] == first["drafters"][0]["counts"]
    assert first["drafters"][0]["metrics"]["tau_macro"] > 2.0


def test_live_mode_gives_the_same_acceptance_as_the_replay(trained, tmp_path):
    args = ["-d", str(trained["qwen3_5_text"]["good"]), "--target", str(trained["qwen3_5_text"]["target"]),
            "--max-new-tokens", "24", "--limit", "4", "--cache-dir", str(tmp_path / "cache"), "--no-thinking"]
    replayed = runner.invoke(app, ["run", *args, "--out", str(tmp_path / "t")])
    live = runner.invoke(app, ["run", *args, "--out", str(tmp_path / "l"), "--mode", "live"])
    assert replayed.exit_code == 0 and live.exit_code == 0, live.output
    a = json.loads((tmp_path / "t" / "run.json").read_text())["drafters"][0]
    b = json.loads((tmp_path / "l" / "run.json").read_text())["drafters"][0]
    assert a["metrics"]["tau_macro"] == b["metrics"]["tau_macro"] and a["metrics"]["reach"] == b["metrics"]["reach"]
    assert b["live"]["steps"] == b["metrics"]["steps"] and b["live"]["seconds"] > 0


def test_responses_from_elsewhere_report_their_greedy_agreement(drafter_dirs, test_bed, tmp_path):
    """--responses: continuations produced by another engine; agreement with the target's greedy is shown."""
    first = run_cli("-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]), "--out", str(tmp_path / "a"),
                    cache=tmp_path / "c")
    assert first.exit_code == 0
    rows = [json.loads(line) for line in (tmp_path / "a" / "samples.jsonl").read_text().splitlines()]
    responses = tmp_path / "responses.jsonl"
    edited = []
    for row in rows:
        ids = list(row["continuation_ids"])
        if row["prompt_id"] == rows[0]["prompt_id"]:
            ids[-1] = (ids[-1] + 1) % 500  # the last token: one the target would not have chosen
        edited.append(json.dumps({"id": row["prompt_id"], "response_ids": ids}))
    responses.write_text("\n".join(edited) + "\n")
    result = run_cli("-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]), "--out", str(tmp_path / "b"),
                     "--responses", str(responses), cache=tmp_path / "c")
    assert result.exit_code == 0, result.output
    prov = json.loads((tmp_path / "b" / "run.json").read_text())["provenance"]
    total = sum(r["continuation_len"] for r in rows)
    assert prov["continuations"].startswith("responses:")
    assert prov["responses_agreement"] == {"agree": total - 1, "total": total}
    assert prov["work"]["continuations_generated"] == 0


def test_drafters_whose_folders_end_alike_get_distinct_names(drafter_dirs, test_bed, tmp_path):
    """/x/a/run1/ckpt and /x/b/run1/ckpt: both rows must survive under their own names."""
    import shutil

    for side in ("a", "b"):
        shutil.copytree(drafter_dirs["zlab"], tmp_path / side / "run1" / "ckpt")
    result = run_cli("-d", str(tmp_path / "a" / "run1" / "ckpt"), "-d", str(tmp_path / "b" / "run1" / "ckpt"),
                     "--target", str(test_bed["qwen3"]), "--out", str(tmp_path / "r"), cache=tmp_path / "c")
    assert result.exit_code == 0, result.output
    names = [d["name"] for d in json.loads((tmp_path / "r" / "run.json").read_text())["drafters"]]
    assert names == ["ckpt@a/run1", "ckpt@b/run1"]
    rows = [json.loads(line) for line in (tmp_path / "r" / "samples.jsonl").read_text().splitlines()]
    assert {r["drafter"] for r in rows} == set(names)


def test_the_same_name_twice_is_refused_before_anything_is_written(drafter_dirs, tmp_path):
    result = run_cli("-d", f"{drafter_dirs['zlab']}:mine", "-d", f"{drafter_dirs['sliding']}:mine",
                     "--out", str(tmp_path / "r"), cache=tmp_path / "c")
    assert result.exit_code == 2 and "two drafters are named 'mine'" in result.stderr
    assert not (tmp_path / "r").exists()
    again = run_cli("-d", str(drafter_dirs["zlab"]), "-d", str(drafter_dirs["zlab"]), "--out", str(tmp_path / "r"),
                    cache=tmp_path / "c")
    assert again.exit_code == 2 and "give it a :NAME" in again.stderr


def test_thinking_says_when_it_is_the_family_default_and_warns_on_a_known_mismatch(trained, tmp_path):
    from pathlib import Path

    from dflash_eval.pipeline.inputs import DrafterEntry, thinking_warnings

    args = ["-d", str(trained["qwen3_5_text"]["good"]), "--target", str(trained["qwen3_5_text"]["target"]),
            "--max-new-tokens", "8", "--limit", "2", "--cache-dir", str(tmp_path / "cache"), "--no-html"]
    defaulted = runner.invoke(app, ["run", *args, "--out", str(tmp_path / "d")], env={"COLUMNS": "200"})
    assert defaulted.exit_code == 0, defaulted.output
    assert "thinking on (family default)" in defaulted.stdout
    prov = json.loads((tmp_path / "d" / "run.json").read_text())["provenance"]
    assert prov["thinking_source"] == "family default for qwen3_5_text"
    given = runner.invoke(app, ["run", *args, "--no-thinking", "--out", str(tmp_path / "g")], env={"COLUMNS": "200"})
    assert "thinking off |" in given.stdout and "family default" not in given.stdout
    # the registry knows z-lab's Qwen3 b16 drafters were trained without thinking
    entry = DrafterEntry("z-lab", Path("/hf/models--z-lab--Qwen3-8B-DFlash-b16/snapshots/abc"), None)
    warning, = thinking_warnings([entry], True, True, "qwen3")
    assert "trained with thinking off" in warning and "pass --no-thinking" in warning
    assert thinking_warnings([entry], False, False, "qwen3") == []
