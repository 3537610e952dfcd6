"""One training sample's stored hidden states as tensors, laid out as its trainer feeds them to the drafter:
the fc input's slots (layers ascending, as every trainer concatenates them), the teacher where the format
keeps one, the token ids and the loss mask. Rules, each from the trainer's own reader:

- speculators 0.9 (speculators.train.data.ArrowDataset._get_raw_data): fc input = `hidden_states[:, :-1]`,
  teacher = `hidden_states[:, -1]` (the last layer's output *before* the final norm), loss_mask from the
  arrow row; a file whose token_ids differ from the row is skipped by the trainer (SampleUnavailable);
  fp8 files are dequantized as hs_connectors.fp8_utils.dequantize_fp8_tensor does: `fp8.to(bf16) * scale.to(bf16)`.
- SpecForge 0.2.0 (specforge.runtime.data_plane.feature_store.load_feature_file, dflash_family_data.
  normalize_offline_sample): `input_ids`, `loss_mask`, `hidden_states` [1, N, n_aux * H]; no teacher (DFlash
  trains on the data tokens); batches were right-padded with token 0 and mask 0, stripped here. Loaded with
  weights_only=True (SpecForge itself unpickles with weights_only=False).
- DeepSpec (deepspec.data.target_cache_dataset.CacheDataset.__getitem__): int32 ids, uint8 masks, bf16 bits.
- speculators < 0.6 (speculators 0.5.0 train.data.standardize_data_v1): a list of [T, H] per layer; the last
  is the teacher (pre-norm).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.errors import InputError
from ..formats.training_data import SampleRef, TrainingData


class SampleSkipped(Exception):
    """A sample the trainer itself would not have trained on (with the trainer's reason)."""


@dataclass
class StoredSample:
    ref: SampleRef
    input_ids: torch.Tensor  # [T] int64
    loss_mask: torch.Tensor  # [T] int64
    slots: torch.Tensor  # [T, n, H]: the fc input's n slots in stored order (fc input = slots.flatten(1))
    teacher: torch.Tensor | None  # [T, H] the stored last hidden state (TEACHER says which side of the norm)
    dtype: str  # as stored: BF16, F16, F32, F8_E4M3
    padding: int = 0  # trailing pad positions stripped (SpecForge)

    @property
    def fc_input(self) -> torch.Tensor:
        return self.slots.flatten(1)


_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.float8_e4m3fn: "F8_E4M3"}


def _dtype_name(tensor: torch.Tensor, file: Path) -> str:
    if tensor.dtype not in _DTYPES:
        raise InputError(file, f"hidden states are {str(tensor.dtype).removeprefix('torch.')}; expected bf16, fp16, "
                               "fp32 or fp8 (e4m3)")
    return _DTYPES[tensor.dtype]


