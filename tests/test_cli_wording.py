"""What a new user reads: the demo's commands pasted back into the CLI, one cache, progress in a log, tables
at 60 columns and redirected, wording per mode, readable labels, help and usage errors (issue 30)."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
import typer.main
from rich.console import Console
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.cli.demo import program
from dflash_eval.core.documents.results import read_run_document, read_samples

STORED = Path(__file__).parent / "data" / "report_run"
COMMAND = re.compile(r"^  (\S.*)$")


def invoke(args: list[str], columns: int = 100):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})


def printed_commands(output: str) -> list[list[str]]:
    """The lines the demo prints for the user to copy, split as a shell splits them."""
    words = program()
    found = []
    for line in output.splitlines():
        match = COMMAND.match(line)
        if match and match.group(1).startswith(shlex.join(words)):
            found.append(shlex.split(match.group(1))[len(words):])
    return found


@pytest.fixture(scope="module", params=[60, 100])
def demo(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"demo{request.param}") / "demo"
    result = invoke(["demo", "--out", out], columns=request.param)
    assert result.exit_code == 0, result.output
    return request.param, out, result.stdout


# ------------------------------------------------------------------------------------- 1, 2: demo, cache

def test_the_demos_commands_paste_whole_and_run(demo, private_cache):
    columns, out, output = demo
    commands = printed_commands(output)
    # the verdict block's next commands (core/verdict.py), then the demo's guidance
    assert [c[0] for c in commands] == ["show", "diff", "doctor", "show", "doctor", "show", "run"], output
    flagged, diffed, deeper, _, doctor, show, run = commands
    root = typer.main.get_command(app)
    # every printed command is one line that the CLI parses to the values the demo meant
    ctx = root.commands["doctor"].make_context("doctor", doctor[1:])
    assert ctx.params["max_new_tokens"] == 64 and ctx.params["thinking"] is False
    assert Path(ctx.params["drafter"]).name == "demo-inhouse"
    assert Path(ctx.params["reference"]).name == "demo-reference"
    ctx = root.commands["doctor"].make_context("doctor", deeper[1:])  # into the demo's run: its settings
    assert ctx.params["out"] == out and ctx.params["reference"].endswith("demo-reference:demo-reference")
    assert diffed[1:] == [f"{out}:demo-reference", f"{out}:demo-inhouse"]  # RUN:NAME as diff reads it back
    for pasted in (flagged, diffed):
        result = invoke(pasted, columns)
        assert result.exit_code == 0, result.output
    assert "blocks flagged as repetitive, worst first" in invoke(flagged, columns).stdout
    ctx = root.commands["run"].make_context("run", run[1:])
    assert ctx.params["prompts"] == "humaneval" and str(ctx.params["out"]) == "runs/mine"
    shown = invoke(show, columns)
    assert shown.exit_code == 0 and "demo-inhouse" in shown.stdout and shown.stdout.count("draft  │") >= 5
    # the doctor command, as printed, hits the continuations the demo cached: no generation
    before = sorted(p.name for p in private_cache.rglob("*") if p.is_file())
    diagnosed = invoke([*doctor, "--no-context-variants"], columns)
    assert diagnosed.exit_code == 0, diagnosed.output
    assert "generate" not in diagnosed.stdout and "verdict:" in diagnosed.stdout
    assert sorted(p.name for p in private_cache.rglob("*") if p.is_file()) == before


def test_the_demo_caches_where_every_command_does(demo, private_cache):
    _, out, _ = demo
    assert not (out.parent / ".cache").exists()
    assert any(private_cache.rglob("*")), "the demo wrote no continuation into the session's cache"


def test_the_suite_never_touches_the_users_cache(private_cache):
    from dflash_eval.core.settings.run_settings import RunOptions, default_cache_dir

    assert os.environ["DFLASH_EVAL_CACHE"] == str(private_cache)
    assert default_cache_dir() == private_cache and RunOptions(drafters=[], out=Path(".")).output.cache == private_cache
    assert Path.home() not in private_cache.parents


# ------------------------------------------------------------------------------------------- 3: progress

def test_progress_in_a_log_is_plain_periodic_lines():
    from dflash_eval.cli.progress import LineReporter, RichReporter, progress_line, reporter_for

    log = io.StringIO()
    console = Console(file=log, width=60)  # not a terminal: what SLURM or nohup give
    assert isinstance(reporter_for(console), LineReporter)
    assert isinstance(reporter_for(Console(file=io.StringIO(), force_terminal=True)), RichReporter)
    now = [0.0]
    reporter = LineReporter(console, clock=lambda: now[0])
    reporter.phase("prompts", 164)
    for _ in range(164):
        now[0] += 15.0  # 15 s a prompt: a line at least every minute, and every 10%
        reporter.advance("prompts")
    reporter.close()
    lines = log.getvalue().splitlines()
    assert lines[0] == "prompts 0/164 (0%), 0s elapsed"
    assert "prompts 4/164 (2%), 1m00s elapsed, eta 40m" in lines  # 60 s / 4 prompts * 160 left = 40 min
    assert lines[-1] == "prompts 164/164 (100%), 41m00s elapsed, done"
    assert 41 <= len(lines) <= 60 and all("\x1b" not in line and "━" not in line for line in lines)
    assert progress_line("prompts", 12, 164, 185) == "prompts 12/164 (7%), 3m05s elapsed, eta 39m"


# ---------------------------------------------------------------------------- 4: narrow and redirected

def report_at(run_dir: Path, width: int) -> str:
    from dflash_eval.render.terminal import render_report

    log = io.StringIO()
    render_report(Console(file=log, width=width), read_run_document(run_dir), read_samples(run_dir / "samples.jsonl"))
    return log.getvalue()


def tables_at(run_dir: Path, width: int) -> str:
    """The report's tables that name drafters (summary, by prompt set, per position, repetition, blocks)."""
    from dflash_eval.core.samples import select_blocks
    from dflash_eval.render import terminal as T

    log = io.StringIO()
    console, run, rows = Console(file=log, width=width), read_run_document(run_dir), read_samples(run_dir / "samples.jsonl")
    T.render_run_summary(console, run)
    T.render_by_prompt_set(console, run)
    T.render_per_position(console, run)
    T.render_repetition(console, run)
    for d in run["drafters"]:
        T.render_blocks(console, select_blocks(rows, drafter=d["name"], worst=2), title=f"Worst blocks of {d['name']}")
    return log.getvalue()


