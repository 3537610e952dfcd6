"""`dflash_eval.read_run`: a stored run as DataFrames whose counts re-divide to the run's own numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

import dflash_eval

RUN = Path(__file__).parent / "data" / "report_run"


def test_frames_hold_counts_that_reproduce_the_runs_metrics():
    frames = dflash_eval.read_run(RUN)
    assert set(frames.drafters.drafter) == {"trained", "repeat-anchor"}
    for name, group in frames.prompts.groupby("drafter"):
        metrics = next(d["metrics"] for d in frames.run["drafters"] if d["name"] == name)
        assert group.tau.mean() == pytest.approx(metrics["tau_macro"])  # z-lab: mean of per-prompt means
        assert group.committed.sum() / group.steps.sum() == pytest.approx(metrics["tau_micro"])  # vLLM: pooled
        slots = frames.slots[frames.slots.drafter == name].sort_values("slot")
        assert list(slots.reach) == pytest.approx(metrics["reach"])
        assert (slots.steps == metrics["steps"]).all()
    blocks = frames.blocks
    assert len(blocks) == int(frames.prompts.steps.sum())
    assert (blocks.committed == blocks.accepted + 1).all()
    flagged = blocks[blocks.repetition_flags.str.len() > 0]
    assert set(flagged.drafter) == {"repeat-anchor"}


def test_read_run_refuses_what_is_not_a_run(tmp_path):
    from dflash_eval.core.errors import InputError

    with pytest.raises(InputError, match="no run.json"):
        dflash_eval.read_run(tmp_path)