def dequantize_fp8(fp8: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """hs_connectors.fp8_utils.dequantize_fp8_tensor with its default dtype: fp8.to(bf16) * scale.to(bf16)."""
    return fp8.to(torch.bfloat16) * scales.to(torch.bfloat16)


def quantize_fp8(hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """hs_connectors.fp8_utils.quantize_tensor_to_fp8: one fp32 scale per token over every other dimension,
    amax / 448 (clamped at 1e-12), values (x / scale) cast to e4m3. For the fp8 noise floor and the fixtures."""
    fp32 = hidden.float()
    amax = fp32.abs().amax(dim=tuple(range(1, fp32.dim())), keepdim=True)
    scale = (amax / torch.finfo(torch.float8_e4m3fn).max).clamp(min=1e-12)
    return (fp32 / scale).to(torch.float8_e4m3fn), scale


def _speculators(ref: SampleRef, lock_timeout: float) -> StoredSample:
    from safetensors.torch import load_file

    from ..core.errors import regular_file_present
    from ..formats.training_files import SCALES_KEY, hidden_state_file, wait_for_writer

    if not regular_file_present(ref.file, " (a hidden-state file)"):  # a FIFO or a link loop: refused by name
        raise SampleSkipped(f"{ref.file.name} is missing (not extracted yet)")
    wait_for_writer(ref.file, lock_timeout)
    hidden_state_file(ref.file)  # truncated or foreign: refused by name before safetensors reads it
    loaded = load_file(str(ref.file))
    ids = loaded["token_ids"]
    row = torch.tensor(ref.input_ids, dtype=torch.long)
    if not torch.equal(ids, row):
        where = next((i for i, (a, b) in enumerate(zip(ids.tolist(), row.tolist())) if a != b), min(len(ids), len(row)))
        raise SampleSkipped(f"{ref.file.name} holds other token ids than arrow row {ref.index} (first difference at "
                            f"position {where}); speculators' ArrowDataset skips it (SampleUnavailable)")
    hidden = loaded["hidden_states"]
    dtype = _dtype_name(hidden, ref.file)
    if SCALES_KEY in loaded:
        hidden = dequantize_fp8(hidden, loaded[SCALES_KEY])
    mask = torch.tensor(ref.loss_mask, dtype=torch.long)
    if mask.shape[0] != ids.shape[0]:
        raise InputError(ref.file, f"holds {ids.shape[0]} positions, its arrow row's loss_mask {mask.shape[0]}")
    return StoredSample(ref, ids, mask, hidden[:, :-1], hidden[:, -1], dtype)


def _torch_load(file: Path):
    from ..formats.training_files import torch_save_file

    kind = torch_save_file(file)
    try:
        if kind == "gzip":
            import gzip

            with gzip.open(file, "rb") as stream:
                data = stream.read()
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        return torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except (EOFError, OSError) as exc:
        raise InputError(file, f"is a truncated or damaged {kind} stream ({type(exc).__name__})") from None
    except Exception as exc:  # weights_only refuses anything but plain tensors and containers
        raise InputError(file, f"cannot be read as plain tensors with weights_only=True ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''})"[:300]) from None


def strip_padding(ids: torch.Tensor, mask: torch.Tensor, pad_id: int = 0) -> int:
    """Trailing positions that are padding: SpecForge pads a batch on the right with token 0 and mask 0
    (the collator's pad), so the stored row of a shorter sample ends with them. A real sequence ending in
    token 0 with mask 0 loses those positions too (they carry no loss either way)."""
    n = 0
    while n < ids.shape[0] and int(ids[-1 - n]) == pad_id and int(mask[-1 - n]) == 0:
        n += 1
    return n


def _specforge(ref: SampleRef, H: int) -> StoredSample:
    raw = _torch_load(ref.file)
    if not isinstance(raw, dict) or not {"input_ids", "loss_mask", "hidden_states"} <= raw.keys():
        keys = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise InputError(ref.file, f"is not a SpecForge DFlash feature file: holds {keys}, expected input_ids, "
                                   "loss_mask, hidden_states")
    hidden = raw["hidden_states"]
    if hidden.dim() == 3 and hidden.shape[0] == 1:
        hidden = hidden[0]
    ids, mask = raw["input_ids"].view(-1).long(), raw["loss_mask"].view(-1).long()
    if hidden.dim() != 2 or hidden.shape[0] != ids.shape[0] or mask.shape[0] != ids.shape[0]:
        raise InputError(ref.file, f"has hidden_states {list(raw['hidden_states'].shape)}, input_ids {list(ids.shape)}, "
                                   f"loss_mask {list(mask.shape)}: not one row per token")
    if hidden.shape[1] % H:
        raise InputError(ref.file, f"hidden_states are {hidden.shape[1]} wide, not a multiple of the target's hidden "
                                   f"size {H}")
    pad = strip_padding(ids, mask)
    T = ids.shape[0] - pad
    return StoredSample(ref, ids[:T], mask[:T], hidden[:T].view(T, -1, H), None, _dtype_name(hidden, ref.file), pad)


def _deepspec(ref: SampleRef, data: TrainingData) -> StoredSample:
    record, H = ref.record, data.hidden_size
    n = len(data.stored_layers)
    T = record.seq_len

    def read(offset: int, count: int, dtype: torch.dtype, size: int) -> torch.Tensor:
        with record.shard.open("rb") as handle:
            handle.seek(offset)
            raw = bytearray(handle.read(count * size))
        return torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)

    ids = read(record.input_ids, T, torch.int32, 4).long()
    mask = read(record.loss_mask, T, torch.uint8, 1).long()
    hidden = read(record.hidden, T * n * H, torch.int16, 2).view(torch.bfloat16).view(T, n, H)
    last = read(record.last_hidden, T * H, torch.int16, 2).view(torch.bfloat16).view(T, H)
    return StoredSample(ref, ids, mask, hidden, last, "BF16")


def _legacy(ref: SampleRef) -> StoredSample:
    raw = _torch_load(ref.file)
    layers = raw.get("hidden_states") if isinstance(raw, dict) else None
    if not isinstance(layers, (list, tuple)) or len(layers) < 2 or not {"input_ids", "loss_mask"} <= raw.keys():
        raise InputError(ref.file, "is not a speculators < 0.6 data file: expected input_ids, loss_mask and a list of "
                                   "hidden_states (the taps, then the last layer)")
    ids, mask = raw["input_ids"].view(-1).long(), raw["loss_mask"].view(-1).long()
    if any(t.dim() != 2 or t.shape[0] != ids.shape[0] for t in layers) or mask.shape[0] != ids.shape[0]:
        raise InputError(ref.file, "hidden_states entries are not [T, H] for the T input ids")
    return StoredSample(ref, ids, mask, torch.stack(list(layers[:-1]), dim=1), layers[-1],
                        _dtype_name(layers[0], ref.file))


def load_sample(data: TrainingData, ref: SampleRef, hidden_size: int, *, lock_timeout: float = 10.0) -> StoredSample:
    """One sample as its trainer reads it; raises SampleSkipped where the trainer would skip it too."""
    if data.format == "speculators":
        sample = _speculators(ref, lock_timeout)
    elif data.format == "specforge":
        sample = _specforge(ref, hidden_size)
    elif data.format == "deepspec":
        sample = _deepspec(ref, data)
    else:
        sample = _legacy(ref)
    if sample.slots.shape[-1] != hidden_size:
        raise InputError(ref.file, f"holds hidden states of width {sample.slots.shape[-1]}; the target's hidden size "
                                   f"is {hidden_size}: data of another target?")
    return sample
