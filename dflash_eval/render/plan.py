"""`plan` in the terminal: parameters, memory per phase against the accelerator, minutes, and the verdict
with the option that would make a run fit (commands/plan.py computes; this only shows)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..core.plan_document import TIME_IS, Plan
from ..core.roofline import GIB
from ..core.safe_text import safe


def _gib(n: float) -> str:
    return f"{n / GIB:,.1f} GiB"


def _flops(n: float) -> str:
    return f"{n / 1e15:,.1f} PFLOP" if n >= 1e14 else f"{n / 1e12:,.2f} TFLOP"


def render_plan(console: Console, plan: Plan) -> None:
    s, t, a = plan.settings, plan.target, plan.accelerator
    lengths = plan.lengths
    models = Table(title=f"dflash-eval plan on one {a.name.upper()} ({a.peak_flops / 1e12:,.0f} TFLOP/s bf16 dense, "
                         f"{a.bandwidth / 1e12:.2f} TB/s, {_gib(a.memory_bytes)})", header_style="bold")
    for column in ("model", "kind", "parameters", "weights (bf16)", "detail"):
        models.add_column(column, justify="right" if column in ("parameters", "weights (bf16)") else "left")
    d = plan.to_dict()["target"]
    models.add_row(safe(f"target {t.path}"), t.kind, f"{t.parameters:,}", _gib(t.weight_bytes),
                   f"KV {d['kv_bytes_per_token']:,} B/token, recurrent state {d['state_bytes_per_sequence'] / 2**20:,.1f} MiB/sequence")
    for drafter in plan.drafters:
        models.add_row(safe(f"drafter {drafter.path}"), drafter.kind, f"{drafter.parameters:,}", _gib(drafter.weight_bytes),
                       f"B = {drafter.shape.block_size}, {drafter.shape.n_taps} taps, "
                       f"anchor batch {plan.batches['anchor'][drafter.path]}")
    console.print(models)
    console.print(f"prompts: {safe(s.prompts)}, {len(lengths)} sequences, {min(lengths)}-{max(lengths)} tokens "
                  f"(mean {sum(lengths) / len(lengths):.0f}); --max-new-tokens {s.max_new_tokens}; "
                  f"generation batch {plan.batches['generation']}")

    phases = Table(title="memory and time per phase", header_style="bold")
    for column in ("phase", "memory", "FLOPs", "minutes\n(lower bound)", "largest parts besides the weights"):
        phases.add_column(column, justify="left" if column in ("phase", "largest parts besides the weights") else "right")
    for phase in plan.phases:
        over = phase.memory_bytes > plan.usable_bytes
        resident = phase.name == "weights"  # later phases: what they add to the resident weights
        parts = sorted(((k, v) for k, v in phase.parts.items()
                        if resident or not k.startswith(("target weights", "drafter "))), key=lambda kv: -kv[1])[:3]
        phases.add_row(phase.name, ("[bold red]" if over else "") + _gib(phase.memory_bytes) + ("[/]" if over else ""),
                       _flops(phase.flops), f"{phase.seconds / 60:,.2f}",
                       safe("; ".join(f"{name} {_gib(size)}" for name, size in parts)))
    console.print(phases)
    total = sum(p.seconds for p in plan.phases) / 60
    console.print(f"time: at least {total:,.1f} min on {a.name.upper()}, {safe(TIME_IS)}")
    if plan.fits:
        console.print(f"[green]fits[/]: peak {_gib(plan.peak_bytes)} of {_gib(plan.usable_bytes)} usable")
    else:
        console.print(f"[bold red]does not fit[/]: peak {_gib(plan.peak_bytes)} > {_gib(plan.usable_bytes)} usable; "
                      f"option that fits: {safe(plan.fix or 'none found')}")
    for note in plan.notes:
        console.print(f"[dim]note: {safe(note)}[/]")
