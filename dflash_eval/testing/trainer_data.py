"""Training-data folders written as each trainer writes them, from a tiny test target's real taps, with the
skews trained-taps must name injected on request. Each writer follows its trainer's own code (cited), and the
tests read the bytes back with the trainers' own readers where they import (speculators, hs_connectors,
SpecForge):

- speculators 0.9 + vLLM: a `datasets.save_to_disk` folder (int64 input_ids, loss_mask, seq_len; datasets'
  own writer) and `hidden_states/hs_{i}.safetensors` as vLLM's ExampleHiddenStatesConnector saves them
  (`hidden_states` [T, L, H] bf16, the taps ascending then the last layer before the final norm; `token_ids`
  int64; no metadata), or as hs_connectors' FP8HiddenStatesConnector (F8_E4M3 + `hidden_states_scales`);
- SpecForge 0.2.0 (scripts/prepare_hidden_states.py HiddenStatesGenerator): `rows_{g}-{g+2000}/data_{i}.ckpt`
  (`.ckpt.gz` with --compress), torch.save of {input_ids, loss_mask, hidden_states [1, N, n*H]}, rows of a batch
  right-padded with token 0 / mask 0;
- DeepSpec (deepspec/data/target_cache_dataset.py): manifest.json, samples.idx of 56-byte records, shard bytes;
- speculators < 0.6: data_{i}.pt dicts and data_config.json (DataGenerationConfig).
"""

from __future__ import annotations

import gzip
import json
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from ..model.target import Target, capture_taps


@dataclass
class Sample:
    ids: torch.Tensor  # [T] int64
    loss_mask: torch.Tensor  # [T] int64: 0 on the prompt, 1 on the continuation


def samples_from(sequences: list[tuple[torch.Tensor, int]]) -> list[Sample]:
    """train.greedy_sequences' (ids, prompt length) pairs as training samples: the continuation supervised."""
    out = []
    for ids, prompt_len in sequences:
        mask = torch.zeros(ids.shape[0], dtype=torch.long)
        mask[prompt_len:] = 1
        out.append(Sample(ids.clone(), mask))
    return out


