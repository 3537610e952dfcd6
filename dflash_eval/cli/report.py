"""`dflash-eval report`: one finished (or partial) run folder's summary, on the terminal, as JSON, markdown or
HTML (commands/report.py builds the document). Its neighbours read run folders too: `show` (cli/show.py, the
decoded blocks) and `diff` (cli/diff.py, two runs). Its flags are its section's
(commands/results_settings.ReportSettings) and the two output forms, --json and --html-file."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..commands.results_settings import ReportSettings
from .common import fail, incomplete_banner, program, reports_input_errors, safe_line, stdout_console, write_stdout
from .options import takes


@reports_input_errors
@takes(view=ReportSettings)
def report(
    view: ReportSettings,
    run_dir: Path = typer.Argument(..., help="A run folder written by `dflash-eval run`."),
    html: Optional[Path] = typer.Option(None, "--html-file", help="Also write the self-contained HTML report to this file."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON document: settings, summary and per-slot tables (with counts), the diff verdict of each drafter against the first."),
) -> None:
    """Print a run's report: summary, per-position table, repetition, sample blocks, legend."""
    from ..core.documents.results import read_run_document
    from ..core.documents.run_rows import run_rows
    from ..core.paths import output_path
    from ..render.terminal import render_report

    if as_json and view.markdown:
        raise fail("--json and --markdown are two formats of one summary: give one of them")
    if html is not None:
        output_path(html, "--html-file", reads=[run_dir])
    run = read_run_document(run_dir, partial=view.partial)
    rows = run_rows(run_dir, run)
    if as_json or view.markdown:
        import json

        from ..commands.report import run_summary
        from ..render.markdown import summary_markdown

        summary = run_summary(run_dir, run, partial=view.partial)
        text = json.dumps(summary, indent=1) + "\n" if as_json else summary_markdown(summary)
        write_stdout(text)
        return
    console = stdout_console()
    incomplete_banner(console, run)
    with console.capture() as captured:  # rendered whole before printing: a failure never leaves half a report
        render_report(console, run, rows, samples_per_drafter=view.worst, run_dir=str(run_dir), program=program())
    page = None
    if html is not None:
        from ..render.html import render_run_html

        page = render_run_html(run, rows, run_dir=str(run_dir))
    console.file.write(captured.get())
    if page is not None:
        from ..render.html import write_html

        console.print(safe_line(f"written: {write_html(html, page)}"))