@pytest.mark.parametrize("width", [60, 80, 100])  # 80: what redirected output gets
def test_tables_name_every_drafter_at_any_width(demo, width):
    _, out, _ = demo
    for run_dir in (out, STORED):
        text = tables_at(run_dir, width)
        names = [d["name"] for d in read_run_document(run_dir)["drafters"]]
        assert "…" not in text, text
        assert all(len(line) <= width for line in text.splitlines())
        per_position = text[text.index("Per position"):text.index("Repetition")]
        if "drafters: A = " in text:  # letters as headers: the key names each one in full
            key = text[text.index("drafters: A = "):].splitlines()[0]
            assert key == "drafters: " + ", ".join(f"{chr(65 + i)} = {n}" for i, n in enumerate(names))
        else:
            assert all(name in per_position for name in names)
        for section in ("tau macro", "By prompt set", "Repetition"):  # each table names each drafter whole
            part = text[text.index(section):]
            assert all(re.search(rf"(^|[│ ]){re.escape(name)}[ :│]", part, re.M) for name in names), (section, part)


@pytest.mark.parametrize("width", [100, 160])
def test_per_position_cells_are_all_one_line_or_all_two(demo, width):
    _, out, _ = demo
    text = report_at(out, width)
    table = text[text.index("Per position"):]
    rows = [line for line in table[:table.index("└")].splitlines() if line.startswith("│")]
    slots = [line for line in rows if line.split("│")[1].strip()]
    assert len(slots) == 7 and len(rows) in (7, 14), table  # the demo's B = 8: slots 1..7
    if len(rows) == 14:  # counts under the values: in every cell
        assert all(re.fullmatch(r"[\s│]*(\(\d+/\d+\)[\s│]*)+", line.replace(" ", " ")) for line in rows[1::2])


