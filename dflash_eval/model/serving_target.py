"""The serving target (`--serving-target PATH`): a second copy of the target, quantised or otherwise changed, that
the drafters are served with. Loaded as transformers loads it and checked against the main target before it runs.

- A model folder (safetensors; e.g. weights rounded to fp8 or int4 and saved dequantised): `load_target`, as the
  main target.
- A GGUF file (llama.cpp's format): transformers' own GGUF loader (`from_pretrained(folder, gguf_file=...)`),
  which dequantises every tensor on the CPU into the run's dtype; the `gguf` package must be installed. The
  head size is read from the file's `{arch}.attention.key_length` when it has one (llama.cpp's converter
  writes it; transformers' qwen3 mapping reads no head size and would assume 128).

Either way the text is the main target's: its tokenizer and its stop ids (generation config) are used for both,
so the two targets are compared on the same token ids. A copy with another vocabulary, hidden size or layer
count is refused by name (the taps would mean other layers).
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import torch

from ..core.errors import InputError
from ..formats.validation import TargetInfo
from .target import Target, load_target, resolve_device, resolve_dtype


def is_gguf(path: str | Path) -> bool:
    return str(path).lower().endswith(".gguf")


def _gguf_head_dim(file: Path) -> int | None:
    from gguf import GGUFReader

    reader = GGUFReader(str(file))
    arch_field = reader.fields.get("general.architecture")
    if arch_field is None:
        return None
    arch = bytes(arch_field.parts[arch_field.data[0]]).decode()
    field = reader.fields.get(f"{arch}.attention.key_length")
    return int(field.parts[field.data[0]][0]) if field is not None else None


def _gguf_value(reader, key: str):
    field = reader.fields.get(key)
    if field is None:
        return None
    value = field.parts[field.data[0]]
    return bytes(value).decode() if field.types and field.types[0].name == "STRING" else value[0]


def copy_sizes(path: str | Path) -> tuple[str, int, int, int]:
    """(model type, decoder layers, hidden size, vocabulary) of the serving target, read without loading it:
    its config.json, or a GGUF's metadata (`{arch}.block_count`, `embedding_length`, the token table's rows)."""
    file = Path(path)
    if not is_gguf(file):
        from ..core.errors import read_json_object

        config = read_json_object(file / "config.json", missing="not a model folder: no config.json")
        text = config.get("text_config") or config
        try:
            return (str(config.get("model_type", "")), int(text["num_hidden_layers"]), int(text["hidden_size"]),
                    int(text["vocab_size"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(file / "config.json", f"--serving-target: config key {exc} missing or not a number") from None
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(file))
        arch = _gguf_value(reader, "general.architecture")
        table = next(t for t in reader.tensors if t.name == "token_embd.weight")
        return (str(arch), int(_gguf_value(reader, f"{arch}.block_count")),
                int(_gguf_value(reader, f"{arch}.embedding_length")), int(table.shape[-1]))
    except (StopIteration, TypeError, ValueError, KeyError, IndexError) as exc:
        raise InputError(file, f"--serving-target: not a readable GGUF model ({type(exc).__name__})") from None


def check_copy(path: str | Path, model_type: str, info: TargetInfo) -> None:
    """Refused by name before anything runs: a serving target of another architecture, vocabulary, hidden size
    or layer count than the target's (the drafters' taps and ids would mean other things)."""
    kind, layers, hidden, vocab = copy_sizes(path)
    for what, ours, theirs in (("model type", model_type, kind), ("decoder layers", info.num_layers, layers),
                               ("hidden size", info.hidden_size, hidden), ("vocabulary", info.vocab_size, vocab)):
        if ours != theirs:
            raise InputError(path, f"--serving-target has {what} {theirs!r}, the target {ours!r}: not a copy of the "
                                   "target (the drafters' taps and ids would mean other things)")


def file_sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _load_gguf(file: Path, main: Target, device: str, dtype: str) -> Target:
    from transformers import AutoConfig, AutoModelForCausalLM

    from .kernels import decoder_layers

    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    try:
        config = AutoConfig.from_pretrained(str(file.parent), gguf_file=file.name, local_files_only=True)
        head_dim = _gguf_head_dim(file)
        if head_dim is not None:
            config.head_dim = head_dim
        model = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name, config=config,
                                                     dtype=torch_dtype, local_files_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise InputError(file, f"--serving-target: transformers cannot load this GGUF: {str(exc).splitlines()[0]}") from None
    model.to(dev).eval().requires_grad_(False)
    text = getattr(model.config, "text_config", None) or model.config
    info = TargetInfo(str(file), int(text.num_hidden_layers), int(text.hidden_size),
                      model.get_input_embeddings().weight.shape[0])
    target = Target(model=model, tokenizer=main.tokenizer, name=str(file), path=file, device=dev, dtype=torch_dtype,
                    info=info, layers=decoder_layers(model))
    target._fingerprint = file_sha256(file)
    return target


def load_serving_target(path: str, main: Target, *, device: str, dtype: str,
                        allow_accelerated_on_cpu: bool = False) -> Target:
    """The serving target, with the main target's tokenizer and stop ids (module docstring)."""
    file = Path(path)
    target = (_load_gguf(file, main, device, dtype) if is_gguf(file) else
              load_target(path, device=device, dtype=dtype, allow_accelerated_on_cpu=allow_accelerated_on_cpu))
    for what, ours, theirs in (("vocabulary", main.info.vocab_size, target.info.vocab_size),
                               ("hidden size", main.info.hidden_size, target.info.hidden_size),
                               ("decoder layers", main.info.num_layers, target.info.num_layers)):
        if ours != theirs:
            raise InputError(file, f"--serving-target has {what} {theirs}, the target {ours}: not a copy of the "
                                   "target (the drafters' taps and ids would mean other things)")
    target.tokenizer = main.tokenizer
    target.model.generation_config = copy.deepcopy(main.model.generation_config)
    return target


def serving_target_identity(target: Target) -> dict:
    """What the report records of the serving target: path, kind, content digest, and a rounded copy's
    `quantisation.json` (testing/quantised.py) or a GGUF's tensor types when there is one."""
    path = Path(target.path)
    out: dict = {"path": str(path), "kind": "gguf" if is_gguf(path) else "folder", "fingerprint": target.fingerprint(),
                 "dtype": str(target.dtype).removeprefix("torch.")}
    if is_gguf(path):
        from gguf import GGUFReader

        kinds: dict[str, int] = {}
        for tensor in GGUFReader(str(path)).tensors:
            kinds[tensor.tensor_type.name] = kinds.get(tensor.tensor_type.name, 0) + 1
        out["tensor_types"] = kinds
    elif (path / "quantisation.json").is_file():
        import json

        recorded = json.loads((path / "quantisation.json").read_text())
        out["quantisation"] = {"scheme": recorded.get("scheme"), "rule": recorded.get("rule"),
                               "weights": len(recorded.get("weights") or [])}
    return out


def argmax_flips(greedy_a: torch.Tensor, greedy_b: torch.Tensor, prompt_len: int, length: int) -> tuple[int, int]:
    """(positions compared, positions where B's argmax differs from A's): the continuation's positions
    prompt_len - 1 .. length - 2 (each predicts a continuation token), both teacher-forced on the same text."""
    a, b = greedy_a[prompt_len - 1: length - 1].cpu(), greedy_b[prompt_len - 1: length - 1].cpu()
    return int(a.numel()), int((a != b).sum())
