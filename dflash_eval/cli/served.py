"""`dflash-eval served`: what a server measured (vLLM /metrics dumps, a `vllm bench serve` result, SGLang's
gauge), optionally beside an offline run of the same drafter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from .common import _safe, reports_input_errors, stdout_console
from .root import app


@app.command()
@reports_input_errors
def served(
    dumps: List[Path] = typer.Argument(..., help="A /metrics dump, two dumps BEFORE AFTER (subtracted), or a "
                                                 "`vllm bench serve` result JSON."),
    model: Optional[str] = typer.Option(None, "--model", help="The served model (model_name label) to read, when "
                                                              "the server serves several."),
    run: Optional[str] = typer.Option(None, "--run", help="RUN_DIR or RUN_DIR:DRAFTER: an offline run of the same "
                                                          "drafter, shown beside the served numbers."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document (tau, per_position, ...)."),
    html: Optional[Path] = typer.Option(None, "--html", help="Also write a self-contained HTML page."),
) -> None:
    """Served tau and per-position acceptance from the server's own counters, and the gap to an offline run."""
    from ..commands.served import served as compose
    from ..commands.diff import side_folder
    from ..core.paths import output_path
    from ..render.served import render_served, render_served_html

    if html is not None:
        output_path(html, "--html", reads=[*dumps, *([side_folder(run)] if run else [])])
    result = compose(list(dumps), model=model, run=run)
    page = render_served_html(result) if html is not None else None
    if as_json:
        typer.echo(json.dumps(result, indent=1))
    else:
        render_served(stdout_console(), result)
    if page is not None:
        from ..render.html import write_html

        path = write_html(html, page)
        if not as_json:
            stdout_console().print(_safe(f"written: {path}"))