def test_diff_rows_line_up_in_the_terminal():
    from dflash_eval.commands.diff import diff
    from dflash_eval.render.terminal_diff import render_diff

    log = io.StringIO()
    render_diff(Console(file=log, width=120), diff(f"{STORED}:trained", f"{STORED}:repeat-anchor"))
    lines = log.getvalue().splitlines()
    checked = 0
    for i, line in enumerate(lines):
        if line.startswith("  A draft"):
            a, b, target = lines[i], lines[i + 1], lines[i + 2]
            assert b.startswith("  B draft") and target.startswith("  target")
            bars = [[j for j, ch in enumerate(row) if ch == "│"] for row in (a, b, target)]
            assert bars[0] == bars[1] == bars[2], "\n".join((a, b, target))
            checked += 1
    assert checked == 3


# ------------------------------------------------------------------------------------- 6: mode wording

def test_temperature_above_zero_speaks_of_its_own_loop(test_bed, drafter_dirs, tmp_path):
    from dflash_eval.render.html import render_run_html

    out = tmp_path / "live"
    result = invoke(["run", "-d", drafter_dirs["zlab"], "--target", test_bed["qwen3"], "--limit", "2",
                     "--max-new-tokens", "8", "--mode", "live", "--temperature", "1", "--out", out, "--no-html"], 200)
    assert result.exit_code == 0, result.output
    assert "greedy walk" not in result.stdout and "live loop with rejection sampling at temperature 1" in result.stdout
    per_position = result.stdout[result.stdout.index("Per position"):result.stdout.index("Legend")]
    assert "n/a" in per_position  # the marginal needs the replay: not applicable, not blank
    page = render_run_html(read_run_document(out), read_samples(out / "samples.jsonl"))
    assert "greedy walk" not in page and "live loop with rejection sampling" in page and ">n/a<" in page


def test_the_estimate_defines_e_tau_per_anchor(test_bed, drafter_dirs, tmp_path):
    out = tmp_path / "estimate"
    result = invoke(["run", "-d", drafter_dirs["zlab"], "--target", test_bed["qwen3"], "--limit", "2",
                     "--max-new-tokens", "8", "--temperature", "0.7", "--out", out], 200)
    assert result.exit_code == 0, result.output
    assert "E[tau] per anchor: 1 + the sum over slots of the expected reach" in result.stdout
    page = (out / "report.html").read_text()
    assert "<dt>E[tau] per anchor</dt>" in page and page.index('id="estimate"') < page.index('id="provenance"')


def test_the_estimate_names_every_drafter_whole_at_100_columns(test_bed, drafter_dirs, tmp_path):
    """At T > 0 two 20-character names used to print as `drafter_…` at 100 columns (issue 48)."""
    names = ("drafter_inhouse_long", "drafter_reference_lg")
    out = tmp_path / "estimate"
    result = invoke(["run", "-d", f"{drafter_dirs['zlab']}:{names[0]}", "-d", f"{drafter_dirs['sliding']}:{names[1]}",
                     "--target", test_bed["qwen3"], "--limit", "2", "--max-new-tokens", "8", "--temperature", "0.7",
                     "--out", out, "--no-html"], 100)
    assert result.exit_code == 0, result.output
    table = result.stdout[result.stdout.index("Estimated acceptance"):result.stdout.index("definition:")]
    assert "…" not in table and all(len(line) <= 100 for line in table.splitlines())
    assert all(re.search(rf"│ {name} +│", table) for name in names), table


