"""The checks engines added after their own bugs, as rules over numbers already read: pure functions, no torch.
Each returns (ok, detail); formats/defect_checks.py (from a config) and model/probe_checks.py (from tensors) turn
them into `inspect`'s checks, and the doctor's static checks and variants read the same rules (one home each).

| rule | the bug behind it | fires when |
|---|---|---|
| `mask_row` | sgl-project/sglang #27924: a MASK embedding row near zero or untrained (tau 1.42 vs 6.30) | the row is zero, its norm is below a tenth of the table's median row norm, or two or more other rows are identical to it (a copy of an initialisation) |
| `mask_row_moved` | the same, with the table it was initialised from (`inspect --base`) | the row equals the base's row exactly: never trained |
| `final_layer_tap` | DeepSpec `assert_no_final_target_layer`: HF `hidden_states[-1]` is after the final norm, the training cache stored the raw output | a tap is the target's last layer |
| `draft_length` | vllm-project/vllm #41834: num_speculative_tokens past the trained block collapses every position | k > the drafts a block holds (B - 1) |
| `block_levels` | raullenchai/Rapid-MLX #2195, InternLM/lmdeploy #4991: block_size read from the wrong level of the config | block_size is set at two levels with different values |
| `fc_overflow` | InternLM/lmdeploy #4991: the fc fusion overflowing in fp16 | a value of fc(taps) is past the dtype's largest finite value (or not finite) |
| `serving_window` | Luce-Org/lucebox #740: a 4096-row draft window on a drafter configured for 40960 (accept ~0 past 4K) | the window a server gives the drafter is shorter than the one the checkpoint names |
"""

from __future__ import annotations

MASK_NORM_FLOOR = 0.1  # the row's norm against the median row norm below which it looks untrained
FP16_MAX = 65504.0
BF16_MAX = 3.3895313892515355e38
FINITE_MAX = {"float16": FP16_MAX, "bfloat16": BF16_MAX, "float32": 3.4028234663852886e38}


def mask_row(norm: float, median: float, duplicates: int) -> tuple[bool, str]:
    """The MASK row of the table the block embeddings come from: present, non-zero, not an untrained row."""
    if norm == 0:
        return False, "the MASK embedding row is all zero"
    if norm < MASK_NORM_FLOOR * median or duplicates >= 2:
        return False, (f"the MASK row looks untrained (norm {norm:.3g} vs median {median:.3g}, {duplicates} identical "
                       "rows; sgl-project/sglang #27924: tau 1.42 vs 6.30)")
    return True, f"norm {norm:.3g} (median row {median:.3g}), unique"


def mask_row_moved(max_abs_change: float, base_norm: float) -> tuple[bool, str]:
    """The MASK row against the row of the table it was initialised from."""
    if max_abs_change == 0:
        return False, ("identical to the base checkpoint's row: never trained from its initialisation "
                       "(sgl-project/sglang #27924)")
    return True, f"moved from the base's row (largest change {max_abs_change:.3g}; base row norm {base_norm:.3g})"


def final_layer_tap(taps: tuple[int, ...], num_layers: int | None) -> tuple[bool, str]:
    """No tap on the target's final layer (z-lab numbering: output of layer t; the last is num_layers - 1)."""
    if num_layers is None:
        return True, "the target's layer count is unknown (give --target)"
    last = num_layers - 1
    if last in taps:
        return False, (f"tap {last} is the target's final layer: an engine that reads HF output_hidden_states[-1] feeds "
                       "the state after the final norm, a training cache the raw layer output (DeepSpec refuses it: "
                       "assert_no_final_target_layer)")
    return True, f"taps {list(taps)} end before the final layer {last}"


def draft_length(k: int, drafts_per_block: int, where: str) -> tuple[bool, str]:
    """A draft length k within the drafts the trained block holds."""
    if k > drafts_per_block:
        return False, (f"{where} k = {k} is past the {drafts_per_block} drafts the trained block holds: a server "
                       "drafting that many fills slots the drafter never learned, and every position collapses "
                       "(vllm-project/vllm #41834)")
    return True, f"{where} k = {k} <= {drafts_per_block} drafts per block"


def block_levels(values: dict[str, int], read: str) -> tuple[bool, str]:
    """block_size at one level, or the same value at every level it is set. `values`: where -> value; `read`: the
    level dflash-eval reads (z-lab's `_draft_value`: dflash_config first)."""
    distinct = sorted(set(values.values()))
    listed = ", ".join(f"{k}={v}" for k, v in values.items())
    if len(distinct) > 1:
        return False, (f"block_size set twice with different values ({listed}); read here: {read}={values[read]}; an "
                       "engine reading the other level drafts another block (raullenchai/Rapid-MLX #2195, "
                       "InternLM/lmdeploy #4991)")
    return True, listed or "block_size at one level"


def fc_overflow(max_abs: float, overflowed: int, values: int, dtype: str) -> tuple[bool, str]:
    """fc(taps) within the dtype's range on a forward at that dtype."""
    limit = FINITE_MAX.get(dtype)
    margin = f"; largest |fc| {max_abs:.4g} (fp32), the {dtype} limit {limit:.5g}" if limit else ""
    if overflowed:
        return False, (f"{overflowed} of {values} fc outputs overflow {dtype} (InternLM/lmdeploy #4991: the context "
                       f"turns to inf/NaN after hidden_norm){margin}")
    return True, f"0 of {values} fc outputs overflow {dtype}{margin}"


def serving_window(window: int | None, trained: int | None, source: str) -> tuple[bool, str]:
    """The context rows a server lets the drafter see against the window the checkpoint names."""
    if window is None:
        return True, "no serving window given (the drafter sees its whole context)"
    if trained is not None and window < trained:
        return False, (f"a serving window of {window} rows is shorter than the {trained} the checkpoint names "
                       f"({source}): past {window} tokens the drafter sees a suffix only (Luce-Org/lucebox #740: "
                       "4096 vs 40960, accept ~0 past 4K)")
    return True, f"serving window {window} >= {trained} ({source})" if trained else f"serving window {window}"
