"""`dflash-eval demo`: the whole job on the bundled tiny models, and the guidance it prints from what it measured."""

from __future__ import annotations

from pathlib import Path

import typer

from ..core.settings.output import Output
from ..core.settings.run_settings import RunSettings
from ..core.settings.sections import Use
from .common import claims_out, fail, program, reports_input_errors, safe_line, stdout_console
from .options import takes
from .progress import reporter_for

DEMO_HELP = {"html": "Write OUT/report.html."}


@reports_input_errors
@claims_out()
@takes(Use(Output, only=("cache_dir", "html"), help=DEMO_HELP))
def demo(
    settings: RunSettings,
    out: Path = typer.Option(Path("reports/demo"), "--out", "-o", help="Where the demo run is written."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", min=1, help="Generation cap per prompt."),
) -> None:
    """The whole job on the bundled tiny models: a correct reference drafter vs an in-house one with the
    anchor-in-context bug, on a small coding prompt set. No GPU, no download."""
    import dataclasses

    from ..commands.evaluate import evaluate
    from ..core.documents.results import STATE
    from ..core.paths import output_path
    from ..core.settings.inputs import Drafters, InputSettings
    from ..demo import available, drafter_paths, target_path
    from ..render.terminal import render_report

    if not available():
        raise fail("the bundled demo models are missing from this installation (python -m dflash_eval.demo.build rebuilds them)")
    output_path(out, "--out", folder=True)
    _clear_demo_out(out)
    console = stdout_console()
    reference, inhouse = drafter_paths()
    reporter = reporter_for(console)
    # demo-reference as --reference: the run measures the gap and explains it (commands/explain.py)
    settings = settings.with_sections(
        Drafters(drafters=(f"{inhouse}:demo-inhouse",), reference=f"{reference}:demo-reference"),
        InputSettings(target=str(target_path()), prompts="demo", max_new_tokens=max_new_tokens, thinking=False),
        dataclasses.replace(settings.output, out=out))
    try:  # report.html under the folder's lock
        result = evaluate(settings, reporter, title="dflash-eval demo: demo-inhouse vs demo-reference")
    finally:
        reporter.close()
        if (out / STATE).is_file():  # even when interrupted: the next demo may replace this folder
            (out / DEMO_MARKER).touch()
    render_report(console, result.document, result.rows, run_dir=str(out), program=program())
    print_guidance(console, demo_guidance(result.document, inhouse, out, max_new_tokens, settings.output.html,
                                          settings.output.cache_dir, reference))


DEMO_MARKER = ".dflash-eval-demo"  # written into the demo's folder; only such a folder is ever replaced


def _clear_demo_out(out: Path) -> None:
    """The demo always starts fresh, but it deletes nothing it did not write: a folder holding anything
    else is refused (one line), never emptied."""
    import shutil

    if not out.exists():
        return
    if not out.is_dir():
        raise fail(f"{out}: exists and is not a folder; choose another --out")
    if (out / DEMO_MARKER).is_file():
        for child in out.iterdir():  # all but the lock this demo holds (claims_out): a new file would not be held
            if child.name == "run.lock":
                continue
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    elif any(out.iterdir()):
        raise fail(f"{out}: exists and does not hold an earlier demo run; choose another --out")


def command(*words: object) -> str:
    """One shell command line, every word quoted as the shell needs it (a path with a space stays one word)."""
    import shlex

    return shlex.join([*program(), *map(str, words)])


def demo_guidance(result: dict, inhouse: Path, out: Path, max_new_tokens: int, html: bool,
                  cache_dir: Path | None = None, reference: Path | None = None) -> list[tuple[str, str]]:
    """What to look at, from the numbers this run measured (not from what the build expected): ("text",
    Rich markup) paragraphs and ("command", a shell line) to copy, in order."""
    by_name = {d["name"]: d for d in result["drafters"]}
    ref, inh = by_name["demo-reference"], by_name["demo-inhouse"]

    def flagged(drafter: dict) -> str:
        rep = drafter.get("repetition") or {}
        blocks, hits = rep.get("blocks") or 0, rep.get("flagged_blocks") or 0
        return f"{hits}/{blocks} blocks flagged as repetitive" if blocks else "no blocks"

    tau_ref, tau_inh = ref["metrics"]["tau_macro"], inh["metrics"]["tau_macro"]
    gap = f"{tau_ref / tau_inh:.1f}x" if tau_inh else "n/a"
    files = "run.json, samples.jsonl, per_position.csv" + (", report.html" if html else "")
    explained = next((e for e in result.get("explanation") or [] if e["drafter"] == "demo-inhouse"), None)
    said = (f"The verdict at the top says what this run measured on its own trajectories: demo-inhouse "
            f"{safe_line(explained['verdict'])}. " if explained and explained["finding"] else "")
    return [
        ("text", f"\n[bold]What to look at[/]: demo-reference reaches tau {tau_ref:.2f} ({flagged(ref)}), demo-inhouse "
                 f"{tau_inh:.2f} ({flagged(inh)}): a {gap} gap. Both drafters have the same architecture and data; "
                 f"the in-house one was trained with the anchor's own hidden state in its attention context. {said}"
                 "The per-position table shows where its acceptance collapses, the worst blocks show its drafts; "
                 "its repetitive blocks, worst first:"),
        ("command", command("show", out, "--flagged", "--drafter-name", "demo-inhouse")),
        ("text", "For a deeper look (logit lens, the prompt's template and thinking flipped), the doctor (it reuses "
                 "this run's cached continuations):"),
        ("command", command("doctor", "--drafter", inhouse, *(("--reference", reference) if reference else ()),
                            "--no-thinking", "--max-new-tokens", max_new_tokens,
                            *(("--cache-dir", cache_dir) if cache_dir is not None else ()))),
        ("text", f"Results in {safe_line(out)}/ ({files}); more blocks:"),
        ("command", command("show", out, "--worst", 5)),
        ("text", "On your own checkpoints:"),
        ("command", command("run", "--target", "Qwen/Qwen3-8B", "--drafter", "./my-drafter", "--reference", "z-lab",
                            "--prompts", "humaneval", "--out", "runs/mine")),
    ]


def print_guidance(console, parts: list[tuple[str, str]]) -> None:
    """Paragraphs wrap to the terminal; a command is printed on one line that is never broken (the terminal
    may fold it on screen, but a copy pastes one command), indented by two spaces."""
    from ..core.safe_text import printable

    for kind, text in parts:
        if kind == "command":
            console.print("  " + printable(text), markup=False, highlight=False, soft_wrap=True)
        else:
            console.print(text)
