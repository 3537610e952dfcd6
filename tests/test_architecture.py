"""The layout is the data flow (ARCHITECTURE.md): checked on the import graph, and on the work counters.

Layers, bottom up: core (pure functions and schemas, no model) -> model (checkpoints, the drafter, the
target, the replay engine and live loop) -> the pipeline stages in their order -> compositions (evaluate,
doctor, diff, inspect, the DataFrame reader) -> the interface (CLI, renderers, demo). A module imports
only its own layer or lower ones, a stage only earlier stages, and no product module imports the test
infrastructure (dflash_eval/testing/), which only the demo's model build uses.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app

PACKAGE = Path(__file__).resolve().parents[1] / "dflash_eval"
CORE = {"errors", "metrics", "repetition", "compare", "spec", "semantics", "masks", "results", "paths", "samples",
        "references", "safe_text", "options", "track_summary", "estimates", "gap"}
MODEL = {"checkpoints", "checkpoint_scan", "drafter", "drafting", "engine", "estimation", "live", "sampling", "target", "variants"}
STAGES = ["prompts", "inputs", "rundir", "trackdir", "continuations", "trajectories", "scoring", "rows", "document"]
COMPOSITIONS = {"api", "doctor", "diffing", "inspection", "frames", "tracking", "merging"}


def imports() -> dict[str, set[str]]:
    """module -> the dflash_eval modules it imports (module level and inside functions), as top-level
    names ("render.terminal" counts as "render", "testing.train" as "testing")."""
    graph = {}
    for file in PACKAGE.rglob("*.py"):
        module = ".".join(file.relative_to(PACKAGE).with_suffix("").parts)
        package = module.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[:len(package) - (node.level - 1)]
                targets = [base + node.module.split(".")] if node.module else [base + [a.name] for a in node.names]
                deps.update(t[0] for t in targets if t)
            elif isinstance(node, ast.Import):
                deps.update(a.name.split(".")[1] for a in node.names if a.name.startswith("dflash_eval."))
        graph[module] = deps - {"__version__", module.split(".")[0]}
    return graph


def layer(module: str) -> int:
    top = module.split(".")[0]
    if top in CORE:
        return 0
    if top in MODEL:
        return 1
    if top in STAGES:
        return 2
    if top in COMPOSITIONS:
        return 3
    return 4  # cli, cli_options, render, demo, package __init__


def test_every_module_is_placed_in_a_layer():
    known = CORE | MODEL | set(STAGES) | COMPOSITIONS | {"cli", "cli_options", "__init__", "__main__", "distributed"}
    for module in imports():
        top = module.split(".")[0]
        assert top in known or top in ("render", "demo", "testing"), f"{module}: add it to a layer (ARCHITECTURE.md)"


def test_no_module_imports_a_layer_above_its_own_and_stages_flow_one_way():
    problems = []
    for module, deps in imports().items():
        if module.startswith("testing") or module == "demo.build":
            continue
        for dep in deps:
            if dep.startswith("testing"):
                problems.append(f"{module} imports test infrastructure {dep}")
            elif layer(dep) > layer(module):
                problems.append(f"{module} (layer {layer(module)}) imports {dep} (layer {layer(dep)})")
            elif layer(module) == layer(dep) == 2 and STAGES.index(dep.split(".")[0]) > STAGES.index(module):
                problems.append(f"stage {module} reaches forward to the later stage {dep}")
            elif layer(module) == layer(dep) == 3 and dep != module:
                problems.append(f"composition {module} imports the composition {dep}")
    assert not problems, "\n".join(problems)


runner = CliRunner()


@pytest.mark.parametrize("command", ["run", "doctor"])
def test_one_target_pass_per_prompt_through_the_shared_stages(command, drafter_dirs, test_bed, tmp_path):
    """However many drafters (run) or variants (doctor): the target runs once per prompt."""
    common = ["--target", str(test_bed["qwen3"]), "--limit", "3", "--max-new-tokens", "8", "--device", "cpu",
              "--cache-dir", str(tmp_path / "cache")]
    if command == "run":
        args = ["run", "-d", str(drafter_dirs["zlab"]), "-d", f"{drafter_dirs['speculators']}:s", "-d",
                str(drafter_dirs["sliding"]), "--out", str(tmp_path / "r"), "--no-html", *common]
    else:
        args = ["doctor", "-d", str(drafter_dirs["sliding"]), "--out", str(tmp_path / "d"), *common]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    if command == "run":
        work = json.loads((tmp_path / "r" / "run.json").read_text())["provenance"]["work"]
        assert work["tap_passes"] == 3 and work["prompts_evaluated"] == 3
    else:
        doctor = json.loads((tmp_path / "d" / "doctor.json").read_text())
        assert doctor["passes"]["variants"] == 3 and len(doctor["variants"]) >= 8
        assert doctor["tap_passes"] == 3 * 3  # plus one pass per prompt for each of the 2 context variants


def test_help_and_error_paths_import_no_torch_or_transformers():
    """`dflash-eval --help`, a command's --help and a refused input stay fast: no torch, no transformers."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from typer.testing import CliRunner\n"
            "from dflash_eval.cli import app\n"
            "runner = CliRunner()\n"
            "for args in (['--help'], ['run', '--help'], ['doctor', '--help'], ['track', '--help'], ['report', '/nonexistent'],\n"
            "             ['show', '/nonexistent'], ['diff', '/a', '/b'], ['--version']):\n"
            "    result = runner.invoke(app, args)\n"
            "    assert result.exit_code in (0, 2), (args, result.output)\n"
            "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
