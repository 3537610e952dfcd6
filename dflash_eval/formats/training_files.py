"""One training-data file, checked before any tensor is read: a hidden-state file still being written (its
`.lock` sidecar) is waited on or refused, a truncated or foreign file is refused by name, and DeepSpec's binary
index is parsed and bounds-checked. What each trainer writes (cited per function) is in docs/trained-taps.md.

Why here, without a tensor: a truncated file must be one line naming it (not a safetensors or pickle
traceback from deep inside a loader), and a file another process is still writing must never be read half way.
"""

from __future__ import annotations

import gzip
import os
import struct
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import InputError, regular_file_present
from .files import TensorMeta, read_safetensors_header

LOCK_TIMEOUT = 10.0  # seconds: hs_connectors.transfer.wait_for_lock's default


def wait_for_writer(file: Path, timeout: float = LOCK_TIMEOUT, poll: float = 0.1) -> None:
    """vLLM's ExampleHiddenStatesConnector holds an exclusive flock on `FILE.lock` while it writes FILE
    (hs_connectors.transfer._load_hs_file / wait_for_lock wait for it the same way). A lock that can be taken
    means the writer is done (a stale sidecar: read on, and leave it, this reader never changes the data); one
    still held after `timeout` seconds is refused by name. Nothing is deleted."""
    lock = Path(f"{file}.lock")
    if not lock.exists():
        return
    import fcntl

    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return  # the writer finished and removed it between the two calls
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise InputError(file, f"is still being written: its lock {lock.name} is held by another process "
                                           f"after {timeout:g} s; wait for the extraction to finish (or raise "
                                           "--lock-timeout)") from None
                time.sleep(poll)
    finally:
        os.close(fd)


# vLLM ExampleHiddenStatesConnector (bf16) and hs_connectors.fp8_hidden_states_connector.FP8HiddenStatesConnector
HS_DTYPES = ("BF16", "F16", "F32", "F8_E4M3")
SCALES_KEY = "hidden_states_scales"  # hs_connectors.fp8_utils.SCALES_KEY


def hidden_state_file(file: Path) -> dict[str, TensorMeta]:
    """A speculators hidden-state file `hs_{i}.safetensors`: `hidden_states` [T, L, H] (bf16, or F8_E4M3 with
    `hidden_states_scales` F32 [T, 1, 1]) and `token_ids` I64 [T], no metadata; anything else is foreign."""
    tensors = read_safetensors_header(file)  # truncated or corrupted: refused there, by name
    known = {"hidden_states", "token_ids", SCALES_KEY}
    missing = sorted({"hidden_states", "token_ids"} - tensors.keys())
    if missing or tensors.keys() - known:
        raise InputError(file, f"is not a vLLM hidden-state file: holds tensors {sorted(tensors)}, expected "
                               "hidden_states and token_ids (and hidden_states_scales for fp8)")
    hs, ids = tensors["hidden_states"], tensors["token_ids"]
    if hs.dtype not in HS_DTYPES or len(hs.shape) != 3:
        raise InputError(file, f"hidden_states is {hs.dtype} {list(hs.shape)}; expected [T, L, H] of {', '.join(HS_DTYPES)}")
    if ids.dtype != "I64" or ids.shape != hs.shape[:1]:
        raise InputError(file, f"token_ids is {ids.dtype} {list(ids.shape)}; expected I64 [{hs.shape[0]}] (one id per "
                               "hidden-state row)")
    fp8 = hs.dtype == "F8_E4M3"
    if fp8 != (SCALES_KEY in tensors):
        raise InputError(file, "fp8 hidden_states without hidden_states_scales (or scales beside non-fp8 states): "
                               "neither hs_connectors writer makes such a file")
    if fp8 and (tensors[SCALES_KEY].dtype != "F32" or tensors[SCALES_KEY].shape != (hs.shape[0], 1, 1)):
        raise InputError(file, f"hidden_states_scales is {tensors[SCALES_KEY].dtype} {list(tensors[SCALES_KEY].shape)}; "
                               f"hs_connectors writes F32 [{hs.shape[0]}, 1, 1] (one scale per token)")
    return tensors


def torch_save_file(file: Path) -> str:
    """A `torch.save` file (SpecForge `.ckpt`, plain or gzip-compressed `.ckpt.gz`; speculators' legacy
    `data_*.pt`): "zip" or "gzip". A legacy pickle-only file or a truncated zip (its central directory is at the
    end) is refused by name (a cut gzip stream by its reader); the tensors are read later with weights_only=True."""
    try:
        with file.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise InputError(file, f"cannot read: {exc.strerror}") from None
    if magic[:2] == b"\x1f\x8b":
        try:  # only the head here: the stream is decompressed once, by its reader (model/training_taps.py)
            with gzip.open(file, "rb") as stream:
                head = stream.read(4)
        except (OSError, EOFError) as exc:
            raise InputError(file, f"is a truncated or damaged gzip stream ({type(exc).__name__}); the writer was "
                                   "interrupted?") from None
        if head != b"PK\x03\x04":
            raise InputError(file, "is gzip, but not a compressed torch.save archive")
        return "gzip"
    if magic != b"PK\x03\x04":
        raise InputError(file, "is not a torch.save archive (no zip header): a foreign file, or a legacy "
                               "pickle, which is never unpickled here")
    try:
        with zipfile.ZipFile(file) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(file, f"is a truncated torch.save archive ({exc}); the writer was interrupted?") from None
    if not any(name.endswith("/data.pkl") or name == "data.pkl" for name in names):
        raise InputError(file, "is a zip file but not a torch.save archive (no data.pkl)")
    return "zip"


