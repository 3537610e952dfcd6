"""Every command the README and the docs/ pages show is run (issues 34, 35): an example cannot rot again.

The test reads the README, then each docs/*.md page in name order, as they are, whatever they say: every line
of their ```bash blocks that runs dflash-eval
(`dflash-eval ...`, `.venv/bin/dflash-eval ...`, `python -m dflash_eval...`, also after `&&`, `;`, `|` or
environment assignments) is run in README order, in one working folder, on the test bed, with its
placeholders filled the way a user would fill them:

- an HF name (`--target Qwen/Qwen3-8B`) is a model in a real Hugging Face cache layout (the tiny target of
  that family under that name), and `--reference z-lab` finds z-lab's drafter for it there, offline;
- a drafter path that does not exist (`./my-drafter`, `-d ./epoch3:e3`, `DRAFTER`) becomes a drafter
  checkpoint there (speculators format, recording the README's target as its verifier, as a trained one
  does); `track DIR` gets a checkpoint series, `served BEFORE AFTER` two vLLM /metrics dumps written from
  the run given with `--run` (made first when missing), `served --per-request FILE` that run's walks as
  vLLM response bodies (`--non-speculative FILE`: its texts as bodies without speculation; a
  `profile_export.jsonl`: AIPerf's records of those walks), `served X.csv` / `profile_export_aiperf.json` AIPerf's
  speed-bench CSV / run summary of them, `--prompts FILE.jsonl` a prompts file, `repo:PATH` a small repository (`~` is the
  test's home), `paper:NAME` and `hf:REPO` the paper's sets in the Hugging Face cache;
- paths into the checkout (`dflash_eval/demo/models/target`) resolve as they do from its root;
- sizes shrink to the test bed's (`SHRINK`, `ADDED`), and `--watch` is dropped (`DROPPED` says why).

A command fails the test when it exits non-zero, and so does a README or docs line that mentions dflash-eval but
is neither run nor listed in `NOT_RUN` with its reason (and a `NOT_RUN` rule that matches nothing any more).
"""

from __future__ import annotations

import glob
import json
import re
import runpy
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from dflash_eval.cli import app

README = Path(__file__).resolve().parents[1] / "README.md"
DOCS = README.parent / "docs"
DEFAULT_TARGET = "Qwen/Qwen3-8B"  # what a drafter of the README records when the README names no target

# README commands not run here, each with the reason (a rule that matches nothing fails the test): keys
# "command NAME" (a dflash-eval subcommand) or "line REGEX" (anything else mentioning dflash)
NOT_RUN = {
    "command demo": "the quick start: .ci/run runs it as written in a fresh base install (scripts/user_path.sh "
                    "checks its taus); tests/test_demo_models.py and test_cli_wording.py read its output",
}
SHRINK = {"--max-new-tokens": 8, "--limit": 2, "--samples": 2, "--context-tokens": 64, "--draft-window": 16,
          "--steps": 20, "--save-every": 10}
ADDED = {"run": {"--max-new-tokens": "8", "--limit": "2"}, "doctor": {"--max-new-tokens": "8", "--limit": "2"},
         "track": {"--max-new-tokens": "8", "--limit": "2"},
         "dflash_eval.demo.train": {"--max-new-tokens": "8"}}
DROPPED = {"--watch": "polls for new checkpoints until Ctrl-C: run once, without it"}
SEPARATORS = {"&&", "||", ";", "|", "&"}


@dataclass
class Command:
    line: str  # the line it comes from
    words: list[str]  # the command as written, split as a shell splits it
    kind: str  # "cli" (dflash-eval ARGS), "module" (python -m dflash_eval.X ARGS) or "other"
    args: list[str] = field(default_factory=list)  # after the program (cli) or the module name (module)
    module: str = ""
    page: str = "README.md"  # the file the line is in


def documented_commands() -> list[Command]:
    """The commands of the README, then of each docs/ page (name order), as `readme_commands` reads them."""
    out = readme_commands(README.read_text(encoding="utf-8"))
    for page in sorted(DOCS.glob("*.md")):
        for command in readme_commands(page.read_text(encoding="utf-8")):
            command.page = f"docs/{page.name}"
            out.append(command)
    return out


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def readme_commands(text: str) -> list[Command]:
    """The dflash-eval invocations of the README's bash blocks, in order."""
    out = []
    for block in bash_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
            lexer.whitespace_split, lexer.commenters = True, "#"
            words, segment = list(lexer), []
            for word in [*words, ";"]:
                if word not in SEPARATORS:
                    segment.append(word)
                    continue
                command = classify(line, segment)
                if command is not None:
                    out.append(command)
                segment = []
    return out


