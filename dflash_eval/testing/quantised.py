"""Real quantised copies of a target, for `--serving-target` (commands/serving_target.py) in tests, benchmarks
and the demo's figures: what a team serves after evaluating against the full-precision target.

Two ways, both real formats, never a mock:
- `write_gguf_copy`: the dense Qwen3 target as a GGUF file written with the `gguf` package (llama.cpp's own
  writer: `GGUFWriter`, its tensor names from `get_tensor_name_map`, its quantisers `gguf.quants.quantize`),
  Q8_0 or Q4_0 for every 2-D weight and F32 for the norms, as llama.cpp's `convert_hf_to_gguf.py` leaves them;
  transformers loads it back through its own GGUF loader (`from_pretrained(..., gguf_file=...)`), which
  dequantises on the CPU. transformers' loader reads no hybrid (Gated-DeltaNet) architecture, so this copy is
  for the dense test bed.
- `write_rounded_copy`: every 2-D weight of the decoder layers rounded to a real low-precision format and saved
  dequantised as an ordinary checkpoint transformers loads (any architecture, the demo's hybrid target too):
  `fp8_e4m3` (torch.float8_e4m3fn with a per-output-channel scale amax / 448, what FP8 weight-only serving
  multiplies with) or `int4` (symmetric round-to-nearest in groups of 32 along the input, scale amax / 7, the
  w4a16 layout GPTQ/AWQ-style kernels dequantise). Embeddings, lm_head and norms stay as they were (the usual
  serving recipe). `quantisation.json` beside the weights records the scheme.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

GGUF_TYPES = ("Q8_0", "Q4_0")
ROUNDINGS = ("fp8_e4m3", "int4")
INT4_GROUP = 32
FP8_MAX = 448.0  # the largest finite float8_e4m3fn


def _state(target_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for file in sorted(Path(target_dir).glob("*.safetensors")):
        state.update(load_file(str(file)))
    return state


def round_fp8(weight: torch.Tensor) -> torch.Tensor:
    """Per output channel: scale = amax / 448, w8 = (w / scale) as float8_e4m3fn, back to w8 x scale."""
    w = weight.float()
    scale = (w.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp_min(1e-12)
    return ((w / scale).to(torch.float8_e4m3fn).float() * scale).to(weight.dtype)


def round_int4(weight: torch.Tensor, group: int = INT4_GROUP) -> torch.Tensor:
    """Symmetric int4 in groups of `group` input columns: scale = amax / 7, q = round(w / scale) in -8..7."""
    w = weight.float()
    rows, cols = w.shape
    if cols % group:
        raise ValueError(f"int4 groups of {group} need a multiple of {group} input columns, got {cols}")
    g = w.view(rows, cols // group, group)
    scale = (g.abs().amax(dim=-1, keepdim=True) / 7).clamp_min(1e-12)
    q = torch.round(g / scale).clamp(-8, 7)
    return (q * scale).view(rows, cols).to(weight.dtype)


def quantised_names(state: dict[str, torch.Tensor]) -> list[str]:
    """The weights a weight-only scheme quantises: the 2-D matrices of the decoder layers."""
    return sorted(n for n, t in state.items() if t.ndim == 2 and ".layers." in f".{n}" and t.is_floating_point())


def write_rounded_copy(target_dir: str | Path, out_dir: str | Path, scheme: str = "fp8_e4m3") -> Path:
    """The target's folder copied, its decoder matrices rounded by `scheme` (module docstring)."""
    from safetensors.torch import save_file

    if scheme not in ROUNDINGS:
        raise ValueError(f"scheme {scheme!r}: one of {', '.join(ROUNDINGS)}")
    target_dir, out = Path(target_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for file in target_dir.iterdir():
        if file.is_file() and not file.name.endswith(".safetensors") and file.name != "model.safetensors.index.json":
            shutil.copy2(file, out / file.name)
    state = _state(target_dir)
    names = quantised_names(state)
    rounder = round_fp8 if scheme == "fp8_e4m3" else round_int4
    rounded = {n: (rounder(t) if n in names else t).contiguous() for n, t in state.items()}
    save_file(rounded, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "quantisation.json").write_text(json.dumps({
        "scheme": scheme, "weights": names,
        "rule": ("per output channel scale amax / 448, float8_e4m3fn" if scheme == "fp8_e4m3"
                 else f"symmetric int4, groups of {INT4_GROUP} input columns, scale amax / 7")}, indent=1) + "\n")
    return out


def write_gguf_copy(target_dir: str | Path, out_file: str | Path, qtype: str = "Q8_0") -> Path:
    """A dense Qwen3 target as llama.cpp's GGUF (module docstring): metadata under llama.cpp's qwen3 keys,
    tensors under its names, 2-D weights quantised to `qtype`, 1-D (norms) F32. No tokenizer is written: the
    serving target is always read with the main target's tokenizer."""
    import gguf
    import numpy as np

    if qtype not in GGUF_TYPES:
        raise ValueError(f"qtype {qtype!r}: one of {', '.join(GGUF_TYPES)}")
    config = json.loads((Path(target_dir) / "config.json").read_text())
    if config.get("model_type") != "qwen3":
        raise ValueError("transformers' GGUF loader reads dense qwen3 here; use write_rounded_copy for this target")
    layers = config["num_hidden_layers"]
    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.QWEN3]
    writer = gguf.GGUFWriter(str(out), arch)
    writer.add_name(Path(target_dir).name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_block_count(layers)
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    writer.add_key_length(head_dim)  # convert_hf_to_gguf.py writes both for Qwen3
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    rope = config.get("rope_parameters") or {}
    writer.add_rope_freq_base(float(rope.get("rope_theta", config.get("rope_theta", 10000.0))))
    writer.add_vocab_size(config["vocab_size"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, layers)
    kind = getattr(gguf.GGMLQuantizationType, qtype)
    for name, tensor in sorted(_state(Path(target_dir)).items()):
        mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if mapped is None:
            raise ValueError(f"no GGUF name for {name}")
        data = tensor.float().numpy()
        if data.ndim == 2:
            packed = gguf.quants.quantize(data, kind)
            writer.add_tensor(mapped, packed, raw_shape=packed.shape, raw_dtype=kind)
        else:
            writer.add_tensor(mapped, data.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
