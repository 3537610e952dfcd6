"""`dflash-eval diff A B`: the fair, paired comparison of two drafters (commands/diff.py does the work,
render/terminal_diff.py prints it). Its flags are its section's (commands/results_settings.DiffSettings)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..commands.results_settings import DiffSettings
from .common import incomplete_banner, reports_input_errors, safe_line, stdout_console
from .options import takes


@reports_input_errors
@takes(compare=DiffSettings)
def diff(
    compare: DiffSettings,
    a: str = typer.Argument(..., help="RUN_DIR or RUN_DIR:DRAFTER_NAME (the baseline)."),
    b: str = typer.Argument(..., help="RUN_DIR or RUN_DIR:DRAFTER_NAME (the candidate)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output on stdout."),
    html: Optional[Path] = typer.Option(None, "--html-file", help="Also write the comparison as a self-contained HTML file."),
) -> None:
    """Fair, paired comparison of two drafters: delta tau with interval and p-value, per slot, verdict."""
    import json as json_module

    from ..commands.diff import diff as run_diff
    from ..commands.diff import side_folder
    from ..core.paths import output_path
    from ..render.terminal_diff import render_diff

    if html is not None:
        output_path(html, "--html-file", reads=[side_folder(a), side_folder(b)])
    console = stdout_console()
    result = run_diff(a, b, **compare.keywords())  # its section's fields (commands/results_settings.py)
    with console.capture() as captured:
        if not as_json:
            for side in ("a", "b"):
                if result[side].get("incomplete"):
                    incomplete_banner(console, {"incomplete": result[side]["incomplete"]})
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
            stdout_console().print(safe_line(f"written: {path}"))
