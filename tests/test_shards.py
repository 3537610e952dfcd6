"""Past one process: `--shard I/N` + `merge` and torchrun data parallel (gloo on CPU) give the run folder one
process writes: the same run.json metrics and the same samples rows; shards of other runs are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()


def _common(trained, tmp_path) -> list[str]:
    return ["-d", str(trained["qwen3"]["good"]), "-d", f"{trained['qwen3']['anchor_bug']}:bug", "--target",
            str(trained["qwen3"]["target"]), "--max-new-tokens", "24", "--cache-dir", str(tmp_path / "cache"),
            "--no-html", "--device", "cpu"]


def _same_results(one: Path, other: Path) -> None:
    a, b = (json.loads((d / "run.json").read_text()) for d in (one, other))
    assert [d["metrics"] for d in a["drafters"]] == [d["metrics"] for d in b["drafters"]]
    assert [d["counts"] for d in a["drafters"]] == [d["counts"] for d in b["drafters"]]
    assert [d["repetition"] for d in a["drafters"]] == [d["repetition"] for d in b["drafters"]]
    assert a["provenance"]["self_consistency"] == b["provenance"]["self_consistency"]
    assert a["provenance"]["prompts"] == b["provenance"]["prompts"]
    assert (one / "samples.jsonl").read_text() == (other / "samples.jsonl").read_text()
    assert (one / "per_position.csv").read_text() == (other / "per_position.csv").read_text()


@pytest.fixture(scope="module")
def single(trained, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("single")
    result = runner.invoke(app, ["run", *_common(trained, tmp), "--out", str(tmp / "one")])
    assert result.exit_code == 0, result.output
    return tmp


def test_shards_merge_into_the_single_run(trained, single, tmp_path):
    common = _common(trained, single)
    for i in range(3):
        done = runner.invoke(app, ["run", *common, "--shard", f"{i}/3", "--out", str(tmp_path / f"s{i}")])
        assert done.exit_code == 0, done.output
    rows = [len((tmp_path / f"s{i}" / "samples.jsonl").read_text().splitlines()) for i in range(3)]
    assert sum(rows) == 12 * 2 and all(r >= 6 for r in rows)  # 12 prompts x 2 drafters, balanced
    merged = runner.invoke(app, ["merge", *(str(tmp_path / f"s{i}") for i in (2, 0, 1)), "--out", str(tmp_path / "m"),
                                 "--no-html"])
    assert merged.exit_code == 0, merged.output
    _same_results(single / "one", tmp_path / "m")
    # refusals, by name, with nothing written
    missing = runner.invoke(app, ["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "x")])
    assert missing.exit_code == 2 and "shards missing: 2/3" in missing.stderr
    twice = runner.invoke(app, ["merge", str(tmp_path / "s0"), str(tmp_path / "s0"), str(tmp_path / "s1"), "--out",
                                str(tmp_path / "x")])
    assert twice.exit_code == 2 and "shard 0/3 is given twice" in twice.stderr
    other = runner.invoke(app, ["run", *common, "--shard", "2/3", "--max-new-tokens", "16", "--out", str(tmp_path / "o")])
    assert other.exit_code == 0, other.output
    refused = runner.invoke(app, ["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), str(tmp_path / "o"), "--out",
                                  str(tmp_path / "x")])
    assert refused.exit_code == 2 and "max_new_tokens: 24 -> 16" in refused.stderr and "Traceback" not in refused.output
    assert not (tmp_path / "x").exists()
    plain = runner.invoke(app, ["merge", str(single / "one"), "--out", str(tmp_path / "x")])
    assert plain.exit_code == 2 and "is not a shard" in plain.stderr


@pytest.mark.parametrize("value", ["3/3", "1", "a/b", "-1/2"])
def test_bad_shard_values_are_refused(trained, tmp_path, value):
    result = runner.invoke(app, ["run", *_common(trained, tmp_path), "--shard", value, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "expected I/N with 0 <= I < N" in result.stderr
    assert not (tmp_path / "o").exists()


def test_torchrun_two_gloo_ranks_equal_one_process(trained, single, tmp_path):
    out = tmp_path / "dp"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29517",
               "-m", "dflash_eval", "run", *_common(trained, single), "--out", str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _same_results(single / "one", out)
    assert (Path(f"{out}.shards") / "rank-0" / "run.json").exists() and (Path(f"{out}.shards") / "rank-1" / "run.json").exists()
    merged_from = json.loads((out / "run.json").read_text())["provenance"]["merged_from"]
    assert [Path(p).name for p in merged_from] == ["rank-0", "rank-1"]


@pytest.mark.parametrize("kind", ["qwen3", "qwen3_5_text"])
def test_a_target_dispatched_over_devices_captures_the_same_taps(test_bed, tmp_path, kind):
    """accelerate's dispatch with layers on CPU and offloaded to disk (the same hooks that place layers on
    several GPUs): the taps of every layer and the greedy tokens equal the undispatched model's, bit for bit."""
    import torch

    from dflash_eval.model.target import capture_taps, load_target

    plain = load_target(str(test_bed[kind]), device="cpu", dtype="float32")
    names = [n for n, _ in plain.model.named_children()]
    base = plain.model.model
    layers = len(plain.layers)
    prefix = "model.language_model" if hasattr(base, "language_model") else "model"
    device_map = {f"{prefix}.embed_tokens": "cpu", f"{prefix}.norm": "cpu", "lm_head": "cpu"}
    inner = base.language_model if hasattr(base, "language_model") else base
    if hasattr(inner, "rotary_emb"):
        device_map[f"{prefix}.rotary_emb"] = "cpu"
    for i in range(layers):
        device_map[f"{prefix}.layers.{i}"] = "cpu" if i < layers // 2 else "disk"
    assert "lm_head" in names
    split = load_target(str(test_bed[kind]), device="cpu", dtype="float32", device_map=device_map,
                        offload_folder=str(tmp_path / "offload"))
    assert set(split.model.hf_device_map.values()) == {"cpu", "disk"}
    ids = torch.tensor(plain.tokenizer("def fizzbuzz(n): return [i for i in range(n)]")["input_ids"])
    taps = list(range(layers))
    a, b = capture_taps(plain, ids, taps), capture_taps(split, ids, taps)
    assert torch.equal(a.taps, b.taps) and torch.equal(a.greedy, b.greedy)


