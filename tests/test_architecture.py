"""The layout is the data flow (ARCHITECTURE.md): checked on the import graph, and on the work counters.

Folders are the layers, bottom up: core (pure: no torch, no model) -> formats (checkpoint files and
formats) -> model (the target, the drafter, the replay engine, the live loop) -> pipeline (the stages, in
their order) -> render (views) -> commands (compositions of the stages) -> cli (the interface). A module
imports only its own folder or lower ones, a stage only earlier stages, no circle exists anywhere, and no
product module, the demo's build included, imports the test helpers (dflash_eval/testing/), which the wheel
leaves out.

A wing (serving/, doctor/, training/) is one satellite command in one package, with its own small layers bottom up (WINGS),
each as high as the main layer it stands for (LIKE): a wing module imports its wing's lower layers and the
main stack up to that layer, never another wing; the main stack imports a wing only in cli/__init__.py,
the one list that registers the commands.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app

PACKAGE = Path(__file__).resolve().parents[1] / "dflash_eval"
# folder -> the folders it may import (besides itself)
ALLOWED = {
    "core": set(),
    "formats": {"core"},
    "model": {"core", "formats"},
    "pipeline": {"core", "formats", "model"},
    "render": {"core", "formats", "model", "pipeline"},
    "commands": {"core", "formats", "model", "pipeline", "render"},
    "cli": {"core", "formats", "model", "pipeline", "commands", "render", "demo"},
    "demo": {"core", "formats", "model", "pipeline", "commands"},  # never testing/: the wheel leaves it out
    "testing": {"core", "formats", "model", "pipeline", "demo"},
}
# wing -> its layers, bottom up; each stands for the main layer LIKE names (and may import what that one may)
WINGS = {
    "serving": ["counters", "exports", "views", "commands", "cli"],
    "doctor": ["views", "commands", "figures", "cli"],
    "training": ["views", "commands", "cli"],
}
LIKE = {"counters": "core", "exports": "formats", "views": "render", "commands": "commands", "figures": "demo",
        "cli": "cli"}
REGISTRY = "cli"  # cli/__init__.py: the one main-stack module that imports the wings (their commands)
STAGES = ["prompts", "inputs", "run_folder", "track_folder", "continuations", "trajectories", "scoring", "rows",
          "document"]


def imports() -> dict[str, set[str]]:
    """module -> the dflash_eval modules it imports (module level and inside functions), dotted from the
    package ("core.metrics"); `from . import x` counts x when it is a module."""
    graph = {}
    for file in PACKAGE.rglob("*.py"):
        parts = list(file.relative_to(PACKAGE).with_suffix("").parts)
        package = parts[:-1]
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        deps = set()
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[:len(package) - (node.level - 1)]
                head = base + (node.module.split(".") if node.module else [])
                for alias in node.names:
                    candidate = head + [alias.name]
                    as_module = PACKAGE.joinpath(*candidate).with_suffix(".py").exists() or \
                        PACKAGE.joinpath(*candidate, "__init__.py").exists()
                    deps.add(".".join(candidate if as_module else head))
            elif isinstance(node, ast.Import):
                deps.update(a.name.removeprefix("dflash_eval.") for a in node.names if a.name.startswith("dflash_eval."))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dflash_eval."):
                deps.add(node.module.removeprefix("dflash_eval."))
        graph[module] = {d for d in deps if d and d != module}
    return graph


def folder(module: str) -> str:
    head = module.split(".")[0]
    return head if "." in module or head in ALLOWED or head in WINGS else "(top)"


def wing_layer(module: str) -> str | None:
    """A wing module's own layer ("serving.counters.counts" -> "counters", "serving.cli" -> "cli"); None for
    the wing's package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_lives_in_a_layer_folder():
    loose = [m for m in imports() if m not in ("", "__main__") and
             (folder(m) not in ALLOWED and folder(m) not in WINGS
              or folder(m) in WINGS and wing_layer(m) not in (None, *WINGS[folder(m)]))]
    assert not loose, f"modules outside the layer folders (ARCHITECTURE.md says where they go): {loose}"


