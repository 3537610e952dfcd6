"""`trained-taps` as a self-contained HTML page (the same section doctor's report shows with --trained-taps)."""

from __future__ import annotations

from ...render.html import render_page

LEGEND = [
    ("relative L2", "sqrt(sum (stored - ours)^2 / sum ours^2) over the slot's finite elements, ours = the reference pass"),
    ("noise floor", "the same figure between our own bf16 and fp32 taps on the same ids (fp8 data: through the fp8 round "
                    "trip): what a correct extraction moves by"),
    ("bf16-equal", "share of elements whose bf16 roundings agree"),
    ("tap-1 / tap+1", "the slot against the neighbouring layers: an off-by-one numbering matches one of them"),
    ("teacher", "the stored last hidden state the trainer takes its labels from, against our last layer before and "
                "after the final norm"),
]


def render_trained_taps_html(result: dict) -> str:
    return render_page("trained_taps.html.j2", legend=LEGEND, title=f"dflash-eval trained-taps: {result['data']}", t=result)