def classify(line: str, words: list[str]) -> Command | None:
    words = list(words)
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):  # VAR=value before the program
        words.pop(0)
    for redirect in (">", ">>", "<"):  # `> before.txt`: not an argument
        while redirect in words:
            i = words.index(redirect)
            del words[i:i + 2]
    if not words:
        return None
    program = Path(words[0]).name
    if program == "dflash-eval":
        return Command(line, words, "cli", words[1:])
    if re.fullmatch(r"python3?(\.\d+)?", program) and len(words) > 2 and words[1] == "-m" \
            and re.fullmatch(r"dflash_eval(\..+)?", words[2]):
        if words[2] in ("dflash_eval", "dflash_eval.cli"):
            return Command(line, words, "cli", words[3:])
        return Command(line, words, "module", words[3:], module=words[2])
    if "dflash" in " ".join(words):
        return Command(line, words, "other")
    return None


def matches(rule: str, command: Command) -> bool:
    kind, _, what = rule.partition(" ")
    if kind == "command":
        return command.kind == "cli" and command.args[:1] == [what]
    return re.search(what, " ".join(command.words)) is not None


def reason_not_run(command: Command) -> str | None:
    return next((reason for rule, reason in NOT_RUN.items() if matches(rule, command)), None)


# ---------------------------------------------------------------------------------------------- the bed

def family(repo_id: str) -> str:
    """The tiny target standing for a named one: the same family (dense Qwen3, Qwen3.5/3.6, Qwen3-Next)."""
    name = repo_id.lower()
    return "qwen3_next" if "next" in name else "qwen3_5_text" if re.search(r"qwen3\.[56]", name) else "qwen3"


class Sandbox:
    """The user's working folder, home and Hugging Face cache; fills placeholders on first use."""

    def __init__(self, root: Path, test_bed: dict[str, Path]):
        self.root, self.bed = root, test_bed
        self.cwd, self.home, self.hub = root / "work", root / "home", root / "hub"
        for folder in (self.cwd, self.home, self.hub):
            folder.mkdir(parents=True)
        # the README's commands run from the checkout (bootstrap.sh is run there): its paths resolve
        (self.cwd / "dflash_eval").symlink_to(Path(__file__).resolve().parents[1] / "dflash_eval")
        self.targets: dict[str, Path] = {}
        self.seed = 10
        self.paper_sets = False
        self.filled: list[str] = []

    def path(self, value: str) -> Path:
        path = Path(value.replace("~", str(self.home), 1) if value.startswith("~") else value)
        return path if path.is_absolute() else self.cwd / path

    def target(self, repo_id: str) -> Path:
        """`repo_id` in the HF cache: the tiny target of its family, and z-lab's drafter for it when the
        registry has one."""
        if repo_id not in self.targets:
            from test_reference_drafters import cache_repo

            from dflash_eval.formats.references import zlab_reference_for
            from dflash_eval.testing.testbed import write_random_drafter

            source = self.bed[family(repo_id)]
            files = {p.name: p.read_bytes() for p in source.iterdir() if p.is_file()}
            self.targets[repo_id] = cache_repo(self.hub, repo_id, files)
            try:
                drafter = zlab_reference_for(repo_id)
            except Exception:  # no published drafter for that target: none in the cache
                drafter = None
            if drafter is not None:
                made = write_random_drafter(source, self.root / "zlab" / drafter, "zlab", seed=1, block_size=4,
                                            num_layers=1)
                cache_repo(self.hub, drafter, {p.name: p.read_bytes() for p in made.iterdir() if p.is_file()})
            self.filled.append(f"{repo_id} in the HF cache")
        return self.targets[repo_id]

    def drafter(self, where: Path, target: str) -> None:
        from dflash_eval.testing.testbed import write_random_drafter

        self.target(target)
        self.seed += 1
        write_random_drafter(self.bed[family(target)], where, "speculators", seed=self.seed, verifier=target,
                             block_size=4, num_layers=1)
        self.filled.append(f"drafter {where.relative_to(self.root)}")

    def series(self, where: Path, target: str) -> None:
        """A training run's save folder as HF Trainer writes it: checkpoint-N/ with trainer_state.json."""
        for step in (10, 20):
            self.drafter(where / f"checkpoint-{step}", target)
            (where / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))

    def prompts_file(self, where: Path) -> None:
        where.parent.mkdir(parents=True, exist_ok=True)
        rows = [{"id": "rev", "prompt": "Write a Python function that reverses a string."},
                {"id": "gcd", "prompt": "Compute the greatest common divisor of two integers."}]
        where.write_text("".join(json.dumps(r) + "\n" for r in rows))
        self.filled.append(f"prompts {where.relative_to(self.root)}")

    def repository(self, where: Path) -> None:
        (where / "pkg").mkdir(parents=True)
        for i in range(3):
            body = "\n".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}\n" for j in range(12))
            (where / "pkg" / f"mod{i}.py").write_text(body)
        self.filled.append(f"repository {where.relative_to(self.root)}")