def layer_problems(graph: dict[str, set[str]]) -> list[str]:
    """Every import that breaks the layer rules: a main-stack import that climbs, a stage that reaches forward,
    a main-stack import of a wing (outside the REGISTRY), a wing importing another wing, a wing layer importing
    a higher one of its own or a main layer above the one it stands for."""
    problems = []
    for module, deps in graph.items():
        if module in ("", "__main__"):
            continue
        here = folder(module)
        for dep in deps:
            there = folder(dep)
            if here in WINGS:
                layer = wing_layer(module)
                if there in WINGS and there != here:
                    problems.append(f"{module} (wing {here}) imports {dep}, another wing")
                elif there == here:
                    layers, theirs = WINGS[here], wing_layer(dep)
                    if layer is not None and theirs is not None and layers.index(theirs) > layers.index(layer):
                        problems.append(f"{module} ({here}/{layer}) imports {dep}, a higher layer of its wing")
                elif layer is not None and there != LIKE[layer] and there not in ALLOWED[LIKE[layer]]:
                    problems.append(f"{module} ({here}/{layer}, as high as {LIKE[layer]}/) imports {dep} ({there})")
            elif there in WINGS:
                if module != REGISTRY:
                    problems.append(f"{module} ({here}) imports {dep}: the main stack never imports a wing")
            elif here != there and there not in ALLOWED[here]:
                problems.append(f"{module} ({here}) imports {dep} ({there})")
            if here == there == "pipeline" and dep.split(".")[1] in STAGES and module.split(".")[1] in STAGES:
                if STAGES.index(dep.split(".")[1]) > STAGES.index(module.split(".")[1]):
                    problems.append(f"stage {module} reaches forward to the later stage {dep}")
    return problems


def test_folders_import_only_their_own_layer_or_lower_ones_and_stages_flow_one_way():
    assert not layer_problems(imports()), "\n".join(layer_problems(imports()))


def test_the_layer_check_catches_each_kind_of_wrong_import():
    """The rules above, on a made-up graph: each wrong import is named, the right ones pass."""
    made_up = {
        "commands.evaluate": {"serving.counters.counts"},  # the main stack reaching into a wing
        "cli": {"serving.cli"},  # the registry: allowed
        "serving.counters.counts": {"serving.views.served", "core.metrics", "formats.files"},
        "serving.views.served": {"serving.counters.counts", "render.html", "commands.diff"},
        "serving.cli": {"serving.commands.served", "cli.common", "commands.diff"},
        "serving.commands.served": {"other.cli"},
        "core.metrics": {"render.html"},
    }
    WINGS["other"] = ["cli"]
    try:
        found = layer_problems(made_up)
    finally:
        del WINGS["other"]
    assert sorted(found) == sorted([
        "commands.evaluate (commands) imports serving.counters.counts: the main stack never imports a wing",
        "serving.counters.counts (serving/counters) imports serving.views.served, a higher layer of its wing",
        "serving.counters.counts (serving/counters, as high as core/) imports formats.files (formats)",
        "serving.views.served (serving/views, as high as render/) imports commands.diff (commands)",
        "serving.commands.served (wing serving) imports other.cli, another wing",
        "core.metrics (core) imports render.html (render)",
    ])