def test_responses_agreement_is_not_called_self_consistency(test_bed, drafter_dirs, tmp_path):
    from dflash_eval.pipeline.prompts import load_prompts

    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"id": p.id, "response": "def f(x):\n    return x + 1\n"}) + "\n"
                                 for p in load_prompts("demo", limit=2)))
    out = tmp_path / "responses"
    result = invoke(["run", "-d", drafter_dirs["zlab"], "--target", test_bed["qwen3"], "--limit", "2",
                     "--responses", responses, "--out", out], 200)
    assert result.exit_code == 0, result.output
    assert "self-consistency" not in result.stdout
    assert re.search(r"responses vs the target's greedy choice: \d+/\d+ tokens of the given responses", result.stdout)
    page = (out / "report.html").read_text()
    assert "self-consistency" not in page and "responses vs target argmax" in page


# ----------------------------------------------------------------------------------- 7: readable labels

def test_a_settings_refusal_names_the_setting_in_words():
    from dflash_eval.pipeline.run_folder import settings_differences

    old = {"drafters": {"demo-inhouse": "ef64aff769e8792762986c53bc68cc32c1678a2dfb4f30d467cb714e57ce33e5"},
           "max_new_tokens": 64, "semantics": {"demo-inhouse": "speculators"}}
    new = {"drafters": {"demo-inhouse": "cd3b008a118d76a5fca81d887c41170484dcc35fe83a4f9256aedd600c5a9c94",
                        "extra": "0" * 64}, "max_new_tokens": 32, "semantics": {"demo-inhouse": "zlab"}}
    assert settings_differences(old, new) == [
        "drafter demo-inhouse: other checkpoint files, fingerprint ef64aff7 -> cd3b008a", "drafter extra: added",
        "max_new_tokens: 64 -> 32", "semantics demo-inhouse: speculators -> zlab"]


def test_rerunning_into_a_folder_with_other_settings_says_which(demo, tmp_path):
    _, out, _ = demo
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    state = json.loads((copy / "run_state.json").read_text())
    state["settings"]["max_new_tokens"] = 32
    state["settings_hash"] = "0" * 64
    (copy / "run_state.json").write_text(json.dumps(state))
    from dflash_eval.demo import drafter_paths, target_path

    reference, inhouse = drafter_paths()
    result = invoke(["run", "-d", f"{reference}:demo-reference", "-d", f"{inhouse}:demo-inhouse", "--target",
                     target_path(), "--no-thinking", "--max-new-tokens", "64", "--out", copy], 300)
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert "\n" not in line and "max_new_tokens: 32 -> 64" in line and '"' not in line.split("settings (")[1]


