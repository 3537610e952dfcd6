"""The user's path in CI (issue 34): the base install is enough for the package, the smoke pass runs every
command, .ci/run walks the user's path before the test install, and the install problems a newcomer hit
read as one line naming what is missing. (.ci/run itself runs the quick start in a fresh venv; the numbers
of that run are in docs/ci.md.)"""

from __future__ import annotations

import ast
import importlib.metadata as md
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

ROOT = Path(__file__).resolve().parents[1]
# imported by dflash_eval, not declared as a base dependency, and why that is right
NOT_DECLARED = {
    "click": "typer's own dependency; its exceptions are what typer raises",
    "tensorboard": "track --tensorboard only, imported there and refused by name when missing (test extra)",
    "fla": "the fla extra on GPU machines; found with importlib.util.find_spec, never required",
    "pyarrow": "the hf extra (large): formats/hf_cache.py and training_data.py import it where "
               "parquet / arrow files are read, and refuse them by name without it",
    "datasets": "dflash_eval/testing writes trainer data as speculators does (the test and conformance extras)",
    "gguf": "--serving-target FILE.gguf only (transformers' GGUF loader needs it), refused by name when missing "
            "(core/options_inputs.ServingTarget); testing/quantised.py writes the tests' GGUF copies (test extra)",
}


def third_party_imports() -> dict[str, set[str]]:
    """Top-level module name -> the dflash_eval files importing it (absolute imports outside the stdlib)."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "dflash_eval").rglob("*.py"):
        if "stub_fla" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "dflash_eval":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def base_requirements() -> set[str]:
    """pyproject.toml's [project] dependencies by name (read from the file: the installed metadata may be
    an older checkout's)."""
    block = re.search(r"^dependencies = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(), flags=re.S | re.M)
    requirements = re.findall(r'^\s*"([^"]+)"', block.group(1), flags=re.M)
    return {re.match(r"[A-Za-z0-9._-]+", r).group(0).lower().replace("_", "-") for r in requirements}


def test_every_package_dflash_eval_imports_is_a_base_dependency():
    """A package imported but only installed by an extra (or by the system's site-packages, which the
    bootstrap venv sees) works in CI and fails on a user's fresh machine: each must be declared."""
    distributions = md.packages_distributions()
    declared = base_requirements()
    missing = {}
    for module, files in sorted(third_party_imports().items()):
        if module in NOT_DECLARED:
            continue
        names = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        if not names & declared:
            missing[module] = sorted(files)[:3]
    assert missing == {}, f"imported but not in pyproject.toml [project] dependencies: {missing}"
    # what transformers needs for the device_map every target is loaded with (model/target.py)
    assert "accelerate" in declared


def test_a_missing_accelerate_is_one_line_naming_it(test_bed, monkeypatch):
    """transformers refuses every device_map without accelerate; load_target says so before it does. (The
    one-device device_map path itself: tests/test_gpu_readiness.py, weights straight onto the device.)"""
    import importlib.util

    from dflash_eval.core.errors import InputError
    from dflash_eval.model.target import load_target

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "accelerate" else real(name, *a))
    with pytest.raises(InputError) as refused:
        load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    assert "the accelerate package is missing" in refused.value.one_line()
    assert "pip install" in refused.value.one_line()


def test_the_smoke_pass_runs_every_command_of_the_cli():
    from dflash_eval.cli import app

    text = (ROOT / "scripts" / "smoke.sh").read_text()
    ran = set(re.findall(r'"\$DFLASH" ([a-z][a-z-]*)', text))
    commands = set(typer.main.get_command(app).commands) - {"demo"}  # the quick start runs the demo
    assert commands - ran == set(), f"scripts/smoke.sh does not run: {sorted(commands - ran)}"
    for needed in ("--draft-lengths", "--json", "served_dump", "demo.train", "--shard 0/2", "merge"):
        assert needed in text, needed


def test_ci_walks_the_users_path_before_the_test_install():
    """.ci/run: the user's path first (the README's first bash block, a base install), then the README's
    pytest block; the first block must stay the base install's quick start for that to mean anything."""
    ci = (ROOT / ".ci" / "run").read_text()
    user = re.search(r"^bash scripts/user_path.sh \|\|.*exit 1", ci, flags=re.M)
    tests = re.search(r'^bash -c "\$tests"', ci, flags=re.M)
    assert user and tests and user.start() < tests.start() and "/pytest/" in ci
    user_path = (ROOT / "scripts" / "user_path.sh").read_text()
    assert "scripts/smoke.sh .venv" in user_path and "missing base dependency" in user_path
    first = re.search(r"^```bash\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.S | re.M).group(1)
    assert "bootstrap.sh" in first and "dflash-eval demo" in first and "bootstrap.sh test" not in first


def test_gpu_check_names_a_python_without_torch_before_any_part(tmp_path):
    """Outside a venv every part failed in 1 s with No module named 'torch': now one line, before any part."""
    bare = tmp_path / "python"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")  # -S: no site-packages, so no torch
    bare.chmod(0o755)
    env = {**os.environ, "PYTHON": str(bare), "OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--rehearse"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"{bare} cannot import torch, so no part can run" in done.stderr and "===" not in done.stdout + done.stderr


def test_the_tiny_bed_builder_takes_help_for_help(tmp_path, monkeypatch, capsys):
    """`python -m dflash_eval.testing.tiny --help` wrote 5.5 MB of models into ./--help/."""
    from dflash_eval.demo import train
    from dflash_eval.testing import tiny

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        tiny.main(["--help"])
    assert done.value.code == 0 and "OUT_DIR" in capsys.readouterr().out and list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit):
        train.main(["--help"])
    assert "python -m dflash_eval.testing.tiny OUT" in " ".join(capsys.readouterr().out.split())


def test_pytest_benchmark_of_the_system_stays_out_of_the_suite():
    """The bootstrap venv sees the system's site-packages; their pytest-benchmark warned on every xdist run."""
    options = re.search(r'^addopts = "(.*)"', (ROOT / "pyproject.toml").read_text(), flags=re.M).group(1)
    assert "-p no:benchmark" in options.split(" -") or "-p no:benchmark" in options


@pytest.mark.compat
def test_the_transformers_under_test_is_inside_the_supported_range_the_docs_state():
    """pyproject.toml is the one home of the supported range; this suite runs at both of its ends in CI (the
    fresh resolve and scripts/compat.sh's lower bound), each run checks its own version is inside, and
    docs/install.md states the same range."""
    from packaging.specifiers import SpecifierSet

    text = (ROOT / "pyproject.toml").read_text()
    declared = re.search(r'"transformers(>=[0-9.]+,<[0-9.]+)"', text)
    assert declared, "pyproject.toml declares no transformers range"
    assert md.version("transformers") in SpecifierSet(declared.group(1)), (md.version("transformers"), declared.group(1))
    assert f"`transformers{declared.group(1)}`" in (ROOT / "docs" / "install.md").read_text()
    lower = declared.group(1).split(",")[0][2:]
    compat = (ROOT / "scripts" / "compat.sh").read_text()
    assert 'transformers==$oldest' in compat and "-m compat" in compat
    assert f"{lower}.0" in (ROOT / "docs" / "install.md").read_text()  # the version compat.sh installs, named