# ------------------------------------------------------------------------------------------- one command

def parameters(args: list[str]):
    """(subcommand words, {option: click parameter}, positional parameters) of `dflash-eval ARGS`."""
    command, words = typer.main.get_command(app), []
    for word in args:
        if word in (getattr(command, "commands", None) or {}):
            command = command.commands[word]
            words.append(word)
        else:
            break
    options = {o: p for p in command.params if p.param_type_name == "option" for o in (*p.opts, *p.secondary_opts)}
    return words, options, [p for p in command.params if p.param_type_name == "argument"]


def prepared(sandbox: Sandbox, command: Command, target: str) -> tuple[list[str], list[str]]:
    """The arguments as run (placeholders filled, sizes shrunk) and what was changed, said once each."""
    if command.kind == "module":
        return shrink_only(command.args, command.module)
    sub, options, _ = parameters(command.args)
    items, rest, changed = [], command.args[len(sub):], []
    i = 0
    while i < len(rest):  # (option, value or None) or (None, positional)
        word = rest[i]
        name = word.split("=", 1)[0]
        if name in options and not options[name].is_flag and options[name].nargs != 0:
            value = word.split("=", 1)[1] if "=" in word else rest[i + 1]
            items.append((name, value))
            i += 1 if "=" in word else 2
        elif word.startswith("-"):
            items.append((word, None))
            i += 1
        else:
            items.append((None, word))
            i += 1
    given = {name for name, _ in items if name}
    target = next((v for n, v in items if n in ("--target", "-t")), target)
    out = []
    positionals = [v for n, v in items if n is None]
    for name, value in items:
        if name in DROPPED:
            changed.append(f"{name} dropped ({DROPPED[name]})")
            continue
        if name in SHRINK and value is not None and value.isdigit() and int(value) > SHRINK[name]:
            changed.append(f"{name} {value} -> {SHRINK[name]}")
            value = str(SHRINK[name])
        if name in ("--target", "-t") and not sandbox.path(value).exists() and value.count("/") == 1:
            sandbox.target(value)
        if name in ("--reference",) and value == "z-lab":
            sandbox.target(target)
        elif name == "--reference":  # a reference of your own: PATH or PATH:NAME, a z-lab-format folder
            fill_reference(sandbox, value, target)
        if name in ("--drafter", "-d"):
            fill_drafter(sandbox, value, target)
        if name in ("--prompts", "-p"):
            fill_prompts(sandbox, value)
        if name == "--run":
            fill_run(sandbox, value, target)
        if name == "--per-request":
            fill_per_request(sandbox, value, next((v for n, v in items if n == "--run"), None), target)
        if name == "--non-speculative":
            fill_per_request(sandbox, value, next((v for n, v in items if n == "--run"), None), target,
                             speculative=False)
        out += [name] if value is None else [name, value] if name else [value]
    for name, value in ADDED.get(sub[0] if sub else "", {}).items():
        if name in options and not given & set(options[name].opts):
            out += [name, value]
            changed.append(f"{name} {value} added")
    fill_positionals(sandbox, sub, positionals, items, target)
    return [*sub, *expand(sandbox, out)], changed


def shrink_only(args: list[str], module: str) -> tuple[list[str], list[str]]:
    """A module's arguments with sizes shrunk (SHRINK) and added (ADDED), and what changed."""
    out, changed = list(args), []
    for i, word in enumerate(out[:-1]):
        if word in SHRINK and out[i + 1].isdigit() and int(out[i + 1]) > SHRINK[word]:
            changed.append(f"{word} {out[i + 1]} -> {SHRINK[word]}")
            out[i + 1] = str(SHRINK[word])
    for name, value in ADDED.get(module, {}).items():
        if name not in out:
            out += [name, value]
            changed.append(f"{name} {value} added")
    return out, changed


