"""`inspect` in the terminal: the normalized spec, the attention rule per layer and every check."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..core.inspection import Inspection
from ..core.safe_text import safe


def _yes(ok: bool, severity: str = "error") -> str:
    if ok:
        return "[green]ok[/]"
    return "[bold red]FAIL[/]" if severity == "error" else "[bold yellow]WARN[/]"


def _snapshot(snapshot: dict | None) -> str:
    if not snapshot:
        return "local folder (not an HF cache snapshot): its identity is its content fingerprint"
    return f"{snapshot['repo']} at revision {snapshot['revision']} (HF cache)"


def render_inspection(console: Console, result: Inspection) -> None:
    spec = result.spec
    table = Table(title=f"DFlash drafter: {safe(spec.path)}", show_header=True, header_style="bold")
    table.add_column("field")
    table.add_column("value", overflow="fold")

    def row(field: str, value: str) -> None:  # every value may quote the checkpoint's config: escaped
        table.add_row(safe(field), safe(value))

    row("format", spec.format + (f" (a {spec.layout} checkpoint, read as z-lab's: formats/muse_glimmer.py)"
                                 if spec.layout else ""))
    row("snapshot", _snapshot(result.snapshot))
    row("target", result.target_note + (f" ({_snapshot(result.target_snapshot)})" if result.target_snapshot else ""))
    row("taps (output of layer t, z-lab ids)", str(list(spec.taps)))
    row("taps (speculators/vLLM ids = t+1)", str(list(spec.speculators_taps)))
    row("taps (HF output_hidden_states index)", str([t + 1 for t in spec.taps]) + "  (last layer: raw pre-norm output, not HF's last entry)")
    row("fc input width", f"{spec.fc_in_features} = {len(spec.taps)} taps x {spec.target_hidden_size}")
    row("block size B", f"{spec.block_size} (anchor + {spec.block_size - 1} drafted slots)")
    mask = f"{spec.mask_token_id}" + (f"  {result.mask_token_text!r}" if result.mask_token_text is not None else "  (token text: needs a target tokenizer)")
    row("mask token id", mask)
    row("drafter layers", f"{spec.num_layers} x hidden {spec.hidden_size}, heads {spec.num_attention_heads}/{spec.num_key_value_heads} kv, head_dim {spec.head_dim}")
    from ..core.semantics import RULE_SOURCES, SCALE_SOURCE, describe

    row("rules (semantics)", f"{spec.semantics}: {spec.semantics_source}")
    row("rules follow", RULE_SOURCES.get(spec.semantics, spec.semantics))
    for layer in describe(spec):
        row(f"  layer {layer['layer']}", f"{layer['kind']} attention, {layer['window']}, {layer['in_block']} in block")
    row("in-block causality from", spec.causality_source)
    row("context mask", "p < anchor (strict: the anchor's hidden state is never context)")
    scales = [f"input_embedding_scale {spec.embedding_scale:g}", f"output_multiplier {spec.output_multiplier:g}",
              "final_logit_softcapping " + (f"{spec.logit_softcap:g}" if spec.logit_softcap else "off")]
    declared = {k: v for k, v in vars(spec.scales).items() if v is not None}
    row("scales applied", ", ".join(scales) + (f"  (declared {declared}; {SCALE_SOURCE})" if declared else ""))
    for note in spec.config_notes:
        row("config note", note)
    row("RoPE", ", ".join(f"{k}={v}" for k, v in spec.rope.items()))
    row("embedding", f"{spec.embedding_source}'s table")
    row("lm_head", f"{spec.lm_head_source}'s" + (f", reduced draft vocab {spec.draft_vocab_size} via d2t" if spec.has_d2t else ""))
    if spec.verifier:
        row("recorded verifier", spec.verifier)
    params = result.parameters
    row("parameters", f"{params['body']:,} body" + "".join(
        f" + {params[k]:,} {k}" for k in ("embedding", "lm_head") if params[k]))
    console.print(table)

    checks = Table(title="Validation", header_style="bold")
    checks.add_column("check")
    checks.add_column("result")
    checks.add_column("detail", overflow="fold")
    for check in result.checks:
        checks.add_row(safe(check.name), _yes(check.ok, check.severity), safe(check.detail))
    console.print(checks)
    if result.defects:
        defects = Table(title="Checks engines added after their own bugs (WARN: how some engine serves this "
                              "checkpoint differently; core/checkpoint_defects.py)", header_style="bold")
        defects.add_column("check")
        defects.add_column("result")
        defects.add_column("detail", overflow="fold")
        for check in result.defects:
            defects.add_row(safe(check.name), _yes(check.ok, check.severity), safe(check.detail))
        console.print(defects)
    if result.engines is not None:
        from .inspect_engines import render_engine_readings

        render_engine_readings(console, result.engines)
