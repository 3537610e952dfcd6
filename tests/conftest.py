"""Session fixtures: tiny real targets and real drafter checkpoints, built once, reloaded from disk."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # tests never reach a hub
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from pathlib import Path

import pytest

from dflash_eval.testing.testbed import random_state_dict, write_random_drafter
from dflash_eval.testing.tiny import build_test_bed


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """The continuation cache (and saved tracebacks) of the whole session in a temporary folder: the tests
    never write into the user's ~/.cache/dflash-eval, nor read a stale entry from it."""
    folder = tmp_path_factory.mktemp("dflash-eval-cache")
    previous = os.environ.get("DFLASH_EVAL_CACHE")
    os.environ["DFLASH_EVAL_CACHE"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("DFLASH_EVAL_CACHE", None)
    else:
        os.environ["DFLASH_EVAL_CACHE"] = previous


@pytest.fixture(scope="module")
def hf_hub(tmp_path_factory):
    """A Hugging Face hub cache, HF_HUB_CACHE for the module, holding every set of the DFlash paper's table in
    huggingface_hub's layout (testing/hub_cache.py `write_paper_sets`)."""
    from dflash_eval.testing.hub_cache import write_paper_sets

    cache = tmp_path_factory.mktemp("hub")
    write_paper_sets(cache, tmp_path_factory.mktemp("arrow"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(cache))
        yield cache


@pytest.fixture(scope="session")
def test_bed(tmp_path_factory) -> dict[str, Path]:
    """{"tokenizer", "qwen3", "qwen3_5", "qwen3_5_text", "qwen3_next"} -> folders on disk."""
    return build_test_bed(tmp_path_factory.mktemp("testbed"))


@pytest.fixture(scope="session")
def drafter_dirs(test_bed, tmp_path_factory) -> dict[str, Path]:
    """Random-weight drafters for the qwen3 target, in both formats and in the variants that matter.

    - zlab / speculators: the *same* body weights in both formats (taps 1, 2, 3 -> speculators 2, 3, 4)
    - sliding: 1 sliding-window layer (window 3, causal in block) + 1 full layer, z-lab format
    - d2t: speculators format with a reduced draft vocabulary of 200 ids
    """
    root = tmp_path_factory.mktemp("drafters")
    target = test_bed["qwen3"]
    design = dict(block_size=4, num_layers=2)
    from dflash_eval.demo.checkpoint_writer import design_spec
    from dflash_eval.model.target import target_info

    spec = design_spec(target_info(target), mask_token_id=0, **design)
    shared = random_state_dict(spec, seed=1)
    return {
        "zlab": write_random_drafter(target, root / "zlab", "zlab", state=shared, **design),
        "speculators": write_random_drafter(target, root / "speculators", "speculators", state=shared,
                                            verifier=str(target), **design),
        "sliding": write_random_drafter(target, root / "sliding", "zlab", seed=2, sliding_window=3,
                                        sliding_layers=1, **design),
        "d2t": write_random_drafter(target, root / "d2t", "speculators", seed=3, draft_vocab_size=200, **design),
    }


@pytest.fixture(scope="session")
def trained(test_bed, tmp_path_factory) -> dict[str, dict[str, Path]]:
    """Drafters trained by the fixture trainer on each target's own greedy continuations of the demo
    prompts (B = 4, one-row sliding windows: see train.fixture_config):
    {"qwen3": {"target", "good", "anchor_bug"}, "qwen3_5_text": {"target", "good"}}; anchor_bug was trained
    with the anchor's own hidden state in its context (the classic train/eval skew)."""
    from dflash_eval.demo.train import fixture_config, greedy_sequences, train_drafter
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS

    root = tmp_path_factory.mktemp("trained")
    out: dict[str, dict[str, Path]] = {}
    for kind in ("qwen3", "qwen3_5_text"):
        target = load_target(str(test_bed[kind]), device="cpu", dtype="float32")
        sequences = greedy_sequences(target, list(DEMO_PROMPTS), 40)
        good = train_drafter(target, sequences, fixture_config(block_size=4), root / f"{kind}-good")
        out[kind] = {"target": test_bed[kind], "good": good}
    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    out["qwen3"]["anchor_bug"] = train_drafter(target, greedy_sequences(target, list(DEMO_PROMPTS), 40),
                                               fixture_config(block_size=4, anchor_in_context=True),
                                               root / "qwen3-anchor-bug")
    return out


@pytest.fixture(scope="session")
def repeat_anchor_drafter(test_bed, tmp_path_factory) -> Path:
    from dflash_eval.testing.testbed import write_repeat_anchor_drafter

    return write_repeat_anchor_drafter(test_bed["qwen3"], tmp_path_factory.mktemp("repeat") / "repeat-anchor")


HOSTILE_IDS = ("p\x1b[2J0", "p\x07 1", "p\u009b2")  # ESC (clear screen), BEL, C1 CSI in prompt ids
HOSTILE_NAMES = ("a\x1b]0;owned\x07", "b\x1b[31m")  # an OSC title sequence and a colour in drafter names


@pytest.fixture(scope="session")
def escaped_run(test_bed, drafter_dirs, tmp_path_factory) -> dict:
    """A finished run of two drafters whose names, and three prompts whose ids, carry terminal escapes (ESC,
    BEL, a C1 CSI); made as shard 0 of 1 so that `merge` reads it too; with report.html.
    {"folder", "a", "b", "ids"}."""
    import json as json_module

    from typer.testing import CliRunner

    from dflash_eval.cli import app

    root = tmp_path_factory.mktemp("escaped")
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json_module.dumps({"id": pid, "prompt": f"Write a function number {i}.\x1b[5m"}) + "\n"
                               for i, pid in enumerate(HOSTILE_IDS)))
    folder = root / "run"
    a, b = HOSTILE_NAMES
    result = CliRunner().invoke(app, ["run", "-d", f"{drafter_dirs['zlab']}:{a}", "-d", f"{drafter_dirs['sliding']}:{b}",
                                      "--target", str(test_bed["qwen3"]), "--prompts", str(prompts),
                                      "--max-new-tokens", "10", "--device", "cpu", "--shard", "0/1", "--out",
                                      str(folder)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return {"folder": folder, "a": a, "b": b, "ids": HOSTILE_IDS}


def invoke_within(args: list[str], seconds: int, env: dict | None = None):
    """The CLI's result on `args` (in-process), or AssertionError after `seconds`: a hang (a FIFO opened, a loop
    over ten million steps) is the failure, not a slow answer. SIGALRM, so the main thread only."""
    import signal

    from typer.testing import CliRunner

    from dflash_eval.cli import app

    def alarm(*_):
        raise AssertionError(f"no answer within {seconds} s: {args}")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        return CliRunner().invoke(app, args, env=env or {"COLUMNS": "200"}, catch_exceptions=False)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
