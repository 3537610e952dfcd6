"""Nothing blocks on a special file (issue 36, class 4).

A weights file that was a FIFO blocked `inspect` and `run` forever. Every file dflash-eval reads is opened
by core/errors.open_regular (non-blocking, checked on the descriptor) or, for the files a library opens
itself (transformers' tokenizer and config, safetensors), checked first by core/errors.regular_files. Here
each kind of file each command reads is replaced by a FIFO, and the command must refuse it by name, exit 2,
instead of waiting: a SIGALRM turns a hang into a failure."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import invoke_within

ENV = {"COLUMNS": "200"}


def invoke(args: list[str], seconds: int = 60):
    return invoke_within(args, seconds, ENV)


@pytest.fixture(scope="module")
def world(test_bed, drafter_dirs, escaped_run, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("fifo")
    (root / "prompts.jsonl").write_text('{"id": "x", "prompt": "def f():"}\n')
    (root / "responses.jsonl").write_text('{"id": "x", "response": "return 1"}\n')
    (root / "dump.txt").write_text("vllm:spec_decode_num_drafts_total 1\n")
    return {"root": root, "drafter": drafter_dirs["zlab"], "target": test_bed["qwen3"], "run": escaped_run["folder"],
            "a": escaped_run["a"], "b": escaped_run["b"]}


def with_fifo(source: Path, name: str, dest: Path) -> Path:
    """A copy of folder `source` whose file `name` is a FIFO (no writer: an open for reading would block)."""
    shutil.copytree(source, dest, symlinks=True)
    (dest / name).unlink(missing_ok=True)
    os.mkfifo(dest / name)
    return dest


def commands(w, drafter: Path, target: Path, run: Path, extra_files: dict[str, Path]) -> dict[str, list[str]]:
    base = ["--limit", "1", "--max-new-tokens", "4", "--device", "cpu"]
    return {
        "inspect": ["inspect", str(drafter), "--target", str(target)],
        "run": ["run", "-d", str(drafter), "--target", str(target), *base, "--out", str(w["root"] / "out"),
                *extra_files.get("run", [])],
        "plan": ["plan", "-d", str(drafter), "--target", str(target), *extra_files.get("plan", [])],
        "report": ["report", str(run)],
        "show": ["show", str(run)],
        "diff": ["diff", f"{run}:{w['a']}", f"{run}:{w['b']}"],
    }


CASES = {  # (what is a FIFO, which file, the commands that read it)
    "drafter weights": ("drafter", "model.safetensors", ["inspect", "run", "plan"]),
    "drafter config": ("drafter", "config.json", ["inspect", "run", "plan"]),
    "target config": ("target", "config.json", ["inspect", "run", "plan"]),
    "target generation config": ("target", "generation_config.json", ["run"]),
    "target tokenizer": ("target", "tokenizer.json", ["run", "plan"]),
    "target tokenizer config": ("target", "tokenizer_config.json", ["run", "plan"]),
    "target chat template": ("target", "chat_template.jinja", ["run", "plan"]),
    "target weights": ("target", "model.safetensors", ["run"]),
    "run.json": ("run", "run.json", ["report", "show", "diff"]),
    "samples.jsonl": ("run", "samples.jsonl", ["report", "show", "diff"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_fifo_in_a_folder_is_refused_by_name(case, world, tmp_path):
    kind, name, readers = CASES[case]
    folders = {"drafter": world["drafter"], "target": world["target"], "run": world["run"]}
    folders[kind] = with_fifo(folders[kind], name, tmp_path / kind)
    for reader in readers:
        args = commands(world, folders["drafter"], folders["target"], folders["run"], {})[reader]
        result = invoke(args)
        assert result.exit_code == 2, (case, reader, result.output)
        assert f"{name}: is a FIFO, not a regular file" in result.stderr, (case, reader, result.stderr)
    assert not (world["root"] / "out").exists()


@pytest.mark.parametrize("option", ["--prompts", "--responses", "--step-times"])
def test_a_fifo_given_as_a_file_is_refused_by_name(option, world, tmp_path):
    fifo = tmp_path / "file.jsonl"
    os.mkfifo(fifo)
    args = ["run", "-d", str(world["drafter"]), "--target", str(world["target"]), "--limit", "1", "--max-new-tokens",
            "4", "--device", "cpu", "--out", str(tmp_path / "out"), option, str(fifo)]
    if option == "--step-times":
        args += ["--draft-lengths", "1"]
    result = invoke(args)
    assert result.exit_code == 2 and "file.jsonl: is a FIFO, not a regular file" in result.stderr, result.output
    if option == "--prompts":
        for more in (["plan", "-d", str(world["drafter"]), "--target", str(world["target"]), "--prompts", str(fifo)],
                     ["prompts", "show", str(fifo)]):
            result = invoke(more)
            assert result.exit_code == 2 and "is a FIFO, not a regular file" in result.stderr, (more, result.output)
    served = invoke(["served", str(fifo)])
    assert served.exit_code == 2 and "is a FIFO, not a regular file" in served.stderr, served.output


@pytest.mark.parametrize("shard", ["data/test.jsonl", "data/test-00000-of-00001.parquet"])
def test_a_fifo_in_a_hub_dataset_snapshot_is_refused_by_name(shard, tmp_path, monkeypatch):
    """`--prompts hf:ORG/NAME` reads the snapshot's shards itself (JSON lines) or through pyarrow: a shard
    whose blob is a FIFO is refused by name instead of blocking the open."""
    from dflash_eval.testing.hub_cache import jsonl_bytes, write_dataset

    rows = [{"question": "What is 1 + 1?"}]
    snapshot = write_dataset(tmp_path / "hub", "someone/blocked", {shard: jsonl_bytes(rows)})
    blob = (snapshot / shard).resolve()
    blob.unlink()
    os.mkfifo(blob)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    result = invoke(["prompts", "show", "hf:someone/blocked", "--prompt-field", "question"])
    assert result.exit_code == 2 and "is a FIFO, not a regular file" in result.stderr, result.output


def test_a_hidden_state_file_that_is_a_fifo_is_refused_by_name(test_bed, tmp_path):
    """Issue 49 I: trained-taps took a hidden-state file that is a FIFO for "missing (not extracted yet)" and
    skipped its sample. A FIFO is refused by name (core/errors.regular_file_present), never skipped."""
    import torch

    from dflash_eval.testing import trainer_data as W

    samples = W.samples_from([(torch.arange(10, 40), 6), (torch.arange(50, 80), 8)])
    hidden = [torch.zeros(len(s.ids), 3, 64, dtype=torch.bfloat16) for s in samples]
    data = W.write_speculators(tmp_path / "spec", samples, hidden, [h[:, 0] for h in hidden])
    fifo = data / "hidden_states" / "hs_1.safetensors"
    fifo.unlink()
    os.mkfifo(fifo)
    result = invoke(["trained-taps", str(data), "--target", str(test_bed["qwen3"]), "--device", "cpu", "--split", "all",
                     "--layer-ids", "2,3,4", "--noise-samples", "1"])
    assert result.exit_code == 2, result.output
    assert "hs_1.safetensors: is a FIFO, not a regular file (a hidden-state file)" in " ".join(result.stderr.split())


@pytest.mark.parametrize("kind, readers", [("drafter", ["inspect", "run", "plan"]), ("target", ["inspect", "run", "plan"])])
def test_a_config_json_that_is_a_symbolic_link_loop_is_refused_by_name(kind, readers, world, tmp_path):
    """Issue 49 K: a config.json that is a symbolic link loop was "no config.json" (Path.is_file is False for
    it, as for a FIFO and for nothing at all): now named as what it is."""
    folders = {"drafter": world["drafter"], "target": world["target"]}
    dest = tmp_path / kind
    shutil.copytree(folders[kind], dest, symlinks=True)
    (dest / "config.json").unlink()
    (dest / "config.json").symlink_to("config.json")  # points at itself
    folders[kind] = dest
    for reader in readers:
        result = invoke(commands(world, folders["drafter"], folders["target"], world["run"], {})[reader])
        assert result.exit_code == 2, (reader, result.output)
        assert "config.json: is a symbolic link loop, not a regular file" in result.stderr, (reader, result.stderr)
    assert not (world["root"] / "out").exists()
