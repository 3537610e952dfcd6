"""Commands that read finished (or partial) run folders: `report`, `show` and `diff`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .options import finite_number
from .common import _incomplete_banner, _safe, fail, reports_input_errors, stdout_console
from .root import app


@app.command()
@reports_input_errors
def report(
    run_dir: Path = typer.Argument(..., help="A run folder written by `dflash-eval run`."),
    worst: int = typer.Option(2, "--worst", min=0, metavar="N", help="Worst blocks shown per drafter."),
    html: Optional[Path] = typer.Option(None, "--html-file", help="Also write the self-contained HTML report to this file."),
    partial: bool = typer.Option(False, "--partial", help="On an unfinished run: show the prompts done so far, under a banner."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON document: settings, summary and per-slot tables (with counts), the diff verdict of each drafter against the first."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the same summary as markdown tables, to paste into an issue or a PR."),
) -> None:
    """Print a run's report: summary, per-position table, repetition, sample blocks, legend."""
    from ..core.paths import output_path
    from ..render.terminal import render_report
    from ..core.results import interpreting, read_run
    from ..core.run_rows import run_rows

    if as_json and markdown:
        raise fail("--json and --markdown are two formats of one summary: give one of them")
    if html is not None:
        output_path(html, "--html-file", reads=[run_dir])
    run = read_run(run_dir, partial=partial)
    with interpreting(run_dir):
        rows = run_rows(run_dir, run)
    if as_json or markdown:
        import json

        from ..commands.report import run_summary
        from ..render.markdown import summary_markdown

        with interpreting(run_dir):
            summary = run_summary(run_dir, run, partial=partial)
            text = json.dumps(summary, indent=1) + "\n" if as_json else summary_markdown(summary)
        sys.stdout.write(text)
        return
    console = stdout_console()
    _incomplete_banner(console, run)
    with interpreting(run_dir):  # rendered whole before printing: a malformed field never leaves half a report
        with console.capture() as captured:
            render_report(console, run, rows, samples_per_drafter=worst)
        page = None
        if html is not None:
            from ..render.html import render_run_html

            page = render_run_html(run, rows)
    console.file.write(captured.get())
    if page is not None:
        from ..render.html import write_html

        console.print(_safe(f"written: {write_html(html, page)}"))


@app.command()
@reports_input_errors
def diff(
    a: str = typer.Argument(..., help="RUN_DIR or RUN_DIR:DRAFTER_NAME (the baseline)."),
    b: str = typer.Argument(..., help="RUN_DIR or RUN_DIR:DRAFTER_NAME (the candidate)."),
    force: bool = typer.Option(False, "--force", help="Compare even when the settings differ (loudly flagged)."),
    max_mismatch: float = typer.Option(0.001, "--max-continuation-mismatch", parser=finite_number(0, 1),
                                       help="Largest share of differing target continuation tokens accepted as fair."),
    top: int = typer.Option(3, "--top", min=0, help="Most regressed and most improved prompts to show."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output on stdout."),
    html: Optional[Path] = typer.Option(None, "--html-file", help="Also write the comparison as a self-contained HTML file."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap interval and the permutation test."),
    partial: bool = typer.Option(False, "--partial", help="Allow unfinished runs (the prompts done so far, under a banner)."),
) -> None:
    """Fair, paired comparison of two drafters: delta tau with interval and p-value, per slot, verdict."""
    import json as json_module

    from ..commands.diff import diff as run_diff, side_folder
    from ..core.paths import output_path
    from ..render.terminal_diff import render_diff
    from ..core.results import interpreting

    if html is not None:
        output_path(html, "--html-file", reads=[side_folder(a), side_folder(b)])
    console = stdout_console()
    with interpreting(f"{a} / {b}"):
        result = run_diff(a, b, force=force, max_mismatch=max_mismatch, top=top, seed=seed, partial=partial)
        with console.capture() as captured:
            if not as_json:
                for side in ("a", "b"):
                    if result[side].get("incomplete"):
                        _incomplete_banner(console, {"incomplete": result[side]["incomplete"]})
                render_diff(console, result)
        page = None
        if html is not None:
            from ..render.html import render_diff_html

            page = render_diff_html(result)
    if as_json:
        typer.echo(json_module.dumps(result, indent=1))
    else:
        console.file.write(captured.get())
    if html is not None:
        from ..render.html import write_html

        path = write_html(html, page)
        if not as_json:
            stdout_console().print(_safe(f"written: {path}"))


@app.command()
@reports_input_errors
def show(
    run_dir: Path = typer.Argument(..., help="A run folder written by `dflash-eval run`."),
    prompt: Optional[str] = typer.Option(None, "--prompt", help="Only this prompt id."),
    drafter: Optional[str] = typer.Option(None, "--drafter-name", help="Only this drafter (its name in the run)."),
    worst: Optional[int] = typer.Option(None, "--worst", min=1, metavar="K", help="The K blocks with the shortest accepted prefix, taken across prompts (each prompt's worst before any prompt's second)."),
    first: Optional[int] = typer.Option(None, "--first", min=1, metavar="N", help="The first N blocks (default 10 unless --prompt is given)."),
    sample: Optional[int] = typer.Option(None, "--random", min=1, metavar="K", help="K blocks at random."),
    seed: int = typer.Option(0, "--seed", help="Seed of the --random choice."),
    partial: bool = typer.Option(False, "--partial", help="On an unfinished run: the prompts done so far, under a banner."),
) -> None:
    """Decoded draft blocks along the walk, next to the target's tokens."""
    from ..render.terminal import SAMPLE_LEGEND, render_blocks
    from ..core.results import interpreting, read_run
    from ..core.run_rows import run_rows
    from ..core.samples import select_blocks

    chosen = [name for name, value in (("--worst", worst), ("--first", first), ("--random", sample)) if value is not None]
    if len(chosen) > 1:
        raise fail(f"{' and '.join(chosen)} choose blocks in different ways: give one of them")
    run = read_run(run_dir, partial=partial)
    console = stdout_console()
    _incomplete_banner(console, run)
    with interpreting(run_dir):
        names = [d["name"] for d in run["drafters"]]
        if drafter is not None and drafter not in names:
            raise fail(f"{run_dir}: no drafter {drafter!r} in this run (drafters: {', '.join(names)})")
        rows = run_rows(run_dir, run)
        if prompt is not None and not any(r["prompt_id"] == prompt for r in rows):
            raise fail(f"{run_dir}: no prompt {prompt!r} in this run")
        if first is None and worst is None and sample is None and prompt is None:
            first = 10
        blocks = select_blocks(rows, prompt=prompt, drafter=drafter, first=first, worst=worst, sample=sample, seed=seed)
        with console.capture() as captured:
            render_blocks(console, blocks)
            console.print(SAMPLE_LEGEND)
    console.file.write(captured.get())
