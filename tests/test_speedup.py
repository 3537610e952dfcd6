"""core/speedup.py on hand-computed cases: the formula, the k x batch table with its best k (including a
batch where a longer block loses), draft-length parsing, step times from a user's file and from the
roofline model, each refused by name when wrong."""

from __future__ import annotations

import json

import pytest

from dflash_eval.core import speedup as S
from dflash_eval.core.errors import InputError


def test_speedup_formula_by_hand():
    # 3 tokens per step, t_T(1) = 10 ms, t_T(4) = 12 ms, t_D(4) = 3 ms: 3 x 10 / 15 = 2
    assert S.speedup(3.0, 0.010, 0.012, 0.003) == pytest.approx(2.0, abs=1e-12)
    # no acceptance at all (1 token per step) with free verify: exactly break-even
    assert S.speedup(1.0, 0.010, 0.010, 0.0) == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError):
        S.speedup(0.5, 0.01, 0.01, 0.0)  # a step commits at least one token
    with pytest.raises(ValueError):
        S.speedup(2.0, 0.01, float("nan"), 0.0)


def _times():
    """Hand-made step times (ms): memory-bound at batch 1 (a longer block costs little), compute-bound at
    batch 64 (each extra token costs)."""
    target = {(1, 1): 10, (1, 4): 11, (1, 8): 12, (64, 1): 10, (64, 4): 25, (64, 8): 45}
    drafter = {(1, 4): 1, (1, 8): 1.5, (64, 4): 2, (64, 8): 4}
    return S.StepTimes("file", "hand-made", target=lambda n, b: target.get((b, n)),
                       drafter=lambda n, b: drafter.get((b, n)), batches=(1, 16, 64))


def test_table_best_k_per_batch_and_a_longer_block_that_loses():
    table = S.speedup_table({3: 2.5, 7: 3.0}, _times())
    rows = {r["k"]: r["speedup"] for r in table["rows"]}
    # batch 1: k = 3: 2.5 x 10 / (11 + 1) = 2.0833; k = 7: 3 x 10 / (12 + 1.5) = 2.2222 -> k = 7 wins
    assert rows[3][0] == pytest.approx(25 / 12) and rows[7][0] == pytest.approx(30 / 13.5)
    # batch 64: k = 3: 2.5 x 10 / 27 = 0.9259; k = 7: 3 x 10 / 49 = 0.6122 -> the longer block loses
    assert rows[3][2] == pytest.approx(25 / 27) and rows[7][2] == pytest.approx(30 / 49)
    assert rows[7][2] < rows[3][2] < 1.0
    # batch 16: no step times given -> no number (never guessed), and no best k
    assert rows[3][1] is None and rows[7][1] is None
    assert table["best"] == [{"batch": 1, "k": 7, "speedup": pytest.approx(30 / 13.5)},
                             {"batch": 16, "k": None, "speedup": None},
                             {"batch": 64, "k": 3, "speedup": pytest.approx(25 / 27)}]
    assert table["label"] == "hand-made" and table["target_seconds_one_token"] == [10, None, 10]
    assert "t_target(1, batch)" in table["model"]


def test_draft_lengths_parse_and_refuse_by_name():
    assert S.parse_draft_lengths("all", 8) == (1, 2, 3, 4, 5, 6, 7)
    assert S.parse_draft_lengths(" 7, 3,3 ", 16) == (3, 7)
    assert S.parse_draft_lengths(None, 16) == ()
    for text, message in (("0", "outside 1..7"), ("8", "outside 1..7"), ("3,x", "got 'x'"), ("", "got ''")):
        with pytest.raises(InputError, match="--draft-lengths"):
            S.parse_draft_lengths(text, 8)
        with pytest.raises(InputError, match=message.replace(".", r"\.").replace("(", r"\(")):
            S.parse_draft_lengths(text, 8, name="mine")


def _file(tmp_path, data) -> str:
    path = tmp_path / "times.json"
    path.write_text(json.dumps(data))
    return path


def test_step_times_file(tmp_path):
    good = {"label": "vllm bench forward, H200", "target": [{"batch": 1, "tokens": 1, "seconds": 0.01},
                                                           {"batch": 1, "tokens": 4, "seconds": 0.011}],
            "drafter": [{"batch": 1, "tokens": 4, "seconds": 0.001}]}
    times = S.read_step_times(_file(tmp_path, good))
    assert times.batches == (1,) and times.target(4, 1) == 0.011 and times.drafter(4, 1) == 0.001
    assert times.target(8, 1) is None and "vllm bench forward, H200" in times.label
    table = S.speedup_table({3: 2.2}, times)
    assert table["rows"][0]["speedup"] == [pytest.approx(2.2 * 0.01 / 0.012)]
    bad_cases = [
        ({**good, "extra": 1}, "unknown key 'extra'"),
        ({**good, "target": [{"batch": 1, "tokens": 4, "seconds": 0.01}]}, "tokens = 1"),
        ({**good, "drafter": [{"batch": 1, "tokens": 4, "seconds": -1}]}, "drafter[0].seconds"),
        ({**good, "drafter": [{"batch": 0, "tokens": 4, "seconds": 1}]}, "drafter[0].batch"),
        ({**good, "drafter": good["drafter"] * 2}, "given twice"),
        ({**good, "drafter": [{"batch": 1, "tokens": 4}]}, "exactly the keys"),
        ([], "JSON object"),
    ]
    for data, message in bad_cases:
        with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")) as info:
            S.read_step_times(_file(tmp_path, data))
        assert info.value.path == str(tmp_path / "times.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(InputError, match="invalid JSON"):
        S.read_step_times(tmp_path / "broken.json")


def test_measured_step_times_are_means_per_step():
    times = S.measured_step_times({3: (0.6, 0.2, 20), 7: (1.0, 0.5, 10)}, (1.0, 100), "measured")
    assert times.target(1, 1) == pytest.approx(0.01) and times.target(4, 1) == pytest.approx(0.03)
    assert times.drafter(8, 1) == pytest.approx(0.05) and times.target(4, 4) is None and times.batches == (1,)


def test_roofline_step_times_are_the_roofline_models(drafter_dirs, test_bed):
    """The speedup's roofline step times are roofline.py's own functions on the target's and drafter's
    configs: a longer block costs more, and at batch 1 a decode step is bound by reading the weights."""
    from dflash_eval.core import roofline as RF
    from dflash_eval.formats.checkpoints import checked_spec

    config = json.loads((test_bed["qwen3"] / "config.json").read_text())
    spec, _ = checked_spec(drafter_dirs["zlab"])
    times = S.roofline_step_times("h200", config, spec, 100)
    device, shape = RF.accelerator("h200"), RF.model_shape(config)
    assert times.target(4, 16) == RF.step_time(shape, device, 16, 4, 100)
    assert times.drafter(4, 16) == RF.drafter_step_time(RF.drafter_shape_from_spec(spec), device, 16, 100, 4,
                                                        block_size=4)
    assert times.target(8, 64) >= times.target(4, 64) >= times.target(1, 64) > 0
    assert times.batches == S.BATCHES and "h200" in times.label and times.inputs["context_tokens"] == 100
    with pytest.raises(InputError, match="unknown"):
        S.roofline_step_times("tpu9000", config, spec, 100)
