"""The first GPU check (benchmarks/gpu_probe.sh, issue 47) proven on the CPU: its rehearsal runs every part end
to end in one process with the stub fla, and what a short remote run brings back fits: at most 6 files, at
most 2 folders deep, under $OUT (the work folder and the Triton cache's files elsewhere, packed as one
tarball); a probe cut short by its deadline still leaves its summary, naming the part it was in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _listing(out: Path) -> list[Path]:
    return sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())


@pytest.mark.slow
def test_the_rehearsal_runs_every_part_and_leaves_three_files(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    env = {**os.environ, "OUT": str(out), "PROBE_WORK": str(work), "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "PROBE_TIMEOUT": "900"}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_probe.sh"), "--rehearse"], env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    files = _listing(out)
    assert files == [Path("probe.json"), Path("probe.log"), Path("triton-cache.tar.gz")]
    assert len(files) <= 6 and all(len(f.parts) <= 3 for f in files)  # at most 2 folders deep: here none
    assert work.is_dir() and (work / "triton").is_dir()  # the work folder is outside OUT
    with tarfile.open(out / "triton-cache.tar.gz") as tar:
        assert all(name == "triton" or name.startswith("triton/") for name in tar.getnames())
    summary = json.loads((out / "probe.json").read_text())
    assert summary["finished"] and summary["rehearsal"] and not summary.get("timed_out")
    parts = summary["parts"]
    assert list(parts) == ["start", "peak", "build", "generation", "taps", "drafter", "kernels"]
    assert all(p["status"] == "ok" and p["seconds"] <= p["budget_s"] for p in parts.values()), parts
    figures = {name: p["figures"] for name, p in parts.items()}
    assert figures["start"]["threads"]["torch"] == 1
    assert figures["peak"]["bf16 GEMM"]["tflops"] > 0
    plan = figures["generation"]["plan"]  # the product's own batch (8 on a CPU), the cache at its full length
    assert plan["batch"] == 8 and plan["cache_tokens"] == 8 * (plan["longest_prompt"] + plan["max_new_tokens"] - 8)
    assert figures["generation"]["decode steps"]["cache_tokens"] == plan["cache_tokens"] + 8 * 8
    for name, key in (("taps", "tap pass"), ("drafter", "drafter pass")):
        assert figures[name][key]["counted_flops"] > 0 and figures[name][key]["share_of_measured_peak"] > 0
    assert figures["drafter"]["drafter pass"]["counted_flops"] > figures["drafter"]["drafter pass"]["lm_head_flops"]
    assert figures["drafter"]["fp32 scores"]["dtype"] == "torch.float32"
    called = figures["kernels"]["kernels called per operation (calls over all layers)"]
    assert "fla.ops.gated_delta_rule.chunk_gated_delta_rule" in called["chunk_gated_delta_rule"]  # the stub, counted
    assert "max_rel_diff" in figures["kernels"]["taps fla vs torch fallback"]
    log = (out / "probe.log").read_text()
    assert "=== generation" in log and "gpu_probe: exit 0" in log


@pytest.mark.slow
def test_a_probe_cut_short_by_its_deadline_leaves_its_summary(tmp_path):
    """The watchdog: at the deadline the part running is named as timed out in probe.json, the process ends
    with 124; a part with less time left than its budget is skipped, not started."""
    script = f"""
import sys, time
sys.path.insert(0, {str(ROOT / 'benchmarks')!r})
import gpu_probe
gpu_probe.BUDGETS.update(start=0, peak=0, build=1000)
gpu_probe.Probe.measure_peak = lambda self: time.sleep(60)
sys.exit(gpu_probe.main(["--out", {str(tmp_path / 'out')!r}, "--rehearse", "--deadline", "20"]))
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": f"{ROOT / 'dflash_eval' / 'testing' / 'stub_fla'}:{ROOT}"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 124, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "probe.json").read_text())
    assert summary["timed_out"] and not summary["finished"]
    assert summary["parts"]["start"]["status"] == "ok"
    assert summary["parts"]["peak"]["status"] == "timed out (the probe's deadline)"
    assert _listing(tmp_path / "out") == [Path("probe.json")]


@pytest.mark.slow
def test_the_bundled_fla_goes_into_the_work_folder_only_when_fla_is_absent_and_asked_for(tmp_path):
    """`--install-bundled-fla` where fla is installed (the stub on PYTHONPATH) leaves it as it is; where it is
    absent, the bundled wheels go into the work folder, on PYTHONPATH for that run only, and the interpreter's
    own packages never change. (No CUDA here: the probe stops at its start part, which is all this needs.)"""
    stub = str(ROOT / "dflash_eval" / "testing" / "stub_fla")
    base = {**os.environ, "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PROBE_TIMEOUT": "300"}
    base.pop("PYTHONPATH", None)

    def probe(name, **env):
        return subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_probe.sh"), "--install-bundled-fla"],
                              env={**base, "OUT": str(tmp_path / name / "out"), "PROBE_WORK": str(tmp_path / name / "work"),
                                   **env}, capture_output=True, text=True, timeout=600)

    present = probe("present", PYTHONPATH=stub)
    assert "fla is installed; --install-bundled-fla leaves it as it is" in present.stdout, present.stdout[-3000:]
    assert not (tmp_path / "present" / "work" / "site").exists()
    absent = probe("absent")
    assert "bundled fla 0.6.0 put in" in absent.stdout, absent.stdout[-3000:]
    assert (tmp_path / "absent" / "work" / "site" / "fla" / "__init__.py").is_file()
    summary = json.loads((tmp_path / "absent" / "out" / "probe.json").read_text())
    assert summary["parts"]["start"]["figures"]["versions"]["fla_path"].startswith(str(tmp_path / "absent" / "work"))
    for done in (present, absent):  # no CUDA: the probe says so in its summary and ends 1, the rest not run
        assert done.returncode == 1
    assert summary["parts"]["start"]["status"].startswith("failed: RuntimeError: no CUDA device")
    assert summary["parts"]["kernels"]["status"].startswith("not run")
    check = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('fla'))"],
                           env=base, capture_output=True, text=True)
    assert check.stdout.strip() == "None"  # the environment's packages as they were
