"""`dflash-eval served`: what a server measured (vLLM /metrics dumps, a `vllm bench serve` result, SGLang's
gauge), optionally beside an offline run of the same drafter. Its flags are its section's
(serving/commands/settings.ServedSettings, through cli/options.takes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from ..cli.common import fail, reports_input_errors, safe_line, stdout_console
from ..cli.options import takes
from .commands.settings import ServedSettings


@reports_input_errors
@takes(served=ServedSettings)
def served(
    served: ServedSettings,
    dumps: Optional[List[Path]] = typer.Argument(None, help="A /metrics dump, two dumps BEFORE AFTER (subtracted), or "
                                                            "a `vllm bench serve` result JSON."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document (tau, per_position, ...)."),
    html: Optional[Path] = typer.Option(None, "--html-file", help="Also write a self-contained HTML page."),
) -> None:
    """Served tau and per-position acceptance from the server's own counters (vLLM, SGLang, llama.cpp, AIPerf's
    exports), and the gap to an offline run."""
    from ..commands.diff import side_folder
    from ..core.paths import output_path
    from .commands.served import served as compose
    from .views.served import render_served, render_served_html

    run, per_request, non_speculative = served.run, served.per_request, served.non_speculative
    if html is not None:
        output_path(html, "--html-file", reads=[*(dumps or []), *([per_request] if per_request else []),
                                           *([non_speculative] if non_speculative else []),
                                           *([side_folder(run)] if run else [])])
    served.check()  # which flags pair with --per-request (serving/commands/settings.py)
    if per_request is not None:
        _per_request(per_request, dumps, run, as_json, html, non_speculative, served.logit_gap)
        return
    if not dumps:
        raise fail("give a /metrics dump (or two, or a bench result), or --per-request FILE with --run RUN")
    result = compose(list(dumps), model=served.model, run=run)
    page = render_served_html(result) if html is not None else None
    if as_json:
        typer.echo(json.dumps(result, indent=1))
    else:
        render_served(stdout_console(), result)
    if page is not None:
        from ..render.html import write_html

        path = write_html(html, page)
        if not as_json:
            stdout_console().print(safe_line(f"written: {path}"))


def _per_request(path: Path, dumps, run: str, as_json: bool, html: Optional[Path],
                 non_speculative: Optional[Path] = None, logit_gap: bool = False) -> None:
    """served --per-request FILE --run RUN (serving/commands/requests.py composes, serving/views/requests.py shows)."""
    from .commands.requests import reconcile
    from .views.requests import render_requests, render_requests_html

    if dumps:
        raise fail("--per-request reads a file of responses; give the /metrics dumps in another call")
    result = reconcile(path, run, non_speculative, logit_gap=logit_gap)
    page = render_requests_html(result) if html is not None else None
    if as_json:
        typer.echo(json.dumps(result, indent=1))
    else:
        render_requests(stdout_console(), result)
    if page is not None:
        from ..render.html import write_html

        written = write_html(html, page)
        if not as_json:
            stdout_console().print(safe_line(f"written: {written}"))
