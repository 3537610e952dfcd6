"""The GPU check's phase table (benchmarks/gpu_check.py part c) runs end to end: on the CPU with a tiny
shape (`--smoke`), so that the script a GPU session runs unattended has been through its code path; and
benchmarks/real_vocab.py's table (docs/performance.md) at tiny shapes, every figure written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_phase_table_runs_on_cpu_smoke():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--smoke"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for phase in ("generation", "tap pass", "drafter pass", "live-loop step", "modelled speedup, tau 4, 5 drafter(s)"):
        assert phase in done.stdout, done.stdout


def test_real_vocab_table_runs_on_tiny_shapes(tmp_path):
    import json

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "real_vocab.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "real_vocab.py"), "--smoke", "--threads", "1", "--rounds", "2",
                           "--json", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["shapes"]["smoke"]
    assert [r["config"] for r in rows] == ["default", "8", "before"]
    for r in rows:
        assert r["seconds"] > 0 and r["flops"] > 0 and r["peak_bytes"] > 0
        assert abs(sum(r["flops_by_part"].values()) - r["flops"]) < 1e-6 * r["flops"]
        assert r["flops_by_part"]["lm_head"] == 2 * 64 * 1000 * r["slots"] + 2 * 64 * 1000 * 38  # and slot 0 of the 38 anchors
        assert r["slots_changed_vs_default"] <= r["slots"]
    assert "default / best" in done.stdout and "split of the default's seconds / FLOPs" in done.stdout


def test_tree_cost_runs_on_tiny_shapes(tmp_path):
    """benchmarks/tree_cost.py at tiny shapes: the chain's drafts identical with and without trees, the live
    tree loop's walks equal to the offline ones at every budget, every figure written."""
    import json

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "tree_cost.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tree_cost.py"), "--smoke", "--rounds", "1",
                           "--json", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["overhead"]["chain_drafts_identical"] and data["overhead"]["ratio"] > 0
    assert data["live"]["walks_equal"] and data["live"]["live_total_seconds"] > 0
    assert "live / offline" in done.stdout