# DeepSpec deepspec/data/target_cache_dataset.py: INDEX_RECORD_STRUCT "<QIIQQQQQ", TARGET_CACHE_VERSION 2
DEEPSPEC_RECORD = struct.Struct("<QIIQQQQQ")
DEEPSPEC_VERSION = 2
DEEPSPEC_FIELDS = ("version", "num_samples", "num_shards", "target_layer_ids", "hidden_dtype", "token_dtype",
                   "mask_dtype", "index_record_size", "hidden_size", "shards")


@dataclass(frozen=True)
class DeepSpecRecord:
    """One 56-byte record of samples.idx (DeepSpec pack_index_record): where a sample's five arrays are."""

    sample_id: int
    shard: Path
    seq_len: int
    input_ids: int  # byte offsets into the shard
    attention_mask: int
    loss_mask: int
    hidden: int
    last_hidden: int


def deepspec_manifest(folder: Path) -> dict:
    """manifest.json, checked as DeepSpec's validate_target_cache_manifest checks it (version 2, bf16 / int32 /
    uint8, 56-byte records, ascending layer ids, every shard present, samples.idx sized num_samples x 56)."""
    from ..core.errors import read_json_object

    path = folder / "manifest.json"
    manifest = read_json_object(path, missing="no manifest.json: the DeepSpec target cache was not finalized")
    missing = [k for k in DEEPSPEC_FIELDS if k not in manifest]
    if missing:
        raise InputError(path, f"is not a DeepSpec target-cache manifest: missing {', '.join(missing)}")
    expected = {"version": DEEPSPEC_VERSION, "hidden_dtype": "bfloat16", "token_dtype": "int32", "mask_dtype": "uint8",
                "index_record_size": DEEPSPEC_RECORD.size}
    for key, value in expected.items():
        if manifest[key] != value:
            raise InputError(path, f"{key} is {manifest[key]!r}; DeepSpec's target cache protocol has {value!r}")
    ids = manifest["target_layer_ids"]
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InputError(path, f"target_layer_ids {ids!r} is not a non-empty list of integers")
    if ids != sorted(set(ids)):
        raise InputError(path, f"target_layer_ids {ids} are not strictly ascending (DeepSpec writes them so)")
    for key in ("num_samples", "num_shards", "hidden_size"):
        if not isinstance(manifest[key], int) or isinstance(manifest[key], bool) or manifest[key] < 0:
            raise InputError(path, f"{key} {manifest[key]!r} is not a non-negative integer")
    shards = manifest["shards"]
    if not isinstance(shards, list) or len(shards) != manifest["num_shards"]:
        raise InputError(path, f"lists {len(shards) if isinstance(shards, list) else 'no'} shards, num_shards says "
                               f"{manifest['num_shards']}")
    for number, shard in enumerate(shards):
        if not isinstance(shard, dict) or shard.get("shard_id") != number or not isinstance(shard.get("file_name"), str):
            raise InputError(path, f"shard entry {number} is not {{shard_id: {number}, file_name}}")
        if Path(shard["file_name"]).name != shard["file_name"] or not regular_file_present(folder / shard["file_name"]):
            raise InputError(folder / str(shard["file_name"]), "is missing (listed in manifest.json)")
    index = folder / "samples.idx"
    if not regular_file_present(index):
        raise InputError(index, "is missing: the DeepSpec target cache was not finalized")
    if index.stat().st_size != manifest["num_samples"] * DEEPSPEC_RECORD.size:
        raise InputError(index, f"holds {index.stat().st_size} bytes, manifest.json says {manifest['num_samples']} "
                                f"records of {DEEPSPEC_RECORD.size}: truncated or from another cache")
    return manifest


def deepspec_records(folder: Path, manifest: dict, wanted: list[int]) -> list[DeepSpecRecord]:
    """The records of samples `wanted`, each checked: its sample id is its position (DeepSpec CacheDataset
    _read_record), and its five arrays lie inside the shard (int32 ids, uint8 masks, bf16 states)."""
    H, n = manifest["hidden_size"], len(manifest["target_layer_ids"])
    shards = {s["shard_id"]: folder / s["file_name"] for s in manifest["shards"]}
    out = []
    with (folder / "samples.idx").open("rb") as handle:
        for i in wanted:
            handle.seek(i * DEEPSPEC_RECORD.size)
            sample_id, shard_id, seq_len, *offsets = DEEPSPEC_RECORD.unpack(handle.read(DEEPSPEC_RECORD.size))
            where = f"samples.idx record {i}"
            if sample_id != i or shard_id not in shards or seq_len <= 0:
                raise InputError(folder / "samples.idx", f"{where} is damaged (sample_id {sample_id}, shard {shard_id}, "
                                                         f"seq_len {seq_len})")
            sizes = (4 * seq_len, seq_len, seq_len, 2 * seq_len * n * H, 2 * seq_len * H)
            shard_size = shards[shard_id].stat().st_size
            for offset, size in zip(offsets, sizes):
                if offset + size > shard_size:
                    raise InputError(shards[shard_id], f"is truncated: {where} needs bytes up to {offset + size}, the "
                                                       f"shard has {shard_size}")
            out.append(DeepSpecRecord(sample_id, shards[shard_id], seq_len, *offsets))
    return out