def expand(sandbox: Sandbox, args: list[str]) -> list[str]:
    """Shell globs (`shards/s*`) as a shell expands them in the working folder."""
    out = []
    for word in args:
        hits = sorted(glob.glob(word, root_dir=sandbox.cwd)) if any(c in word for c in "*?[") else []
        out += hits or [word]
    return out


def fill_drafter(sandbox: Sandbox, value: str, target: str) -> None:
    head, sep, tail = value.rpartition(":")
    path = sandbox.path(head if sep and "/" not in tail and not sandbox.path(value).exists() else value)
    if not path.exists():
        sandbox.drafter(path, target)


def fill_reference(sandbox: Sandbox, value: str, target: str) -> None:
    """`--reference ./zlab-reference:z-lab`: a z-lab-format checkpoint folder for the README's target, as a user
    keeps z-lab's drafter (or their own reference) in a local folder."""
    from dflash_eval.testing.testbed import write_random_drafter

    head, sep, tail = value.rpartition(":")
    path = sandbox.path(head if sep and "/" not in tail and not sandbox.path(value).exists() else value)
    if not path.exists():
        sandbox.target(target)
        write_random_drafter(sandbox.bed[family(target)], path, "zlab", seed=7, block_size=4, num_layers=1)
        sandbox.filled.append(f"z-lab-format reference {path.relative_to(sandbox.root)}")


def fill_prompts(sandbox: Sandbox, value: str) -> None:
    for prefix in ("repo:", "dir:"):
        if value.startswith(prefix) and not sandbox.path(value[len(prefix):]).exists():
            sandbox.repository(sandbox.path(value[len(prefix):]))
    if value.endswith(".jsonl") and not sandbox.path(value).exists():
        sandbox.prompts_file(sandbox.path(value))
    if value.startswith(("paper:", "hf:")) and not sandbox.paper_sets:
        from dflash_eval.testing.hub_cache import write_paper_sets

        write_paper_sets(sandbox.hub, sandbox.root / "scratch")
        sandbox.paper_sets = True
        sandbox.filled.append("the paper's sets in the HF cache")


def fill_per_request(sandbox: Sandbox, value: str, run: str | None, target: str, speculative: bool = True) -> None:
    """`served --per-request FILE --run RUN:DRAFTER`: the run's walks as vLLM chat responses with detailed
    per-request spec-decode metrics, one request a line, as a client logging the server's bodies writes them;
    `--non-speculative FILE` (speculative False): the same texts as the server answers without speculation
    (`metrics.speculative_decoding` null)."""
    if sandbox.path(value).exists() or not run:
        return
    from dflash_eval.testing import served_payloads as P

    fill_run(sandbox, run, target)
    head, _, drafter = run.rpartition(":")
    folder = sandbox.path(head)
    run_json = json.loads((folder / "run.json").read_text())
    spec = next(d for d in run_json["drafters"] if d["name"] == drafter)
    k, cap = int(spec["spec"]["block_size"]) - 1, run_json["provenance"]["max_new_tokens"]
    lines = []
    if value.endswith("profile_export.jsonl"):  # AIPerf's records export, keyed by the run's prompt ids
        rows = [r for r in map(json.loads, (folder / "samples.jsonl").read_text().splitlines()) if r["drafter"] == drafter]
        sandbox.path(value).parent.mkdir(parents=True, exist_ok=True)
        sandbox.path(value).write_text("".join(json.dumps(P.aiperf_record(i, r["prompt_id"], P.aiperf_acceptance(
            [n - 1 for n in r["walk_accept_lengths"]], k, completion_tokens=r["continuation_len"]))) + "\n"
            for i, r in enumerate(rows)))
        sandbox.filled.append(f"AIPerf records {value}")
        return
    for row in map(json.loads, (folder / "samples.jsonl").read_text().splitlines()):
        if row["drafter"] != drafter:
            continue
        accepted = [n - 1 for n in row["walk_accept_lengths"]]
        body = P.vllm_chat_response("served-model", "".join(row["continuation_pieces"]), row["continuation_ids"],
                                    row["prompt_len"], P.vllm_spec_metrics(accepted, k, detailed=True)
                                    if speculative else None)
        lines.append(P.starlette_json({"id": row["prompt_id"], "response": body,
                                       "request": {"model": "served-model", "temperature": 0.0,
                                                   "max_tokens": cap}}))
    sandbox.path(value).write_text("\n".join(lines) + "\n")
    sandbox.filled.append(f"vLLM per-request responses {value}" + ("" if speculative else " (no speculation)"))


