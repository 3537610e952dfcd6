"""Rich rendering for the terminal. Pure presentation: takes library results, prints tables."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..inspection import Inspection


def _yes(ok: bool) -> str:
    return "[green]ok[/]" if ok else "[bold red]FAIL[/]"


def render_inspection(console: Console, result: Inspection) -> None:
    spec = result.spec
    table = Table(title=f"DFlash drafter: {spec.path}", show_header=True, header_style="bold")
    table.add_column("field")
    table.add_column("value", overflow="fold")
    table.add_row("format", spec.format)
    table.add_row("target", result.target_note)
    table.add_row("taps (output of layer t, z-lab ids)", str(list(spec.taps)))
    table.add_row("taps (speculators/vLLM ids = t+1)", str(list(spec.speculators_taps)))
    table.add_row("taps (HF output_hidden_states index)", str([t + 1 for t in spec.taps]) + "  (last layer: raw pre-norm output, not HF's last entry)")
    table.add_row("fc input width", f"{spec.fc_in_features} = {len(spec.taps)} taps x {spec.target_hidden_size}")
    table.add_row("block size B", f"{spec.block_size} (anchor + {spec.block_size - 1} drafted slots)")
    mask = f"{spec.mask_token_id}" + (f"  {result.mask_token_text!r}" if result.mask_token_text is not None else "  (token text: needs a target tokenizer)")
    table.add_row("mask token id", mask)
    table.add_row("drafter layers", f"{spec.num_layers} x hidden {spec.hidden_size}, heads {spec.num_attention_heads}/{spec.num_key_value_heads} kv, head_dim {spec.head_dim}")
    for index, layer in enumerate(spec.layers):
        window = f"window {layer.window}" if layer.window else "no window"
        causal = "causal in block" if layer.causal_in_block else "bidirectional in block"
        table.add_row(f"  layer {index}", f"{layer.kind} attention, {window}, {causal}")
    table.add_row("in-block causality from", spec.causality_source)
    table.add_row("context mask", "p < anchor (strict: the anchor's hidden state is never context)")
    table.add_row("RoPE", ", ".join(f"{k}={v}" for k, v in spec.rope.items()))
    table.add_row("embedding", f"{spec.embedding_source}'s table")
    table.add_row("lm_head", f"{spec.lm_head_source}'s" + (f", reduced draft vocab {spec.draft_vocab_size} via d2t" if spec.has_d2t else ""))
    if spec.verifier:
        table.add_row("recorded verifier", spec.verifier)
    params = result.parameters
    table.add_row("parameters", f"{params['body']:,} body" + "".join(
        f" + {params[k]:,} {k}" for k in ("embedding", "lm_head") if params[k]))
    console.print(table)

    checks = Table(title="Validation", header_style="bold")
    checks.add_column("check")
    checks.add_column("result")
    checks.add_column("detail", overflow="fold")
    for check in result.checks:
        checks.add_row(check.name, _yes(check.ok), check.detail)
    console.print(checks)
