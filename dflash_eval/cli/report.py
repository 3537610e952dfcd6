"""`dflash-eval report`: one finished (or partial) run folder's summary, on the terminal, as JSON, markdown or
HTML (commands/report.py builds the document). Its neighbours read run folders too: `show` (cli/show.py, the
decoded blocks) and `diff` (cli/diff.py, two runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import fail, incomplete_banner, program, reports_input_errors, safe_line, stdout_console, write_stdout


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
    from ..core.documents.results import read_run_document
    from ..core.documents.run_rows import run_rows
    from ..core.paths import output_path
    from ..render.terminal import render_report

    if as_json and markdown:
        raise fail("--json and --markdown are two formats of one summary: give one of them")
    if html is not None:
        output_path(html, "--html-file", reads=[run_dir])
    run = read_run_document(run_dir, partial=partial)
    rows = run_rows(run_dir, run)
    if as_json or markdown:
        import json

        from ..commands.report import run_summary
        from ..render.markdown import summary_markdown

        summary = run_summary(run_dir, run, partial=partial)
        text = json.dumps(summary, indent=1) + "\n" if as_json else summary_markdown(summary)
        write_stdout(text)
        return
    console = stdout_console()
    incomplete_banner(console, run)
    with console.capture() as captured:  # rendered whole before printing: a failure never leaves half a report
        render_report(console, run, rows, samples_per_drafter=worst, run_dir=str(run_dir), program=program())
    page = None
    if html is not None:
        from ..render.html import render_run_html

        page = render_run_html(run, rows, run_dir=str(run_dir))
    console.file.write(captured.get())
    if page is not None:
        from ..render.html import write_html

        console.print(safe_line(f"written: {write_html(html, page)}"))