def fill_run(sandbox: Sandbox, value: str, target: str) -> None:
    head, sep, name = value.rpartition(":")
    folder = head if sep else value
    if sandbox.path(folder).exists():
        return
    drafter = f"./{name or 'drafter'}-checkpoint"
    fill_drafter(sandbox, drafter, target)
    result = invoke(sandbox, ["run", "-d", f"{drafter}:{name or 'drafter'}", "--limit", "2", "--max-new-tokens",
                              "8", "--out", folder])
    assert result.exit_code == 0, result.output
    sandbox.filled.append(f"run {folder}")


def fill_positionals(sandbox: Sandbox, sub: list[str], positionals: list[str], items, target: str) -> None:
    name = sub[0] if sub else ""
    if name == "inspect" and positionals:
        fill_drafter(sandbox, positionals[0], target)
    if name == "track" and positionals and not sandbox.path(positionals[0]).exists():
        sandbox.series(sandbox.path(positionals[0]), target)
    if name == "served":
        missing = [p for p in positionals if not sandbox.path(p).exists()]
        run = next((v for n, v in items if n == "--run"), None)
        if missing and missing[0].endswith((".csv", "profile_export_aiperf.json")) and run:
            from dflash_eval.testing import served_payloads as P

            fill_run(sandbox, run, target)
            head, _, drafter = run.rpartition(":")
            folder = sandbox.path(head)
            chosen = next(d for d in json.loads((folder / "run.json").read_text())["drafters"] if d["name"] == drafter)
            k = int(chosen["spec"]["block_size"]) - 1
            rows = [r for r in map(json.loads, (folder / "samples.jsonl").read_text().splitlines()) if r["drafter"] == drafter]
            specs = [P.aiperf_acceptance([n - 1 for n in r["walk_accept_lengths"]], k) for r in rows]
            path = sandbox.path(missing[0])
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.suffix == ".csv":
                path.write_text(P.aiperf_speed_bench_csv({"served-model": {"humaneval": chosen["metrics"]["tau_micro"]}},
                                                         ["humaneval"]))
            else:
                path.write_text(json.dumps(P.aiperf_summary(specs, "served-model", "spec_al_humaneval")))
            sandbox.filled.append(f"AIPerf export {missing[0]}")
            return
        if missing:
            from dflash_eval.testing.served_dump import counts_at, vllm_metrics

            model = next((v for n, v in items if n == "--model"), None) or "served-model"
            run = next((v for n, v in items if n == "--run"), None)
            head, _, drafter = (run or "").rpartition(":")
            drafts, accepted = counts_at(sandbox.path(head), drafter, 3) if run else (10, [6, 4, 2])
            dumps = [vllm_metrics(model, 0, [0] * len(accepted)), vllm_metrics(model, drafts, accepted)]
            for path, text in zip(positionals, dumps[-len(positionals):]):
                sandbox.path(path).write_text(text)
            sandbox.filled.append(f"vLLM /metrics dumps {', '.join(positionals)}")


def invoke(sandbox: Sandbox, args: list[str]):
    return CliRunner().invoke(app, args, env={"COLUMNS": "100", "HOME": str(sandbox.home),
                                              "HF_HUB_CACHE": str(sandbox.hub)})


def run_module(sandbox: Sandbox, module: str, args: list[str]) -> int:
    """`python -m MODULE ARGS` in this process: its main(argv), what its `__main__` block calls (runpy for a
    module without one)."""
    import importlib

    saved = sys.argv
    sys.argv = [module, *args]
    try:
        loaded = importlib.import_module(module)
        if callable(getattr(loaded, "main", None)):
            loaded.main(args)
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved
    return 0


# ------------------------------------------------------------------------------------------------ tests

