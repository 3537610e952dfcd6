"""`dflash-eval export-serving`: the speculative-decoding settings that make vLLM, SGLang or Dynamo accept at
a drafter's measured rates, or its Model-Optimizer speculation profile (load tests before deployment).
Parses, calls commands.export_serving, prints or writes its text."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import reports_input_errors, safe_line, stdout_console, write_stdout


@reports_input_errors
def export_serving(
    run_dir: Path = typer.Argument(..., help="A run folder written by `dflash-eval run`."),
    engine: str = typer.Option(..., "--engine", help="vllm (speculative_config with synthetic acceptance rates), "
                                                     "sglang (SGLANG_SIMULATE_ACC_LEN), dynamo (mocker --aic-nextn "
                                                     "flags, conditional rates) or modelopt (speculation_profile.json "
                                                     "v1.0, both conventions, every measured k)."),
    k: Optional[int] = typer.Option(None, "--k", min=1, help="Draft length (num_speculative_tokens); default: the best k "
                                                     "at batch 1 of the run's expected speedup, else B - 1. Must "
                                                     "have been measured (run --draft-lengths)."),
    drafter: Optional[str] = typer.Option(None, "--drafter-name", help="Which drafter of the run (needed when it holds several)."),
    synthetic: str = typer.Option("rates", "--synthetic", help="vllm only: rates (synthetic_acceptance_rates, the "
                                                              "per-position reach) or length "
                                                              "(synthetic_acceptance_length, the mean)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write to this file instead of printing."),
) -> None:
    """Write the serving engine's settings that accept at this drafter's measured per-position rates."""
    from ..commands.export_serving import export_serving as build
    from ..core.documents.results import atomic_write
    from ..core.paths import output_path

    if out is not None:
        output_path(out, "--out", reads=[run_dir])  # the one output guard (core/paths.py)
    from ..core.safe_text import printable

    result = build(run_dir, engine, k=k, drafter=drafter, synthetic=synthetic)
    text = printable(result["text"], keep="\n")  # the one escaping rule: a drafter name never drives a terminal
    if out is None:
        write_stdout(text)
        return
    atomic_write(out, text)
    stdout_console().print(safe_line(f"written: {out} ({engine}, k = {result['k']})"))