def test_run_with_a_device_map_equals_the_plain_run(trained, single, tmp_path):
    out = tmp_path / "mapped"
    result = runner.invoke(app, ["run", *_common(trained, single), "--device-map", "auto", "--out", str(out)])
    assert result.exit_code == 0, result.output
    _same_results(single / "one", out)
    refused = runner.invoke(app, ["run", *_common(trained, single), "--max-memory", "cpu=1GiB", "--out", str(tmp_path / "x")])
    assert refused.exit_code == 2 and "give --device-map too" in refused.stderr


def test_a_shard_resumes_like_a_run_and_refuses_another_shard(trained, single, tmp_path):
    import os
    import signal
    import time

    common = _common(trained, single)
    out = tmp_path / "s1"
    env = {**os.environ, "DFLASH_EVAL_SLOW_PROMPTS": "0.5", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "dflash_eval", "run", *common, "--shard", "1/2", "--out", str(out)],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples = out / "samples.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (samples.exists() and len(samples.read_text().splitlines()) >= 4):
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (out / "run.json").exists()
    resumed = runner.invoke(app, ["run", *common, "--shard", "1/2", "--out", str(out)])
    assert resumed.exit_code == 0 and "resuming" in resumed.stdout, resumed.output
    other = runner.invoke(app, ["run", *common, "--shard", "0/2", "--out", str(out)])
    assert other.exit_code == 2 and "shard" in other.stderr and "already holds a run with different settings" in other.stderr
    assert runner.invoke(app, ["run", *common, "--shard", "0/2", "--out", str(tmp_path / "s0")]).exit_code == 0
    merged = runner.invoke(app, ["merge", str(tmp_path / "s0"), str(out), "--out", str(tmp_path / "m"), "--no-html"])
    assert merged.exit_code == 0, merged.output
    _same_results(single / "one", tmp_path / "m")


COUNTING = """
import os
if os.environ.get("RANK") is not None:  # a torchrun worker: count the rows each generate_greedy call makes
    from dflash_eval.pipeline import continuations

    real = continuations.generate_greedy

    def counted(target, prompts, *args, **kwargs):
        with open(os.path.join(os.environ["GENERATED_ROWS"], "rank-" + os.environ["RANK"]), "a") as out:
            out.write(str(len(prompts)) + "\\n")
        return real(target, prompts, *args, **kwargs)

    continuations.generate_greedy = counted
"""


@pytest.mark.parametrize("ranks", [2, 4])
def test_torchrun_ranks_each_generate_about_one_nth_of_the_continuations(trained, tmp_path, ranks):
    """The 12 demo prompts in 4 planned batches of 3 (--generation-batch 3): each of N gloo ranks generates
    its share of the batches, 12 / N continuations (the rows each rank's target generated, counted from
    outside by a sitecustomize hook, and its shard's run.json), and hands them to the ranks that evaluate
    them; merged, the folder equals one process's. Each rank used to generate every batch its
    length-balanced shard touched: all 12."""
    one = runner.invoke(app, ["run", *_common(trained, tmp_path / "a"), "--generation-batch", "3",
                              "--out", str(tmp_path / "one")])
    assert one.exit_code == 0, one.output
    out, hook, counts = tmp_path / "dp", tmp_path / "hook", tmp_path / "rows"
    hook.mkdir()
    counts.mkdir()
    (hook / "sitecustomize.py").write_text(COUNTING)
    path = os.pathsep.join([str(hook), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": path, "GENERATED_ROWS": str(counts)}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port",
               str(29540 + ranks), "-m", "dflash_eval", "run", *_common(trained, tmp_path / "b"),  # a cache of their own
               "--generation-batch", "3", "--out", str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _same_results(tmp_path / "one", out)
    rows = [sum(int(n) for n in (counts / f"rank-{r}").read_text().split()) if (counts / f"rank-{r}").exists() else 0
            for r in range(ranks)]
    assert rows == [12 // ranks] * ranks
    work = [json.loads((Path(f"{out}.shards") / f"rank-{r}" / "run.json").read_text())["provenance"]["work"]
            for r in range(ranks)]
    assert [w["continuations_generated"] for w in work] == [12 // ranks] * ranks
    assert sum(w["prompts_evaluated"] for w in work) == 12
    assert json.loads((out / "run.json").read_text())["provenance"]["work"]["continuations_generated"] == 12
