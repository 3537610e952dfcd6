"""`trained-taps` in the terminal: one row per stored slot against our tap and its neighbours beside the noise
floor, the teacher before and after the final norm, the findings, and the drafter on both sides with the gap."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from ..core.safe_text import safe

STATUS = {"ok": "[green]ok[/]", "shifted": "[bold red]SHIFT[/]", "zero": "[bold red]ZERO[/]",
          "nonfinite": "[bold red]NaN[/]", "unmatched": "[bold red]NONE[/]", "post-norm": "[bold red]POST[/]",
          "pre-norm": "[bold red]PRE[/]"}


def _e(value) -> str:
    """7.0e-1: two digits, the exponent without padding (eight numbers side by side fit 80 columns)."""
    if value is None:
        return ""
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _pct(value) -> str:
    return "" if value is None else f"{100 * value:.0f}%"


def _f(value, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def slot_table(result: dict) -> Table:
    """One row per stored slot against our tap of its label (rel L2 also against tap - 1 and tap + 1), two for
    the teacher (against our last layer before / after the final norm)."""
    floor = result["noise_floor"]
    table = Table(title=f"stored slots vs our {safe(result['target']['dtype'])} taps (floor: our bf16 vs fp32; ok = "
                        f"rel L2 <= {floor['factor']:g} x floor)", header_style="bold", box=box.SIMPLE_HEAD,
                  padding=(0, 1), pad_edge=False, collapse_padding=True)
    for column in ("slot", "holds", "cos", "rel L2", "max|d|", "bf16=", "tap-1", "tap+1", "floor", "flag"):
        table.add_column(column, justify="left" if column in ("holds", "flag") else "right", no_wrap=True)
    for slot in result["slots"]:
        status = STATUS.get(slot["status"], safe(slot["status"]))
        if slot["role"] == "teacher":
            for key, floor_key in (("pre-norm", "floor_pre_norm"), ("post-norm", "floor_post_norm")):
                s = slot["against"][key]
                table.add_row(str(slot["slot"]), f"T {key[:-5]}-norm", _f(s["cosine"], 3), _e(s["rel_l2"]), _e(s["max_abs"]),
                              _pct(s["bf16_equal_share"]), "", "", _e(slot[floor_key]),
                              status if key == "pre-norm" else "")
            continue
        against, layer = slot["against"], slot["layer"]
        own = against[str(layer)]
        table.add_row(str(slot["slot"]), f"layer {layer}", _f(own["cosine"], 3), _e(own["rel_l2"]), _e(own["max_abs"]),
                      _pct(own["bf16_equal_share"]), _e((against.get(str(layer - 1)) or {}).get("rel_l2")),
                      _e((against.get(str(layer + 1)) or {}).get("rel_l2")), _e(slot["floor_rel_l2"]), status)
    return table


def render_trained_taps(console: Console, result: dict) -> None:
    samples = result["samples"]
    console.print(f"[bold]trained-taps[/]: {safe(result['data'])} ({safe(result['format'])}; {safe(result['split'])}); "
                  f"{samples['compared']} samples compared, {len(samples['skipped'])} skipped; layers "
                  f"{result['layout']['taps']} from {safe(result['layout']['source'])}, stored as "
                  f"{', '.join(map(safe, result['layout']['stored_dtypes']))}")
    console.print(slot_table(result))
    greedy = result["greedy"]
    if greedy["total"]:
        console.print(f"greedy next token from the {safe(greedy['labels'])} = the target's: {greedy['agree']}/"
                      f"{greedy['total']} supervised positions ({100 * greedy['agree'] / greedy['total']:.1f}%)")
    for skipped in samples["skipped"][:3]:
        console.print(f"skipped sample {safe(str(skipped['sample']))}: {safe(skipped['reason'])}")
    for finding in result["findings"]:
        console.print(f"[bold red]{safe(finding['headline'])}[/]")
        for line in finding["lines"]:
            console.print(f"  {safe(line)}")
    for note in result["notes"]:
        console.print(f"note: {safe(note)}")
    evaluation = result.get("evaluation")
    if evaluation:
        table = Table(title=f"the drafter teacher-forced on the training samples (labels: {safe(evaluation['labels'])}; "
                            "anchors where loss_mask == 1)", header_style="bold")
        table.add_column("taps")
        table.add_column("tau macro", justify="right")
        table.add_column("marginal per slot", justify="left")
        for side, label in (("trained", "stored (as trained)"), ("ours", "ours (as evaluated)")):
            metrics = evaluation.get(side)
            if metrics:
                table.add_row(label, _f(metrics["tau_macro"], 3),
                              " ".join("-" if m is None else f"{m:.3f}" for m in metrics["marginal"]))
        console.print(table)
        console.print(safe(evaluation["line"]))
    console.print(f"[bold]verdict:[/] {safe(result['verdict'])}")
