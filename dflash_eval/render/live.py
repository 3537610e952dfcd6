"""Live mode's own measurements in the terminal, beside the acceptance numbers: what the step-by-step loop
cost on this machine (committed tokens per second of its steps, the mean step and its drafter / verify
parts) and, when the run timed plain one-token decoding steps (`--mode live --draft-lengths`), the speedup
measured against them at batch 1. run.json holds the seconds (drafters[].live, samples rows); this shows
them, from core/speedup.live_throughput."""

from __future__ import annotations

from rich.console import Console

from ..core.documents.run_document import RunDocument
from ..core.safe_text import safe
from ..core.speedup import live_throughput


def render_live(console: Console, run: RunDocument) -> None:
    if run["provenance"].get("mode") != "live":
        return
    device = run["provenance"].get("device") or "this device"
    for d in run["drafters"]:
        t = live_throughput(d)
        if t is None:
            continue
        speed = t["measured_speedup"]
        console.print(safe(f"live loop, {d['name']}: {t['tokens_per_second']:,.1f} tokens/s over {t['steps']} steps "
                           f"({t['seconds']:.2f} s of steps; prefill {t['prefill_seconds'] or 0:.2f} s not counted), "
                           f"{t['step_ms']:.2f} ms per step on {device}; "
                           + (f"measured speedup over plain decoding {speed:.2f}x (batch 1)" if speed is not None
                              else "no plain decoding steps timed (add --draft-lengths for a measured speedup)")))