def states(target: Target, sample: Sample, taps: list[int], *, shift: int = 0, teacher: str = "pre",
           zero_slot: int | None = None, nan_slot: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(slots [T, n, H] for the ascending `taps`, teacher [T, H]) from one real pass of `target`, skewed:
    `shift` stores layer t + shift where t is recorded (t + shift = -1: the embeddings); `teacher` "pre" (the last
    layer's output, as vLLM hands it over) or "post" (after the final norm); a slot zeroed, or NaN in places."""
    n = target.info.num_layers
    wanted = sorted({t + shift for t in taps if t + shift >= 0} | {n - 1})
    capture = capture_taps(target, sample.ids, wanted, keep_hidden=True)
    per = dict(zip(wanted, capture.taps.split(target.info.hidden_size, dim=-1)))
    with torch.inference_mode():
        per[-1] = target.embed_tokens(sample.ids.to(target.device))
    slots = torch.stack([per[t + shift] for t in sorted(taps)], dim=1).clone()
    last = (per[n - 1] if teacher == "pre" else capture.hidden).clone()
    if zero_slot is not None:
        slots[:, zero_slot] = 0
    if nan_slot is not None:
        slots[1::3, nan_slot, :4] = float("nan")
    return slots, last


def write_speculators(out: Path, samples: list[Sample], slots: list, teachers: list, *, dtype=torch.bfloat16,
                      fp8: bool = False, include_last: bool = True, other_tokens: tuple[int, ...] = ()) -> Path:
    """speculators' data folder: datasets' save_to_disk rows + vLLM's hidden-state files (row i <-> hs_i)."""
    import datasets
    from safetensors.torch import save_file

    from ..model.training_taps import quantize_fp8

    features = datasets.Features({"input_ids": datasets.Sequence(datasets.Value("int64")),
                                  "loss_mask": datasets.Sequence(datasets.Value("int64")),
                                  "seq_len": datasets.Value("int64")})
    rows = {"input_ids": [s.ids.tolist() for s in samples], "loss_mask": [s.loss_mask.tolist() for s in samples],
            "seq_len": [len(s.ids) for s in samples]}
    dataset = datasets.Dataset.from_dict(rows, features=features)
    dataset.set_format(type="torch")  # speculators.data_generation.preprocessing: set_format(type="torch")
    dataset.save_to_disk(str(out))
    folder = Path(out) / "hidden_states"
    folder.mkdir(parents=True, exist_ok=True)
    for i, (sample, slot, teacher) in enumerate(zip(samples, slots, teachers)):
        hidden = torch.cat([slot, teacher[:, None]], dim=1) if include_last else slot
        hidden = hidden.to(dtype).contiguous()
        token_ids = sample.ids.clone()
        if i in other_tokens:  # a file of another row (a re-preprocessed dataset, a resumed extraction)
            token_ids[len(token_ids) // 2] = (token_ids[len(token_ids) // 2] + 1) % 100
        tensors = {"hidden_states": hidden, "token_ids": token_ids.to(torch.int64).contiguous()}
        if fp8:
            quantized, scales = quantize_fp8(hidden)
            tensors.update(hidden_states=quantized.contiguous(), hidden_states_scales=scales.contiguous())
        save_file(tensors, str(folder / f"hs_{i}.safetensors"))
    return Path(out)


def write_specforge(out: Path, samples: list[Sample], slots: list, *, compress: bool = False, batch: int = 1,
                    group: int = 2000) -> Path:
    """SpecForge's prepare_hidden_states output: one torch.save per sample, grouped in rows_G-G+group/; with
    `batch` > 1 the samples of each batch are right-padded to its longest (token 0, mask 0, zero states)."""
    out = Path(out)
    for start in range(0, len(samples), batch):
        chunk = list(range(start, min(start + batch, len(samples))))
        width = max(len(samples[i].ids) for i in chunk)
        for i in chunk:
            pad = width - len(samples[i].ids)
            hidden = slots[i].flatten(1).to(torch.bfloat16)
            record = {"input_ids": torch.cat([samples[i].ids, torch.zeros(pad, dtype=torch.long)]),
                      "loss_mask": torch.cat([samples[i].loss_mask, torch.zeros(pad, dtype=torch.long)]),
                      "hidden_states": torch.cat([hidden, hidden.new_zeros(pad, hidden.shape[1])])[None]}
            g = (i // group) * group
            folder = out / f"rows_{g}-{g + group}"
            folder.mkdir(parents=True, exist_ok=True)
            if compress:  # prepare_hidden_states --compress: gzip.open(..., compresslevel=6) around torch.save
                with gzip.open(folder / f"data_{i}.ckpt.gz", "wb", compresslevel=6) as handle:
                    torch.save(record, handle)
            else:
                torch.save(record, folder / f"data_{i}.ckpt")
    return out


def write_deepspec(out: Path, samples: list[Sample], slots: list, teachers: list, layer_ids: list[int],
                   target_name: str) -> Path:
    """DeepSpec's target cache, one shard: build_target_cache_sample_bytes' arrays in LocalTargetCacheWriter's
    order (ids int32, attention mask, loss mask uint8, hidden bf16 bits, last hidden), pack_index_record's records,
    build_target_cache_manifest's manifest (json.dump indent 2, sorted keys)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    record = struct.Struct("<QIIQQQQQ")
    shard, index, offset = bytearray(), bytearray(), 0
    for i, (sample, slot, teacher) in enumerate(zip(samples, slots, teachers)):
        T = len(sample.ids)
        arrays = [sample.ids.to(torch.int32).numpy().tobytes(), torch.ones(T, dtype=torch.uint8).numpy().tobytes(),
                  sample.loss_mask.to(torch.uint8).numpy().tobytes(),
                  slot.flatten(1).to(torch.bfloat16).contiguous().view(torch.uint16).numpy().tobytes(),
                  teacher.to(torch.bfloat16).contiguous().view(torch.uint16).numpy().tobytes()]
        offsets = []
        for data in arrays:
            offsets.append(offset)
            shard += data
            offset += len(data)
        index += record.pack(i, 0, T, *offsets)
    (out / "shard-00000.bin").write_bytes(bytes(shard))
    (out / "samples.idx").write_bytes(bytes(index))
    manifest = {"version": 2, "num_samples": len(samples), "num_shards": 1, "target_layer_ids": list(layer_ids),
                "hidden_dtype": "bfloat16", "token_dtype": "int32", "mask_dtype": "uint8",
                "index_record_size": record.size, "hidden_size": int(slots[0].shape[-1]),
                "shards": [{"shard_id": 0, "file_name": "shard-00000.bin"}],
                "target_model_name_or_path": target_name, "source_jsonl_paths": ["train.jsonl"], "min_loss_tokens": 2}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return out


def write_legacy(out: Path, samples: list[Sample], slots: list, teachers: list, layer_ids: list[int],
                 target_name: str) -> Path:
    """speculators < 0.6: data_{i}.pt = {input_ids, hidden_states: [T, H] per layer (taps, then the last),
    loss_mask} and data_config.json (config_generator.DataGenerationConfig.to_dict's fields that matter)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for i, (sample, slot, teacher) in enumerate(zip(samples, slots, teachers)):
        layers = [slot[:, k].to(torch.bfloat16).clone() for k in range(slot.shape[1])] + [teacher.to(torch.bfloat16)]
        torch.save({"input_ids": sample.ids, "hidden_states": layers, "loss_mask": sample.loss_mask}, out / f"data_{i}.pt")
    config = {"version": "2.0", "speculators_version": "0.3.0",
              "model": {"target_model_path": target_name, "tensor_parallel_size": 1, "gpu_memory_utilization": 0.8,
                        "hidden_size": int(slots[0].shape[-1])},
              "data": {"train_data_path": "sharegpt", "seq_length": 2048, "max_samples": None,
                       "num_samples": len(samples), "seed": 0},
              "hidden_states": {"layer_ids": list(layer_ids), "description": "Layers selected for EAGLE3 fusion and target logits"},
              "format": {"file_pattern": "data_{idx}.pt", "schema": {}}}
    (out / "data_config.json").write_text(json.dumps(config, indent=2))
    return out


def main(argv: list[str] | None = None) -> None:
    """`python -m dflash_eval.testing.trainer_data OUT --target DIR --taps 1,2,3`: a DeepSpec target cache (the
    format the base install reads: no pyarrow) of the target's own greedy continuations of the demo prompts,
    the taps in z-lab numbering, no skew: what `dflash-eval trained-taps OUT` reads (scripts/smoke.sh)."""
    import argparse

    from ..demo.train import greedy_sequences
    from ..model.target import load_target
    from ..pipeline.prompts import DEMO_PROMPTS

    parser = argparse.ArgumentParser(prog="python -m dflash_eval.testing.trainer_data", description=main.__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--target", required=True)
    parser.add_argument("--taps", required=True, help="target layers in z-lab numbering, e.g. 1,2,3")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args(argv)
    taps = sorted(int(t) for t in args.taps.split(","))
    target = load_target(args.target, device="cpu", dtype="float32")
    samples = samples_from(greedy_sequences(target, list(DEMO_PROMPTS)[:args.samples], args.max_new_tokens))
    pairs = [states(target, s, taps, teacher="post") for s in samples]
    write_deepspec(args.out, samples, [p[0] for p in pairs], [p[1] for p in pairs], taps, str(args.target))
    print(f"{args.out}: {len(samples)} samples, taps {taps}")


if __name__ == "__main__":
    main()