def test_the_readme_shows_a_local_reference_and_counts_its_commands_right():
    """The README's walk-through: its heading counts the commands its block lists (it said "four" over five),
    and it shows a run with a local reference folder (`--reference PATH:NAME`) whose `diff` names it as given."""
    text = README.read_text(encoding="utf-8")
    heading = re.search(r"^## Your drafter in (\w+) commands$", text, flags=re.M)
    assert heading, "the README's walk-through heading is gone"
    block = bash_blocks(text[heading.end():])[0]
    count = len([c for c in readme_commands(f"```bash\n{block}```\n") if c.kind == "cli"])
    words = {"three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
    assert words.get(heading.group(1)) == count, (heading.group(0), count)
    runs = [c for c in readme_commands(text) if c.kind == "cli" and c.args[:1] == ["run"] and "--reference" in c.args]
    local = [c for c in runs if c.args[c.args.index("--reference") + 1] != "z-lab"]
    assert local, "the README shows no run with a local reference folder"
    name = local[0].args[local[0].args.index("--reference") + 1].rpartition(":")[2]
    out = local[0].args[local[0].args.index("--out") + 1]
    diffs = [c.args for c in readme_commands(text) if c.kind == "cli" and c.args[:1] == ["diff"]]
    assert any(f"{out}:{name}" in args for args in diffs), "no README diff names the local reference as run named it"
    inner = next(line for line in text.splitlines() if '-m "not slow"' in line)  # the inner loop, as CI runs tests
    assert "OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1" in inner, inner


def test_the_extractor_reads_commands_as_a_shell_splits_them():
    text = "\n".join(["intro", "```bash",
                      "bash scripts/bootstrap.sh && .venv/bin/dflash-eval demo",
                      "OMP_NUM_THREADS=1 dflash-eval run -d ./a:x \\",
                      "  --out 'runs/my run'   # a comment",
                      "curl -s localhost:8000/metrics > before.txt; dflash-eval served before.txt --json",
                      "python -m dflash_eval.demo.train --target t --save-dir s",
                      "python3 -m dflash_eval run -d d --out o | tee log",
                      "torchrun --nproc-per-node 8 -m dflash_eval run -d d --out o",
                      "```", "```python", "dflash-eval not-bash", "```"])
    found = readme_commands(text)
    assert [(c.kind, c.args, c.module) for c in found] == [
        ("cli", ["demo"], ""), ("cli", ["run", "-d", "./a:x", "--out", "runs/my run"], ""),
        ("cli", ["served", "before.txt", "--json"], ""),
        ("module", ["--target", "t", "--save-dir", "s"], "dflash_eval.demo.train"),
        ("cli", ["run", "-d", "d", "--out", "o"], ""), ("other", [], "")]
    assert reason_not_run(found[0]) is not None and reason_not_run(found[1]) is None


@pytest.fixture(scope="module")
def sandbox(test_bed, tmp_path_factory):
    return Sandbox(tmp_path_factory.mktemp("readme"), test_bed)


def test_every_command_the_readme_and_the_docs_show_runs(sandbox, monkeypatch, capsys):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(sandbox.hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(sandbox.cwd)
    commands = documented_commands()
    target = next((c.args[c.args.index(o) + 1] for c in commands if c.kind == "cli" for o in ("--target", "-t")
                   if o in c.args[:-1]), DEFAULT_TARGET)
    ran, skipped, unlisted = [], [], []
    for command in commands:
        reason = reason_not_run(command)
        if reason is not None:
            skipped.append((command.line, reason))
            continue
        if command.kind == "other":
            unlisted.append(f"{command.page}: {command.line}")
            continue
        started = time.monotonic()
        args, changed = prepared(sandbox, command, target)
        if command.kind == "module":
            code, output = run_module(sandbox, command.module, args), capsys.readouterr().out
        else:
            result = invoke(sandbox, args)
            code, output = result.exit_code, result.output
        assert code == 0, (f"{command.page} command failed (exit {code}):\n  as written: {shlex.join(command.words)}\n"
                           f"  as run: {shlex.join(args)}\n  changed: {changed}\n{output[-3000:]}")
        ran.append((f"{command.page}: {shlex.join(command.words)}", changed + [f"{time.monotonic() - started:.1f} s"]))
    assert unlisted == [], ("README / docs commands neither run here nor listed in NOT_RUN with a reason: "
                            f"{unlisted}")
    stale = [rule for rule in NOT_RUN if not any(matches(rule, c) for c in commands)]
    assert stale == [], f"NOT_RUN rules that match no README / docs command any more: {stale}"
    assert ran, "the README shows no command this test could run"
    print(f"\nREADME and docs commands run ({len(ran)}):", *(f"  {c}  [{'; '.join(x)}]" for c, x in ran),
          f"not run ({len(skipped)}):", *(f"  {c}: {r}" for c, r in skipped),
          f"placeholders filled: {', '.join(sandbox.filled)}", sep="\n")