def test_no_import_circle_anywhere():
    graph = imports()
    state: dict[str, int] = {}
    circles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                circles.append(" -> ".join(path[path.index(dep):] + [dep]) if dep in path else f"{node} -> {dep}")
            elif dep in graph and not state.get(dep):
                visit(dep, path + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in ("", "__main__") and not node.endswith("cli") and not state.get(node):
            visit(node, [node])
    # the cli package's __init__ imports its command modules, which register on cli.root: not a circle
    circles = [c for c in circles if not c.startswith("cli ->") and "-> cli ->" not in c and not c.endswith("-> cli")]
    assert not circles, "\n".join(circles)


def test_core_is_pure():
    """core/ (and a wing's layer that stands for it) holds plain functions over ints, lists and dicts: it never
    imports torch or transformers."""
    heavy = []
    pure = [PACKAGE / "core"] + [PACKAGE / wing / layer for wing, layers in WINGS.items() for layer in layers
                                 if LIKE[layer] == "core"]
    for file in (f for place in pure for f in place.rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            heavy += [f"{file.name}: {n}" for n in names if n.split(".")[0] in ("torch", "transformers", "safetensors")]
    assert not heavy, heavy


def private_uses(source: str) -> list[str]:
    """What a module takes of another module's private names: `from X import _name` from our package, and
    `alias._name` on a module imported from it (`from . import metrics as M` ... `M._pool`)."""
    tree = ast.parse(source)
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("dflash_eval")):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"line {node.lineno}: imports {alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("dflash_eval"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(f"line {node.lineno}: uses {node.value.id}.{node.attr}")
    return found


def test_no_module_takes_another_module_s_private_names():
    """A `_name` is its module's own business: another module that needs it asks for a public name, so a
    private helper can change without a caller elsewhere breaking (ARCHITECTURE.md's claim, checked)."""
    caught = private_uses("from .scoring import _replay, windowed\nfrom . import metrics as M\nM._pool(1)\n")
    assert caught == ["line 1: imports _replay", "line 3: uses M._pool"]  # the check itself finds both kinds
    found = [f"{f.relative_to(PACKAGE)} {use}" for f in sorted(PACKAGE.rglob("*.py"))
             for use in private_uses(f.read_text())]
    assert not found, "\n".join(found)


def test_no_module_runs_away():
    """Modules are split by idea, not by a line count; this only catches a file that grew without anyone
    deciding to (the largest module is about 400 lines)."""
    long = {str(f.relative_to(PACKAGE)): n for f in PACKAGE.rglob("*.py")
            if (n := len(f.read_text().splitlines())) > 1000}
    assert not long, f"past 1,000 lines: does each of these still hold one idea? {long}"


def test_every_module_path_architecture_md_names_exists():
    """ARCHITECTURE.md's paths (a module per layer, the wings' modules) are read by newcomers to find the
    code: a renamed or removed module fails here until the page follows."""
    import re

    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`((?:core|formats|model|pipeline|commands|render|cli|testing|demo|" + "|".join(WINGS) + r")/[\w/]+\.py)`", text))
    assert len(named) > 20, "ARCHITECTURE.md names a module of each layer and the wings' modules"
    missing = sorted(p for p in named if not (PACKAGE / p).exists())
    assert not missing, f"ARCHITECTURE.md names modules that do not exist: {missing}"


def test_architecture_md_is_one_screen_with_the_layers_in_their_order():
    """One screen (issue 50): the layers one row each, bottom up, in an order where each imports only the rows
    above it (ALLOWED, which the import test enforces); the two-step recipe for an option is on it."""
    import re

    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text()
    assert len(text.splitlines()) <= 60
    rows = re.findall(r"^\| `(\w+)/` \|", text, flags=re.M)
    assert rows == ["core", "formats", "model", "pipeline", "render", "commands", "cli"]
    assert all(ALLOWED[layer] & set(rows) <= set(rows[:i]) for i, layer in enumerate(rows))  # cli also imports demo
    assert "A new option, two edits" in text


def test_the_wheel_leaves_the_test_helpers_out_and_keeps_the_demo_build():
    """pyproject.toml's package list (setuptools' find, as the wheel's build runs it): dflash_eval.testing is
    not shipped, the demo (its trainer, tokenizer and checkpoint writer) is; no shipped module imports
    testing/ (the import rule above), so `dflash-eval demo` builds its models from a base install."""
    import tomllib

    from setuptools import find_packages

    found = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    shipped = find_packages(str(PACKAGE.parent), include=found["include"], exclude=found.get("exclude", ()))
    assert "dflash_eval.demo" in shipped and "dflash_eval.cli" in shipped
    assert all(f"dflash_eval.{wing}.{layer}" in shipped for wing, layers in WINGS.items() for layer in layers
               if (PACKAGE / wing / layer).is_dir())  # the wings' layer packages ship with the main stack
    assert not [p for p in shipped if p.startswith("dflash_eval.testing")], shipped
    graph = imports()
    assert not [m for m, deps in graph.items() if not m.startswith("testing")
                and any(d.split(".")[0] == "testing" for d in deps)]


def test_every_module_says_why_it_exists():
    silent = [str(f.relative_to(PACKAGE)) for f in PACKAGE.rglob("*.py") if not ast.get_docstring(ast.parse(f.read_text()))]
    assert not silent, f"modules without a docstring: {silent}"


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


# names the typing module gained after Python 3.10, with the version that brought each
TYPING_SINCE = {"NotRequired": (3, 11), "Required": (3, 11), "Self": (3, 11), "LiteralString": (3, 11),
                "Never": (3, 11), "assert_never": (3, 11), "assert_type": (3, 11), "reveal_type": (3, 11),
                "Unpack": (3, 11), "TypeVarTuple": (3, 11), "dataclass_transform": (3, 11), "override": (3, 12),
                "TypeAliasType": (3, 12), "ReadOnly": (3, 13), "TypeIs": (3, 13)}


def test_the_python_floor_is_the_one_the_code_needs_and_mypy_checks():
    """requires-python's floor admits no install on which the package cannot import: every typing name the
    package uses (`from typing import X` or `typing.X`) exists there (3.10 was admitted while the documents'
    TypedDicts import NotRequired, new in 3.11), and mypy's python_version ([tool.mypy], the CI step) is that
    floor, so mypy refuses a newer name too."""
    import tomllib

    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    floor_text = project["project"]["requires-python"]
    assert floor_text.startswith(">="), floor_text
    floor = tuple(int(p) for p in floor_text[2:].split(".")[:2])
    assert project["tool"]["mypy"]["python_version"] == ".".join(map(str, floor))
    newer = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.ImportFrom) and node.module == "typing"
                     else [node.attr] if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                     and node.value.id == "typing" else [])
            newer += [f"{path.relative_to(PACKAGE)}: typing.{n} (Python {'.'.join(map(str, TYPING_SINCE[n]))})"
                      for n in names if TYPING_SINCE.get(n, (0,)) > floor]
    assert not newer, f"requires-python {floor_text} admits Pythons without: {newer}"
