"""The GPU check's phase table (benchmarks/gpu_check.py part c) runs end to end: on the CPU with a tiny
shape (`--smoke`), so that the script a GPU session runs unattended has been through its code path."""

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
