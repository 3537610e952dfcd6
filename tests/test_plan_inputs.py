"""`plan` answers only for what `run` would run, and answers in bounded time (issue 36, class 3; issue 34, 1).

`plan` said `fits`, exit 0, for a drafter 128 wide against a 5120-wide target, max_position_embeddings 1
(with 2048 new tokens) or -1, vocab_size 0, 0 attention heads, 7 key/value heads for 32 heads, and
"tie_word_embeddings": "yes" was an internal error; it never returned for --max-new-tokens 10000000 or
--generation-batch 1000000000. Now plan checks with run's own code, so each case gets the very line run
gives, and every sum over steps is in closed form (core/roofline_sums.py, equal to the loops it replaced).
"""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.core import roofline as R
from dflash_eval.core import roofline_sums as S

runner = CliRunner()
ENV = {"COLUMNS": "200"}


# ------------------------------------------------------------------------------------------------ closed forms

SHAPE = R.model_shape({"model_type": "qwen3", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
                       "intermediate_size": 128, "vocab_size": 522, "num_key_value_heads": 2, "head_dim": 16})
DRAFTER = R.DrafterShape(format="zlab", body=SHAPE, n_taps=3, target_hidden_size=64, block_size=4,
                         draft_vocab_size=522, own_embedding=False, own_lm_head=False)


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(f0=st.floats(-1e3, 1e3), f1=st.floats(-1e3, 1e3), g0=st.floats(-1e3, 1e3), g1=st.floats(-1e3, 1e3),
       n=st.integers(0, 60))
def test_the_sum_of_two_lines_maximum_is_the_loop(f0, f1, g0, g1, n):
    loop = sum(max(f0 + (f1 - f0) * k, g0 + (g1 - g0) * k) for k in range(n))
    assert S.affine_max_sum(f0, f1, g0, g1, n) == pytest.approx(loop, rel=1e-9, abs=1e-6)


@pytest.mark.parametrize("accelerator", ["h100", "a100"])
@pytest.mark.parametrize("prompt,new,chunk,anchors", [(7, 1, 3, 1), (40, 33, 8, 5), (5, 200, 64, 16), (1, 2, 1, 3)])
def test_closed_forms_equal_the_step_loops(accelerator, prompt, new, chunk, anchors):
    """decode steps, a chunked tap pass and a drafter pass: each equal to the loop plan used to run."""
    device = R.accelerator(accelerator)
    T = prompt + new
    decode = [sum(R.forward_flops(SHAPE, 3, 1, prompt + t) for t in range(new - 1)),
              sum(R.step_time(SHAPE, device, 3, 1, prompt + t) for t in range(new - 1))]
    taps = [0.0, 0.0]
    for start in range(0, T, chunk):
        q = min(chunk, T - start)
        taps[0] += R.forward_flops(SHAPE, 1, q, start)
        taps[1] += R.step_time(SHAPE, device, 1, q, start)
    points = list(range(prompt, T - 1))
    drafter = [R.drafter_context_flops(DRAFTER, T), R.roofline_time(R.drafter_context_flops(DRAFTER, T), 0, device)]
    for k in range(0, len(points), anchors):
        block = points[k:k + anchors]
        drafter[0] += R.drafter_flops(DRAFTER, len(block), block[-1] + 1)
        drafter[1] += R.drafter_step_time(DRAFTER, device, len(block), block[-1] + 1)
    for ours, loop in ((S.decode_steps(SHAPE, device, 3, prompt, new - 1), decode),
                       (S.tap_pass(SHAPE, device, T, chunk), taps),
                       (S.drafter_pass(DRAFTER, device, prompt, T, anchors), drafter)):
        assert ours == pytest.approx(tuple(loop), rel=1e-9)


# ------------------------------------------------------------------------------------------------ plan = run's checks


