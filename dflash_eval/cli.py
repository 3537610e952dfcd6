"""`dflash-eval`: a thin Typer layer. Commands parse options, call the library, hand results to render."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from . import cli_options as opt
from .errors import EXIT_BAD_INPUT, InputError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Offline evaluation of DFlash speculative-decoding drafters.")


def stdout_console() -> Console:
    """Created per command so COLUMNS (and a test runner's redirected stdout) are honoured."""
    return Console(highlight=False)


def _safe(text: str) -> str:
    from .safe_text import safe

    return safe(text)


def _incomplete_banner(console: Console, run: dict) -> None:
    state = run.get("incomplete") if isinstance(run, dict) else None
    if isinstance(state, dict):
        console.print(f"[bold white on red] INCOMPLETE RUN: {_safe(str(state.get('done')))} of "
                      f"{_safe(str(state.get('total')))} prompts done; rerun the same command to finish [/]")


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print one line to stderr and return the Exit to raise."""
    from .safe_text import safe

    # the message quotes paths, names and file content: shown escaped, never interpreted
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {safe(message)}", markup=True)
    return typer.Exit(code)


def reports_input_errors(command):
    """Bad input -> one line naming the file and the problem, exit code 2, no traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        import click

        try:
            return command(*args, **kwargs)
        except InputError as exc:
            raise fail(exc.one_line()) from None
        except (typer.Exit, typer.Abort, click.exceptions.ClickException, KeyboardInterrupt, SystemExit):
            raise
        except OSError as exc:  # a path the system refused: still the user's input, still one line
            where = f"{exc.filename}: " if exc.filename else ""
            raise fail(f"{where}{exc.strerror or exc}") from None
        except Exception as exc:  # noqa: BLE001 - an internal error: one line here, the traceback in a file
            raise fail(f"internal error ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                       f"full traceback saved to {save_traceback()}", 1) from None

    return wrapper


def save_traceback() -> str:
    """Write the current exception's traceback under the cache dir (or the temp dir); return where."""
    import datetime as dt
    import os
    import tempfile
    import traceback

    from .continuations import default_cache_dir

    text = traceback.format_exc()
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for folder in (Path(default_cache_dir()) / "errors", Path(tempfile.gettempdir()) / "dflash-eval-errors"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{stamp}-{os.getpid()}.log"
            path.write_text(f"argv: {sys.argv}\n\n{text}")
            return str(path)
        except OSError:
            continue
    return "(nowhere: no writable folder)"


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"dflash-eval {version('dflash-eval')}")
        raise typer.Exit()


@app.callback()
def root(
    show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit."),
) -> None:
    """Offline evaluation of DFlash speculative-decoding drafters."""


@app.command()
@reports_input_errors
def inspect(
    drafter: str = typer.Argument(..., help="Drafter checkpoint folder (z-lab or speculators format) or HF cache name."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Target folder or HF cache name, for the checks that need it."),
    semantics: Optional[str] = typer.Option(None, "--semantics", help="Show the drafter under these rules (zlab, speculators or vllm) instead of its format's."),
) -> None:
    """Show the normalized drafter spec and every validation result. Run this first when numbers look wrong."""
    from .inspection import inspect_drafter
    from .render.terminal import render_inspection

    result = inspect_drafter(drafter, target, semantics)
    render_inspection(stdout_console(), result)
    if result.failed:
        first = result.failed[0]
        raise fail(f"{result.spec.path}: {first.name} failed: {first.detail}")


class RichReporter:
    """Progress bars with ETA for the long phases of a run."""

    def __init__(self, console: Console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.console = console
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console,
                                 transient=False)
        self.tasks: dict[str, int] = {}

    def phase(self, name: str, total: int) -> None:
        if total:
            self.progress.start()
            self.tasks[name] = self.progress.add_task(name, total=total)

    def advance(self, name: str, detail: str = "") -> None:
        self.progress.advance(self.tasks[name])

    def note(self, message: str) -> None:
        from .safe_text import safe

        self.console.print(safe(message))

    def close(self) -> None:
        self.progress.stop()


@app.command()
@reports_input_errors
def run(
    drafter: list[str] = typer.Option([], "--drafter", "-d", help="Drafter checkpoint, PATH or PATH:NAME; repeat for several."),
    target: opt.Target = None,
    reference: Optional[str] = typer.Option(None, "--reference", help="Add a reference drafter: 'z-lab' (published drafter for the target, from the HF cache) or a path."),
    prompts: opt.Prompts = None,
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (created; an interrupted run in it is resumed)."),
    max_new_tokens: opt.MaxNewTokens = None,
    limit: opt.Limit = None,
    thinking: opt.Thinking = None,
    mode: str = typer.Option("trajectory", "--mode", help="trajectory (exact offline replay) or live (step-by-step loop)."),
    final_block: opt.FinalBlock = "shorter",
    anchor_batch: opt.AnchorBatch = None,
    tap_chunk: opt.TapChunk = 4096,
    generation_batch: opt.GenerationBatch = None,
    responses: Optional[Path] = typer.Option(None, "--responses", help="JSONL {\"id\", \"response\"}: continuations produced elsewhere (e.g. vLLM)."),
    device: opt.Device = "auto",
    dtype: opt.Dtype = "auto",
    cache_dir: opt.CacheDir = None,
    html: bool = typer.Option(True, "--html/--no-html", help="Write DIR/report.html at the end."),
    kernels: opt.Kernels = "auto",
    seed: opt.Seed = None,
    semantics: opt.Semantics = [],  # noqa: B006 - Typer copies list defaults
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a run folder that dflash-eval wrote (a foreign folder is never touched)."),
    temperature: opt.Temperature = 0.0,
    top_p: opt.TopP = 1.0,
    top_k: opt.TopK = 0,
    draft_policy: opt.DraftPolicy = "sample",
    samples: opt.Samples = 1,
    shard: Optional[str] = typer.Option(None, "--shard", help="I/N: evaluate shard I of N of the prompts (balanced by length) into --out; `dflash-eval merge` joins the N shard folders."),
    device_map: Optional[str] = typer.Option(None, "--device-map", help="auto, balanced or sequential: split a target too large for one device over several (accelerate); drafters run where the input embedding is."),
    max_memory: Optional[str] = typer.Option(None, "--max-memory", help="With --device-map: per-device budget, e.g. 0=70GiB,1=70GiB,cpu=200GiB."),
) -> None:
    """Evaluate drafters on one target: acceptance per prompt, per slot, with intervals."""
    from .api import RunOptions, evaluate
    from .render.terminal import render_report

    if not drafter and not reference:
        raise fail("give at least one --drafter (or --reference)")
    console = stdout_console()
    reporter = RichReporter(console)
    shared = opt.shared_settings(target=target, prompts=prompts, limit=limit, seed=seed, max_new_tokens=max_new_tokens,
                                 thinking=thinking, device=device, dtype=dtype, cache_dir=cache_dir, semantics=semantics)
    options = RunOptions(drafters=list(drafter), out=out, reference=reference, mode=mode, final_block=final_block,
                         anchor_batch=anchor_batch, tap_chunk=tap_chunk, responses=responses, kernels=kernels,
                         generation_batch=generation_batch, temperature=temperature, top_p=top_p, top_k=top_k,
                         draft_policy=draft_policy, samples=samples, shard=shard, device_map=device_map,
                         max_memory=max_memory,
                         overwrite=overwrite, argv=["dflash-eval", *sys.argv[1:]], **shared)
    from .distributed import launched_ranks

    rank, world = launched_ranks()
    if world > 1 and rank > 0:  # torchrun: only rank 0 talks; the other ranks work quietly
        console = Console(file=open(os.devnull, "w"), highlight=False)
        reporter = RichReporter(console)
    try:
        from .distributed import evaluate_launched

        result = evaluate_launched(options, reporter)
    except KeyboardInterrupt:
        reporter.close()
        raise fail(f"interrupted; finished prompts are kept in {out}: run the same command again to resume", 130) from None
    finally:
        reporter.close()
    if world > 1 and rank > 0:
        return  # rank 0 merged the shards into --out and writes the report
    from .results import read_samples

    rows = read_samples(out / "samples.jsonl")
    render_report(console, result, rows)
    written = f"results: {out}/run.json, samples.jsonl, per_position.csv"
    if html:
        from .render.html import render_run_html, write_html

        write_html(out / "report.html", render_run_html(result, rows))
        written += ", report.html"
    console.print(_safe(written))


@app.command()
@reports_input_errors
def report(
    run_dir: Path = typer.Argument(..., help="A run folder written by `dflash-eval run`."),
    samples: int = typer.Option(2, "--samples", min=0, help="Worst blocks shown per drafter."),
    html: Optional[Path] = typer.Option(None, "--html", help="Also write the self-contained HTML report to this file."),
    partial: bool = typer.Option(False, "--partial", help="On an unfinished run: show the prompts done so far, under a banner."),
) -> None:
    """Print a run's report: summary, per-position table, repetition, sample blocks, legend."""
    from .paths import writable_file
    from .render.terminal import render_report
    from .results import interpreting, read_run, read_samples

    if html is not None:
        writable_file(html, "--html")
    run = read_run(run_dir, partial=partial)
    rows = read_samples(run_dir / "samples.jsonl")
    console = stdout_console()
    _incomplete_banner(console, run)
    with interpreting(run_dir):  # rendered whole before printing: a malformed field never leaves half a report
        with console.capture() as captured:
            render_report(console, run, rows, samples_per_drafter=samples)
        page = None
        if html is not None:
            from .render.html import render_run_html

            page = render_run_html(run, rows)
    console.file.write(captured.get())
    if page is not None:
        from .render.html import write_html

        console.print(_safe(f"written: {write_html(html, page)}"))


@app.command()
@reports_input_errors
def diff(
    a: str = typer.Argument(..., help="RUN_DIR or RUN_DIR:DRAFTER_NAME (the baseline)."),
    b: str = typer.Argument(..., help="RUN_DIR or RUN_DIR:DRAFTER_NAME (the candidate)."),
    force: bool = typer.Option(False, "--force", help="Compare even when the settings differ (loudly flagged)."),
    max_mismatch: float = typer.Option(0.001, "--max-continuation-mismatch", min=0.0, max=1.0,
                                       help="Largest share of differing target continuation tokens accepted as fair."),
    top: int = typer.Option(3, "--top", min=0, help="Most regressed and most improved prompts to show."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output on stdout."),
    html: Optional[Path] = typer.Option(None, "--html", help="Also write the comparison as a self-contained HTML file."),
    seed: int = typer.Option(0, "--seed"),
    partial: bool = typer.Option(False, "--partial", help="Allow unfinished runs (the prompts done so far, under a banner)."),
) -> None:
    """Fair, paired comparison of two drafters: delta tau with interval and p-value, per slot, verdict."""
    import json as json_module

    from .diffing import diff as run_diff
    from .paths import writable_file
    from .render.terminal import render_diff
    from .results import interpreting

    if html is not None:
        writable_file(html, "--html")
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
            from .render.html import render_diff_html

            page = render_diff_html(result)
    if as_json:
        typer.echo(json_module.dumps(result, indent=1))
    else:
        console.file.write(captured.get())
    if html is not None:
        from .render.html import write_html

        path = write_html(html, page)
        if not as_json:
            stdout_console().print(_safe(f"written: {path}"))


@app.command()
@reports_input_errors
def doctor(
    drafter: str = typer.Option(..., "--drafter", "-d", help="The drafter checkpoint to examine."),
    reference: Optional[str] = typer.Option(None, "--reference", help="Explain the gap to this drafter ('z-lab' or a path): how much of it each variant closes."),
    target: opt.Target = None,
    prompts: opt.Prompts = None,
    limit: opt.Limit = None,
    max_new_tokens: opt.MaxNewTokens = None,
    thinking: opt.Thinking = None,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write doctor.json here; when it is a run folder, doctor uses that run's settings (prompts, tokens, thinking, target) and adds a 'doctor' section to its run.json."),
    device: opt.Device = "auto",
    dtype: opt.Dtype = "auto",
    cache_dir: opt.CacheDir = None,
    seed: opt.Seed = None,
    semantics: opt.Semantics = [],  # noqa: B006 - Typer copies list defaults
    temperature: opt.Temperature = 0.0,
    top_p: opt.TopP = 1.0,
    top_k: opt.TopK = 0,
    draft_policy: opt.DraftPolicy = "sample",
    samples: opt.Samples = 1,
    context_variants: bool = typer.Option(True, "--context-variants/--no-context-variants", help="Also evaluate on continuations made with thinking flipped and from the raw prompt (one more target pass per prompt each)."),
) -> None:
    """Name the train/eval mismatch behind a gap: replay the drafter under each classic bug's variant."""
    import json as json_module

    from .api import RunOptions
    from .doctor import run_doctor
    from .paths import writable_dir
    from .render.terminal import render_doctor
    from .results import RUN_JSON, atomic_write

    if out is not None:
        writable_dir(out, "--out")
    run_count = None
    if out is not None and (out / RUN_JSON).is_file():
        from .doctor import settings_of_run

        prompts, max_new_tokens, thinking, target, run_count = settings_of_run(out, prompts, max_new_tokens, thinking,
                                                                               target, limit)
    console = stdout_console()
    reporter = RichReporter(console)
    shared = opt.shared_settings(target=target, prompts=prompts, limit=limit if run_count is None else (limit or run_count),
                                 seed=seed, max_new_tokens=max_new_tokens, thinking=thinking, device=device,
                                 dtype=dtype, cache_dir=cache_dir, semantics=semantics)
    if draft_policy == "both":
        raise fail("doctor examines one draft policy at a time (--draft-policy sample or argmax)")
    options = RunOptions(drafters=[drafter], reference=reference, out=out or Path("."), temperature=temperature, top_p=top_p, top_k=top_k,
                         draft_policy=draft_policy, samples=samples, context_variants=context_variants, **shared)
    try:
        result = run_doctor(options, reporter)
    finally:
        reporter.close()
    render_doctor(console, result)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / "doctor.json", json_module.dumps(result, indent=1) + "\n")
        if (out / RUN_JSON).exists():
            run_data = json_module.loads((out / RUN_JSON).read_text())
            run_data["doctor"] = result
            atomic_write(out / RUN_JSON, json_module.dumps(run_data, indent=1) + "\n")
            if (out / "report.html").exists():
                from .render.html import render_run_html, write_html
                from .results import read_samples

                write_html(out / "report.html", render_run_html(run_data, read_samples(out / "samples.jsonl")))
        console.print(_safe(f"written: {out / 'doctor.json'}"))


@app.command()
@reports_input_errors
def show(
    run_dir: Path = typer.Argument(..., help="A run folder written by `dflash-eval run`."),
    prompt: Optional[str] = typer.Option(None, "--prompt", help="Only this prompt id."),
    drafter: Optional[str] = typer.Option(None, "--drafter", help="Only this drafter."),
    worst: Optional[int] = typer.Option(None, "--worst", min=1, help="The K blocks with the shortest accepted prefix."),
    first: Optional[int] = typer.Option(None, "--first", min=1, help="The first N blocks (default 10 unless --prompt is given)."),
    sample: Optional[int] = typer.Option(None, "--random", min=1, help="K blocks at random."),
    seed: int = typer.Option(0, "--seed"),
    partial: bool = typer.Option(False, "--partial", help="On an unfinished run: the prompts done so far, under a banner."),
) -> None:
    """Decoded draft blocks along the walk, next to the target's tokens."""
    from .render.terminal import SAMPLE_LEGEND, render_blocks
    from .results import interpreting, read_run, read_samples
    from .samples import select_blocks

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
        rows = read_samples(run_dir / "samples.jsonl")
        if prompt is not None and not any(r["prompt_id"] == prompt for r in rows):
            raise fail(f"{run_dir}: no prompt {prompt!r} in this run")
        if first is None and worst is None and sample is None and prompt is None:
            first = 10
        blocks = select_blocks(rows, prompt=prompt, drafter=drafter, first=first, worst=worst, sample=sample, seed=seed)
        with console.capture() as captured:
            render_blocks(console, blocks)
            console.print(SAMPLE_LEGEND)
    console.file.write(captured.get())


@app.command()
@reports_input_errors
def track(
    save_dir: list[Path] = typer.Argument(..., help="A training run's save folder (speculators <epoch>/, HF checkpoint-N/, SpecForge epoch_E_step_S/, any folder of checkpoint folders), or checkpoint folders one by one."),
    target: opt.Target = None,
    reference: Optional[str] = typer.Option(None, "--reference", help="The line to beat: 'z-lab' (published drafter for the target, from the HF cache) or a checkpoint path; evaluated once."),
    prompts: opt.Prompts = None,
    out: Path = typer.Option(..., "--out", "-o", help="Track folder (created; rerun the same command to continue it)."),
    watch: bool = typer.Option(False, "--watch", help="Keep polling for new checkpoints until interrupted (Ctrl-C)."),
    interval: float = typer.Option(60.0, "--interval", help="Seconds between polls with --watch."),
    settle: float = typer.Option(2.0, "--settle", help="Seconds between the two looks that must find a new checkpoint unchanged before it is evaluated."),
    batch: int = typer.Option(8, "--batch", min=1, help="Checkpoints evaluated together on one target pass per prompt."),
    tensorboard: Optional[Path] = typer.Option(None, "--tensorboard", help="Also write the scalars (tau, interval, reach per slot, repetition, gap) to this TensorBoard log folder."),
    max_new_tokens: opt.MaxNewTokens = None,
    limit: opt.Limit = None,
    thinking: opt.Thinking = None,
    final_block: opt.FinalBlock = "shorter",
    anchor_batch: opt.AnchorBatch = None,
    tap_chunk: opt.TapChunk = 4096,
    generation_batch: opt.GenerationBatch = None,
    device: opt.Device = "auto",
    dtype: opt.Dtype = "auto",
    cache_dir: opt.CacheDir = None,
    html: bool = typer.Option(True, "--html/--no-html", help="Rewrite DIR/track.html after every batch."),
    kernels: opt.Kernels = "auto",
    seed: opt.Seed = None,
    semantics: opt.Semantics = [],  # noqa: B006 - Typer copies list defaults
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a track folder that dflash-eval wrote."),
    temperature: opt.Temperature = 0.0,
    top_p: opt.TopP = 1.0,
    top_k: opt.TopK = 0,
    draft_policy: opt.DraftPolicy = "sample",
    samples: opt.Samples = 1,
) -> None:
    """Evaluate every checkpoint of a training run once, as a curve against the reference (--watch: as they appear)."""
    from .api import RunOptions
    from .render.track import render_track
    from .tracking import Tracker, TrackOptions

    console = stdout_console()
    reporter = RichReporter(console)
    shared = opt.shared_settings(target=target, prompts=prompts, limit=limit, seed=seed, max_new_tokens=max_new_tokens,
                                 thinking=thinking, device=device, dtype=dtype, cache_dir=cache_dir, semantics=semantics)
    run_options = RunOptions(drafters=[], out=out, reference=reference, final_block=final_block,
                             anchor_batch=anchor_batch, tap_chunk=tap_chunk, kernels=kernels,
                             generation_batch=generation_batch, overwrite=overwrite, temperature=temperature,
                             top_p=top_p, top_k=top_k, draft_policy=draft_policy, samples=samples,
                             argv=["dflash-eval", *sys.argv[1:]], **shared)
    options = TrackOptions(sources=list(save_dir), run=run_options, watch=watch, interval=interval, settle=settle,
                           max_batch=batch)
    scalars = None
    if tensorboard is not None:
        import importlib.util

        from .paths import writable_dir

        writable_dir(tensorboard, "--tensorboard")
        if importlib.util.find_spec("tensorboard") is None:
            raise fail("--tensorboard needs the tensorboard package (pip install tensorboard)")

    def after_batch(tracker) -> None:
        if html:
            from .render.html import write_html
            from .render.track import render_track_html

            write_html(out / "track.html", render_track_html(tracker.rows, tracker.present(), tracker.folder.settings,
                                                             seed=run_options.seed))
        if watch:
            reporter.close()
            render_track(console, tracker.rows, tracker.present(), seed=run_options.seed)

    def on_row(row, reference_tau) -> None:
        nonlocal scalars
        if tensorboard is not None:
            from .render.tensorboard import ScalarLog

            scalars = scalars or ScalarLog(tensorboard)
            scalars.write(row, reference_tau)

    tracker = Tracker(options, reporter, after_batch, on_row)
    try:
        tracker.run()
    except KeyboardInterrupt:
        reporter.close()
        if tracker.busy:
            raise fail(f"interrupted inside a batch; the prompts done are kept in {out}: rerun the same command to "
                       "continue", 130) from None
        console.print(_safe(f"stopped; {len(tracker.rows)} rows in {out / 'track.jsonl'} (rerun to continue)"))
    finally:
        reporter.close()
        if scalars is not None:
            scalars.close()
    render_track(console, tracker.rows, tracker.present(), tracker.pending(), seed=run_options.seed)
    written = f"results: {out}/track.jsonl, track.csv, runs/"
    if html and tracker.rows:
        written += ", track.html"
    console.print(_safe(written))


@app.command()
@reports_input_errors
def merge(
    shards: list[Path] = typer.Argument(..., help="The N shard folders of one run (`run --shard I/N`)."),
    out: Path = typer.Option(..., "--out", "-o", help="The merged run folder (what one process would have written)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a run folder that dflash-eval wrote."),
    html: bool = typer.Option(True, "--html/--no-html", help="Write DIR/report.html."),
) -> None:
    """Join shard runs into one run folder: counts add exactly; shards of other runs, missing or overlapping ones are refused."""
    from .merging import merge as merge_shards
    from .render.terminal import render_report
    from .results import read_samples

    console = stdout_console()
    result = merge_shards(list(shards), out, overwrite=overwrite, argv=["dflash-eval", *sys.argv[1:]])
    rows = read_samples(out / "samples.jsonl")
    render_report(console, result, rows)
    written = f"merged {len(shards)} shards: {out}/run.json, samples.jsonl, per_position.csv"
    if html:
        from .render.html import render_run_html, write_html

        write_html(out / "report.html", render_run_html(result, rows))
        written += ", report.html"
    console.print(_safe(written))


prompts_app = typer.Typer(no_args_is_help=True, help="Prompt sets: what they hold and what is sent.")
app.add_typer(prompts_app, name="prompts")


@prompts_app.command("list")
def prompts_list() -> None:
    """The bundled prompt sets, their size and license."""
    from rich.table import Table

    from .prompts import describe_sets

    table = Table(header_style="bold")
    for column in ("set", "prompts", "description"):
        table.add_column(column, justify="right" if column == "prompts" else "left")
    for name, count, description in describe_sets():
        table.add_row(name, str(count), description)
    console = stdout_console()
    console.print(table)
    console.print("also: --prompts FILE.jsonl ({\"id\", \"prompt\"} or {\"id\", \"messages\"}) and --prompts dir:PATH "
                  "(code-completion prompts from the head of each source file)")


@prompts_app.command("show")
@reports_input_errors
def prompts_show(
    source: str = typer.Argument(..., help="humaneval, mbpp, demo, FILE.jsonl or dir:PATH."),
    prompt_id: Optional[str] = typer.Option(None, "--id", help="Only this prompt."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Tokenizer whose chat template to apply (default: the demo target's)."),
    thinking: bool = typer.Option(False, "--thinking/--no-thinking"),
    limit: int = typer.Option(3, "--limit", min=1, help="How many prompts to show (without --id)."),
) -> None:
    """Print what will be sent to the target for a prompt set, after the chat template."""
    from rich.panel import Panel
    from rich.text import Text
    from transformers import AutoTokenizer

    from .checkpoints import resolve_local_or_cached
    from .demo import target_path
    from .prompts import load_prompts, render_for_target

    prompts = load_prompts(source)
    if prompt_id is not None:
        prompts = [p for p in prompts if p.id == prompt_id]
        if not prompts:
            raise fail(f"{source}: no prompt with id {prompt_id!r}")
    else:
        prompts = prompts[:limit]
    folder = resolve_local_or_cached(target) if target else target_path()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    from .safe_text import printable, safe

    console = stdout_console()
    for prompt, text in zip(prompts, render_for_target(prompts, tokenizer, thinking)):
        console.print(Panel(Text(printable(text, keep="\n\t")),
                            title=f"{safe(prompt.id)} ({safe(prompt.set)}) as sent, thinking {'on' if thinking else 'off'}",
                            title_align="left"))


@app.command()
@reports_input_errors
def demo(
    out: Path = typer.Option(Path("reports/demo"), "--out", "-o", help="Where the demo run is written."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", min=1),
    html: bool = typer.Option(True, "--html/--no-html"),
) -> None:
    """The whole job on the bundled tiny models: a correct reference drafter vs an in-house one with the
    anchor-in-context bug, on a small coding prompt set. No GPU, no download."""
    from .api import RunOptions, evaluate
    from .demo import available, drafter_paths, target_path
    from .render.terminal import render_report
    from .results import STATE, read_samples

    from .paths import writable_dir

    if not available():
        raise fail("the bundled demo models are missing from this installation (python -m dflash_eval.demo.build rebuilds them)")
    writable_dir(out, "--out")
    _clear_demo_out(out)
    console = stdout_console()
    reference, inhouse = drafter_paths()
    reporter = RichReporter(console)
    options = RunOptions(drafters=[f"{reference}:demo-reference", f"{inhouse}:demo-inhouse"], out=out,
                         target=str(target_path()), prompts="demo", max_new_tokens=max_new_tokens, thinking=False,
                         cache_dir=out.parent / ".cache", argv=["dflash-eval", *sys.argv[1:]])
    try:
        result = evaluate(options, reporter)
    finally:
        reporter.close()
        if (out / STATE).is_file():  # even when interrupted: the next demo may replace this folder
            (out / DEMO_MARKER).touch()
    rows = read_samples(out / "samples.jsonl")
    render_report(console, result, rows)
    if html:
        from .render.html import render_run_html, write_html

        write_html(out / "report.html", render_run_html(result, rows, title="dflash-eval demo"))
    console.print(demo_guidance(result, inhouse, out, max_new_tokens, html))


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
        shutil.rmtree(out)
    elif any(out.iterdir()):
        raise fail(f"{out}: exists and does not hold an earlier demo run; choose another --out")


def program() -> str:
    """How to call dflash-eval again from this shell: the bare name when it is on PATH, else the full path
    of this installation's script (a venv that was not activated), else `python -m dflash_eval.cli`."""
    import shutil

    here = Path(sys.executable).parent / "dflash-eval"
    found = shutil.which("dflash-eval")
    if found and (not here.exists() or Path(found).resolve() == here.resolve()):
        return "dflash-eval"
    if here.exists():
        return str(here)
    return f"{sys.executable} -m dflash_eval.cli"


def demo_guidance(result: dict, inhouse: Path, out: Path, max_new_tokens: int, html: bool) -> str:
    """What to look at, from the numbers this run measured (not from what the build expected)."""
    by_name = {d["name"]: d for d in result["drafters"]}
    ref, inh = by_name["demo-reference"], by_name["demo-inhouse"]

    def flagged(drafter: dict) -> str:
        rep = drafter.get("repetition") or {}
        blocks, hits = rep.get("blocks") or 0, rep.get("flagged_blocks") or 0
        return f"{hits}/{blocks} blocks flagged as repetitive" if blocks else "no blocks"

    tau_ref, tau_inh = ref["metrics"]["tau_macro"], inh["metrics"]["tau_macro"]
    gap = f"{tau_ref / tau_inh:.1f}x" if tau_inh else "n/a"
    files = "run.json, samples.jsonl, per_position.csv" + (", report.html" if html else "")
    return (
        f"\n[bold]What to look at[/]: demo-reference reaches tau {tau_ref:.2f} ({flagged(ref)}), demo-inhouse "
        f"{tau_inh:.2f} ({flagged(inh)}): a {gap} gap. Both drafters have the same architecture and data; the "
        "in-house one was trained with the anchor's own hidden state in its attention context. The per-position "
        "table shows where its acceptance collapses, the worst blocks show its drafts. Ask doctor why:\n"
        f"  {_safe(program())} doctor --drafter {_safe(inhouse)} --no-thinking --max-new-tokens {max_new_tokens}\n"
        f"Results in {_safe(out)}/ ({files}); `{_safe(program())} show {_safe(out)} --worst 5` for more blocks. "
        "On your own checkpoints:\n"
        f"  {_safe(program())} run --target Qwen/Qwen3-8B --drafter ./my-drafter --reference z-lab --prompts humaneval "
        "--out runs/mine"
    )


def main() -> None:  # pragma: no cover - console entry point
    app(prog_name="dflash-eval")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
