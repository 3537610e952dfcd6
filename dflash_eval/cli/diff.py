"""`dflash-eval diff A B`: the fair, paired comparison of two drafters (commands/diff.py does the work,
render/terminal_diff.py prints it)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..core.settings.inputs import InputSettings
from .common import incomplete_banner, reports_input_errors, safe_line, stdout_console
from .options import finite_number


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
    seed: int = typer.Option(0, "--seed", min=InputSettings.flag("seed").minimum, help="Seed of the bootstrap interval and the permutation test."),
    partial: bool = typer.Option(False, "--partial", help="Allow unfinished runs (the prompts done so far, under a banner)."),
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
    result = run_diff(a, b, force=force, max_mismatch=max_mismatch, top=top, seed=seed, partial=partial)
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