def error_line(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("Loading weights")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


CONFIG_CASES = {  # the cases, as edits of the tiny target's config
    "a target 5120 wide for a 64-wide drafter": ("hidden_size", 5120, "hidden size matches target failed"),
    "max_position_embeddings 1": ("max_position_embeddings", 1, "max_position_embeddings"),
    "max_position_embeddings -1": ("max_position_embeddings", -1, "max_position_embeddings"),
    "vocab_size 0": ("vocab_size", 0, "vocab_size"),
    "no attention heads": ("num_attention_heads", 0, "num_attention_heads"),
    "3 key/value heads for 4 heads": ("num_key_value_heads", 3, "does not divide num_attention_heads"),
    "tie_word_embeddings 'yes'": ("tie_word_embeddings", "yes", "is not true or false"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_plan_refuses_with_the_line_run_refuses_with(case, test_bed, drafter_dirs, tmp_path):
    key, value, fragment = CONFIG_CASES[case]
    target = shutil.copytree(test_bed["qwen3"], tmp_path / "target")
    config = json.loads((target / "config.json").read_text())
    config[key] = value
    (target / "config.json").write_text(json.dumps(config))
    common = ["-d", str(drafter_dirs["zlab"]), "--target", str(target), "--limit", "2", "--max-new-tokens", "2048"]
    planned = error_line(runner.invoke(app, ["plan", *common], env=ENV))
    ran = error_line(runner.invoke(app, ["run", *common, "--device", "cpu", "--out", str(tmp_path / "out")], env=ENV))
    assert fragment in planned and planned == ran, (planned, ran)
    assert not (tmp_path / "out").exists()


def test_plan_refuses_the_options_run_refuses(test_bed, drafter_dirs):
    common = ["-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]), "--limit", "2"]
    for extra, fragment in ((["--samples", "3"], "--samples > 1 needs --temperature > 0"),
                            (["--temperature", "1", "--samples", "100000"], "--samples must be 1 to 1024"),
                            (["--max-new-tokens", "5000"], "> the target's max_position_embeddings 4096")):
        assert fragment in error_line(runner.invoke(app, ["plan", *common, *extra], env=ENV))


def _answer(args: list[str], seconds: int = 120):
    """The plan's result, or a failure after `seconds` (a hang is the failure, not a slow answer)."""
    from conftest import invoke_within

    return invoke_within(["plan", *args, "--json"], seconds, ENV)


def test_plan_answers_for_any_token_count(test_bed, drafter_dirs, tmp_path):
    """Without max_position_embeddings nothing bounds --max-new-tokens; plan still answers (in closed form),
    and a generation batch of a billion is planned as run would cut it (never more sequences than there are)."""
    target = shutil.copytree(test_bed["qwen3"], tmp_path / "unbounded")
    config = json.loads((target / "config.json").read_text())
    del config["max_position_embeddings"]
    (target / "config.json").write_text(json.dumps(config))
    common = ["-d", str(drafter_dirs["zlab"]), "--target", str(target), "--limit", "3"]
    for extra in (["--max-new-tokens", "10000000"], ["--generation-batch", "1000000000"],
                  ["--max-new-tokens", "10000000", "--tap-chunk", "1", "--anchor-batch", "1", "--doctor"]):
        result = _answer([*common, *extra])
        assert result.exit_code in (0, 1), result.output
        doc = json.loads(result.stdout)
        assert doc["batches"]["generation"] <= 3 and all(p["seconds"] >= 0 for p in doc["phases"])


def test_plan_takes_the_reference_as_run_does(tmp_path, monkeypatch):
    """`plan --reference z-lab` resolves the published drafter from the HF cache, as `run --reference z-lab`;
    a miss is run's line, with the command that downloads it."""
    from huggingface_hub import constants
    from test_plan import DRAFTERS, QWEN3_8B, write
    from test_reference_drafters import cache_repo

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    target = write(tmp_path / "Qwen3-8B", QWEN3_8B)
    missing = error_line(runner.invoke(app, ["plan", "--target", str(target), "--reference", "z-lab"], env=ENV))
    assert "hf download z-lab/Qwen3-8B-DFlash-b16" in missing
    cache_repo(cache, "z-lab/Qwen3-8B-DFlash-b16", {"config.json": json.dumps(DRAFTERS["qwen3-8b"]).encode()})
    result = runner.invoke(app, ["plan", "--target", str(target), "--reference", "z-lab", "--json"], env=ENV)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["drafters"][0]["path"].endswith("snapshots/" + "0123456789abcdef" * 2 + "01234567")
    for command in ("plan", "run"):  # -d z-lab names no folder: both say where the published drafter goes
        line = error_line(runner.invoke(app, [command, "-d", "z-lab", "--target", str(target), "--out", str(tmp_path / "o")]
                                        if command == "run" else [command, "-d", "z-lab", "--target", str(target)], env=ENV))
        assert line == "error: z-lab: no such file or directory; the published z-lab drafter is given as --reference z-lab"

