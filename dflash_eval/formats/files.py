"""A checkpoint's files, read without loading a tensor: where a folder's weights are (one file, an index's shards,
loose files), each safetensors header checked against the bytes the file holds, the content fingerprint,
and a name resolved to a local folder or the offline Hugging Face cache."""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import InputError, read_json_object


CONFIG_NAME = "config.json"


SINGLE_WEIGHTS = "model.safetensors"


INDEX_WEIGHTS = "model.safetensors.index.json"


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: str


def read_safetensors_header(path: Path) -> dict[str, TensorMeta]:
    """Parse a safetensors header and check that the file holds every byte the header promises."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise InputError(path, "corrupted safetensors file: shorter than its 8-byte header length")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > size - 8:
                raise InputError(path, f"corrupted or truncated safetensors file: header claims {header_len} bytes, file has {size}")
            header = json.loads(handle.read(header_len))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(path, f"corrupted safetensors file: unreadable header ({exc.__class__.__name__})") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    if not isinstance(header, dict):
        raise InputError(path, "corrupted safetensors file: header is not a JSON object")
    tensors: dict[str, TensorMeta] = {}
    data_end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            tensors[name] = TensorMeta(tuple(int(d) for d in entry["shape"]), str(entry["dtype"]))
            data_end = max(data_end, int(entry["data_offsets"][1]))
        except (KeyError, TypeError, ValueError, IndexError):
            raise InputError(path, f"corrupted safetensors file: bad header entry for {name!r}") from None
    if 8 + header_len + data_end > size:
        raise InputError(path, f"truncated safetensors file: needs {8 + header_len + data_end} bytes, has {size}")
    return tensors


def weight_files(directory: str | Path) -> list[Path]:
    """The safetensors files of a checkpoint: one file, or the shards listed by the index."""
    directory = Path(directory)
    single = directory / SINGLE_WEIGHTS
    index = directory / INDEX_WEIGHTS
    if single.is_file():
        return [single]
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise InputError(index, "not a valid safetensors index (no weight_map)") from None
        files = sorted({directory / shard for shard in weight_map.values()})
        for file in files:
            if not file.is_file():
                raise InputError(file, "shard listed in model.safetensors.index.json is missing")
        return files
    loose = sorted(directory.glob("*.safetensors"))
    if loose:
        return loose
    if any(directory.glob("*.bin")) or any(directory.glob("*.pt")):
        raise InputError(directory, "only pickle weights (.bin/.pt) found; dflash-eval reads safetensors only")
    raise InputError(directory, "no safetensors weights found (expected model.safetensors)")


def read_weight_metadata(directory: Path) -> tuple[dict[str, TensorMeta], dict[str, Path]]:
    metas: dict[str, TensorMeta] = {}
    owners: dict[str, Path] = {}
    for file in weight_files(directory):
        for name, meta in read_safetensors_header(file).items():
            metas[name] = meta
            owners[name] = file
    return metas, owners


def read_config(directory: Path) -> dict[str, Any]:
    if not directory.is_dir():
        raise InputError(directory, "not a directory (expected a drafter checkpoint folder with config.json)")
    if not (directory / CONFIG_NAME).is_file():
        raise InputError(directory, "not a DFlash checkpoint: no config.json")
    return read_json_object(directory / CONFIG_NAME, missing="not a DFlash checkpoint: no config.json")


def checkpoint_fingerprint(directory: str | Path) -> str:
    """sha256 over the config and weight files (streamed), for provenance and caching."""
    import hashlib

    directory = Path(directory)
    digest = hashlib.sha256()
    for file in [directory / CONFIG_NAME, *weight_files(directory)]:
        digest.update(file.name.encode())
        with file.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def resolve_local_or_cached(name_or_path: str) -> Path:
    """A local folder, or a Hugging Face repo id found in the local cache (never downloads here)."""
    path = Path(os.path.expanduser(name_or_path))
    if path.exists():
        return path
    if name_or_path.count("/") == 1 and not name_or_path.startswith((".", "/")):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(name_or_path, local_files_only=True))
        except Exception:  # noqa: BLE001 - any cache miss becomes one clear message
            raise InputError(name_or_path, "not a local folder and not found in the Hugging Face cache (offline lookup)") from None
    raise InputError(name_or_path, "no such file or directory")