def test_rope_and_repetition_labels_are_text():
    from dflash_eval.commands.variants import _rope_text
    from dflash_eval.core.repetition import flag_block

    assert _rope_text({"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                       "original_max_position_embeddings": 32768}) == \
        "yarn, theta 1000000.0, factor 4.0, original_max_position_embeddings 32768"
    assert _rope_text({"rope_type": "default", "rope_theta": 1e7, "mrope_section": [2, 1, 1]}) == \
        "default, theta 10000000.0, mrope_section 2/1/1"
    flags = flag_block([5, 5, 5, 7], [1, 2, 3, 4], pieces=["\n    ", "\n    ", "\n    ", "x"])
    assert flags.reasons == ('run: "\\n    " x3 at slots 1..3 (target\'s longest run: 1)',)
    assert flag_block([5, 5, 5, 7], [1, 2, 3, 4]).reasons == ("run: token 5 x3 at slots 1..3 (target's longest run: 1)",)


def test_the_demos_flags_quote_decoded_text(demo):
    _, out, _ = demo
    reasons = [r for row in read_samples(out / "samples.jsonl") for step in row["walk_flags"] for r in step]
    assert reasons and not any(re.search(r"token \d+ x\d|unit \[", r) for r in reasons)
    assert any(re.match(r'run: ".+" x\d+ at slots', r) for r in reasons)


# ----------------------------------------------------------------------------------- 8: help and errors

def all_commands():
    root = typer.main.get_command(app)

    def walk(command, path):
        yield path, command
        for name, sub in (getattr(command, "commands", None) or {}).items():
            yield from walk(sub, [*path, name])

    return list(walk(root, []))


@pytest.mark.parametrize("path", [p for p, _ in all_commands()], ids=lambda p: " ".join(p) or "root")
def test_help_reads_as_prose(path):
    command = dict((tuple(p), c) for p, c in all_commands())[tuple(path)]
    result = invoke([*path, "--help"], 200)
    assert result.exit_code == 0, result.output
    text = result.stdout
    # no type metavars: <bool>, <str>, <int>, <float>, <path>, <list[str]>, <int range>, <Path>, ...
    assert not re.search(r"<(bool|str|int|float|path|Path|list\[\w+\]|\w+ range|\w+\|[\w|]+)>", text), text
    assert "[x>=" not in text and "range]" not in text
    source = (command.callback.__doc__ if command.callback else None) or command.help or ""
    words = source.split("\n\n")[0].split()
    if words and len(" ".join(words)) < 180:  # at 200 columns the description is one line, not the source's
        line = next(line for line in text.splitlines() if " ".join(words[:3]) in line)
        assert " ".join(words[-3:]) in line, text
    for param in command.params:
        assert param.help, f"{' '.join(path)} {param.opts}: no help"


def test_doctor_and_track_help_mention_only_their_options():
    for name in ("doctor", "track"):
        text = invoke([name, "--help"], 200).stdout
        assert "--mode" not in text and "run also" not in text and "(run)" not in text, name
    assert "--mode live" in invoke(["run", "--help"], 200).stdout


@pytest.mark.parametrize("args, needle", [
    (["run", "--limit", "0", "--out", "x", "-d", "y"], "'--limit'"),
    (["run", "--limt", "3"], "no such option: --limt"),
    (["report"], "missing argument"),
    (["nonsense"], "no such command"),
])
def test_usage_errors_are_one_line(args, needle):
    result = invoke(args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0].lower(), result.stderr


def test_a_misspelt_prompt_set_gets_a_suggestion():
    result = invoke(["prompts", "show", "humanevl"])
    assert result.exit_code == 2 and "did you mean humaneval?" in result.stderr


def test_the_terminal_report_has_the_per_set_breakdown_and_visible_small_bins():
    from dflash_eval.render.terminal import sparkline

    text = report_at(STORED, 120)
    assert "By prompt set" in text and "demo" in text[text.index("By prompt set"):]
    assert sparkline([100, 1, 0]) == "█▁ " and sparkline([0, 0]) == "  "


# -------------------------------------------------------------------------------------------- 9: diff

def test_diff_force_without_common_prompts_says_so(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    for name in ("run.json", "samples.jsonl", "per_position.csv"):
        (other / name).write_text((STORED / name).read_text().replace("demo/", "elsewhere/"))
    result = invoke(["diff", f"{STORED}:trained", f"{other}:trained", "--force"])
    assert result.exit_code == 2 and "no prompt in common" in result.stderr
    assert "documented schema" not in result.stderr


# ----------------------------------------------------------------------------------------- 10: threads

def test_threads_respect_omp_and_default_to_half_the_cpus(monkeypatch):
    import torch

    from dflash_eval.cli.root import configure_threads, default_threads

    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert configure_threads() == 1 and torch.get_num_threads() == 1
        monkeypatch.delenv("OMP_NUM_THREADS")
        cpus = len(os.sched_getaffinity(0))
        assert default_threads() == max(1, min(cpus // 2, 8))
        assert configure_threads() == default_threads() == int(os.environ["OMP_NUM_THREADS"])
        assert torch.get_num_threads() == default_threads()
    finally:
        torch.set_num_threads(before)
