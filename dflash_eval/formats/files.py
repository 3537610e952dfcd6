"""A checkpoint's files, read without loading a tensor: where a folder's weights are (one file, an index's shards,
loose files), each safetensors header checked against the bytes the file holds (known dtypes, offsets that
match the shapes), NaN/inf found per tensor on the raw bits, the content fingerprints (a checkpoint's, and of
everything a run depends on: `target_content`), and a name resolved to a local folder or the offline Hugging
Face cache."""

from __future__ import annotations

import json
import os
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import InputError, open_regular, read_json_object, regular_files

CONFIG_NAME = "config.json"


SINGLE_WEIGHTS = "model.safetensors"


INDEX_WEIGHTS = "model.safetensors.index.json"


# bytes per element of every dtype the safetensors format defines; anything else is refused by name
DTYPE_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
               "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")  # weights dflash-eval computes with (no scales, no dequantization)
# non-finite <=> every exponent bit set: (unsigned view, exponent mask) per float dtype
_EXPONENT = {"F16": ("<u2", 0x7C00), "BF16": ("<u2", 0x7F80), "F32": ("<u4", 0x7F800000),
             "F64": ("<u8", 0x7FF0000000000000)}


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: str
    offsets: tuple[int, int] = (0, 0)  # [begin, end) in the data section (after the header)
    file: Path | None = None  # the safetensors file holding it (set by read_weight_metadata)


def _entry(path: Path, name: str, entry: Any) -> TensorMeta:
    """One header entry, checked: a known dtype, a shape of non-negative integers, offsets that hold exactly
    shape x element size bytes."""
    def bad(problem: str) -> InputError:
        return InputError(path, f"corrupted safetensors file: tensor {name!r} {problem}")

    if not isinstance(entry, dict):
        raise bad("has a header entry that is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_SIZES:
        raise bad(f"has the unknown dtype {dtype!r} (safetensors dtypes: {', '.join(DTYPE_SIZES)})")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise bad(f"has the shape {shape!r}, not a list of non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
            or offsets[0] > offsets[1]):
        raise bad(f"has the data_offsets {offsets!r}, not [begin, end] with 0 <= begin <= end")
    size = DTYPE_SIZES[dtype]
    for d in shape:
        size *= d
    if offsets[1] - offsets[0] != size:
        raise bad(f"holds {offsets[1] - offsets[0]} bytes, but shape {shape} of {dtype} needs {size}")
    return TensorMeta(tuple(shape), dtype, (offsets[0], offsets[1]))


def read_safetensors_header(path: Path) -> dict[str, TensorMeta]:
    """Parse a safetensors header and check every entry (`_entry`) and that the file holds every byte the
    header promises."""
    from ..core.errors import loads

    try:
        with open_regular(path) as handle:  # a FIFO named model.safetensors is refused, never waited on
            size = os.fstat(handle.fileno()).st_size
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise InputError(path, "corrupted safetensors file: shorter than its 8-byte header length")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > size - 8:
                raise InputError(path, f"corrupted or truncated safetensors file: header claims {header_len} bytes, file has {size}")
            header = loads(handle.read(header_len).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(path, f"corrupted safetensors file: unreadable header ({exc.__class__.__name__})") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    if not isinstance(header, dict):
        raise InputError(path, "corrupted safetensors file: header is not a JSON object")
    tensors = {name: _entry(path, name, entry) for name, entry in header.items() if name != "__metadata__"}
    data_end = max((t.offsets[1] for t in tensors.values()), default=0)
    if 8 + header_len + data_end > size:
        raise InputError(path, f"truncated safetensors file: needs {8 + header_len + data_end} bytes, has {size}")
    return tensors


def nonfinite_tensors(path: Path, tensors: dict[str, TensorMeta] | None = None) -> list[str]:
    """Names of the floating tensors in a safetensors file holding a NaN or an infinity, found on the raw
    bits (every exponent bit set) through a read-only memory map: no tensor is loaded, no torch needed."""
    import numpy as np

    tensors = read_safetensors_header(path) if tensors is None else tensors
    bad: list[str] = []
    with open_regular(path) as handle:
        (header_len,) = struct.unpack("<Q", handle.read(8))
    base = 8 + header_len
    if not any(t.dtype in _EXPONENT and t.offsets[1] > t.offsets[0] for t in tensors.values()):
        return bad
    data = np.memmap(path, dtype=np.uint8, mode="r")
    chunk = 1 << 24  # bytes per step: bounded memory on any tensor size
    for name, meta in tensors.items():
        if meta.dtype not in _EXPONENT:
            continue
        view, mask = _EXPONENT[meta.dtype]
        begin, end = base + meta.offsets[0], base + meta.offsets[1]
        for start in range(begin, end, chunk):
            values = data[start:min(end, start + chunk)].view(view)
            if np.any((values & mask) == mask):
                bad.append(name)
                break
    del data
    return bad


def weight_files(directory: str | Path) -> list[Path]:
    """The safetensors files of a checkpoint: one file, or the shards listed by the index."""
    from ..core.errors import read_json_object

    directory = Path(directory)
    single = directory / SINGLE_WEIGHTS
    index = directory / INDEX_WEIGHTS
    regular_files([single, index], " (expected safetensors weights)")  # a FIFO or device is refused by name
    if single.is_file():
        return [single]
    if index.is_file():
        weight_map = read_json_object(index, missing="index missing").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise InputError(index, "not a valid safetensors index: 'weight_map' is not an object of tensor -> file")
        for name, shard in weight_map.items():
            if not isinstance(shard, str) or not shard or Path(shard).is_absolute() or ".." in Path(shard).parts:
                raise InputError(index, f"not a valid safetensors index: weight_map[{name!r}] = {shard!r} is not a "
                                        "file name inside the folder")
        files = sorted({directory / shard for shard in weight_map.values()})
        regular_files(files, " (a shard listed in model.safetensors.index.json)")
        for file in files:
            if not file.is_file():
                raise InputError(file, "shard listed in model.safetensors.index.json is missing")
        return files
    loose = sorted(directory.glob("*.safetensors"))
    if loose:
        regular_files(loose)
        return loose
    if any(directory.glob("*.bin")) or any(directory.glob("*.pt")):
        raise InputError(directory, "only pickle weights (.bin/.pt) found; dflash-eval reads safetensors only")
    raise InputError(directory, "no safetensors weights found (expected model.safetensors)")


def read_weight_metadata(directory: Path) -> tuple[dict[str, TensorMeta], dict[str, Path]]:
    metas: dict[str, TensorMeta] = {}
    owners: dict[str, Path] = {}
    from dataclasses import replace

    for file in weight_files(directory):
        for name, meta in read_safetensors_header(file).items():
            metas[name] = replace(meta, file=file)
            owners[name] = file
    return metas, owners


def read_config(directory: Path) -> dict[str, Any]:
    if not directory.is_dir():
        raise InputError(directory, "not a directory (expected a drafter checkpoint folder with config.json)")
    regular_files([directory / CONFIG_NAME])
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
        with open_regular(file) as handle:
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
        except Exception:  # any cache miss becomes one clear message
            raise InputError(name_or_path, "not a local folder and not found in the Hugging Face cache (offline "
                                           f"lookup); download it with: hf download {name_or_path}") from None
    hint = "; the published z-lab drafter is given as --reference z-lab" if name_or_path == "z-lab" else ""
    raise InputError(name_or_path, f"no such file or directory{hint}")


def file_digest(path: Path, cache_dir: str | Path | None = None) -> str:
    """sha256 of a file's bytes. With `cache_dir`, remembered in CACHE/fingerprints.json under the file's
    identity (absolute path, size, mtime_ns, ctime_ns, inode): any write to the file changes its ctime, so a
    remembered digest is never a stale one, and a 50 GB target is read once, not on every run."""
    return file_digests([path], cache_dir)[0]


def _identity(path: Path) -> str:
    try:
        stat = path.stat()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ctime_ns}|{stat.st_ino}"


def _sha256_file(path: Path) -> str:
    """The sha256 of one file, streamed in 4 MiB reads (hashlib releases the GIL on them: threads run in parallel)."""
    import hashlib

    digest = hashlib.sha256()
    try:
        with open_regular(path) as handle:
            for chunk in iter(lambda: handle.read(1 << 22), b""):
                digest.update(chunk)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    return digest.hexdigest()


def hashing_threads(files: int) -> int:
    """Files hashed at once: one per CPU this process may run on, at most 8 (a 54 GB target's ~12 shards
    at ~1.5 GB/s each saturate a local NVMe well before that), at most one per file."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(files, cpus, 8))


def _read_memo(memo: Path | None) -> dict[str, str]:
    if memo is None or not memo.is_file():
        return {}
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in known.items() if isinstance(v, str)} if isinstance(known, dict) else {}


def file_digests(files: list[Path], cache_dir: str | Path | None = None) -> list[str]:
    """`file_digest` of each file, in order: those not remembered hashed in parallel threads (`hashing_threads`;
    each file's digest is the plain sha256 of its bytes, the same value whatever the threads). With
    `cache_dir`, under an OS lock on CACHE/fingerprints.lock held while hashing, so processes that start
    together (torchrun's ranks, a shard per GPU) hash a target once: the first takes the lock and hashes,
    the others wait and read what it remembered."""
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import nullcontext

    paths = [Path(f) for f in files]
    keys = [_identity(p) for p in paths]
    memo = Path(cache_dir) / "fingerprints.json" if cache_dir is not None else None
    with _memo_lock(memo) if memo is not None else nullcontext():
        known = _read_memo(memo)
        todo = sorted({k: p for k, p in zip(keys, paths) if k not in known}.items())
        if todo:
            with ThreadPoolExecutor(hashing_threads(len(todo))) as pool:
                known.update(zip([k for k, _ in todo], pool.map(_sha256_file, [p for _, p in todo])))
            if memo is not None:
                _write_memo(memo, known)
    return [known[k] for k in keys]


@contextmanager
def _memo_lock(memo: Path):
    """The lock around reading, hashing and writing the memo; a cache folder that cannot hold a lock (read-only,
    or one that cannot be made) only loses the sharing, never the digests."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(memo.with_suffix(".lock")), timeout=900)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except (OSError, Timeout):
        lock = None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def _write_memo(memo: Path, known: dict[str, str]) -> None:
    try:  # best effort: a cache that cannot be written only costs a re-read next time
        merged = {**_read_memo(memo), **known}
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(merged), encoding="utf-8")
        tmp.replace(memo)
    except OSError:
        pass


def files_digest(files: list[Path], cache_dir: str | Path | None = None) -> str:
    """One sha256 over (name, content digest) of each file, in the given order: a set of files as one value."""
    import hashlib

    digest = hashlib.sha256()
    for file, value in zip(files, file_digests(list(files), cache_dir)):
        digest.update(f"{Path(file).name}:{value};".encode())
    return digest.hexdigest()


def same_model_files(a: Path, b: Path, cache_dir: str | Path | None = None) -> bool:
    """Whether two model folders hold the same model by content: config.json byte for byte, and the same
    weight files (names, sizes, then sha256, remembered in `cache_dir` as `target_content` does), so a
    byte-identical copy of a target is the target, and a folder with other weights is not."""
    try:
        if (Path(a) / "config.json").read_bytes() != (Path(b) / "config.json").read_bytes():
            return False
        wa, wb = weight_files(a), weight_files(b)
    except (OSError, InputError):
        return False
    if [(f.name, f.stat().st_size) for f in wa] != [(f.name, f.stat().st_size) for f in wb]:
        return False
    return files_digest(wa, cache_dir) == files_digest(wb, cache_dir)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "merges.txt",
                   "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json")


def target_content(target: Path, responses: Path | None, chat_template: str | None,
                   cache_dir: str | Path | None = None) -> dict[str, str | None]:
    """sha256 of what a result depends on besides the drafters (fingerprinted apart) and the prompts (their
    text is in the settings): the target's config and generation config, its weights, its tokenizer files,
    the chat template as loaded, the --responses file. A run's settings hold these (a resume after any of
    them changed is refused, naming it) and so does its provenance."""
    import hashlib

    target = Path(target)
    regular_files([target / n for n in ("config.json", "generation_config.json", *TOKENIZER_FILES)])
    configs = [target / n for n in ("config.json", "generation_config.json") if (target / n).is_file()]
    tokenizer = [target / n for n in TOKENIZER_FILES if (target / n).is_file()]
    return {
        "target_config": files_digest(configs, cache_dir),
        "target_weights": files_digest(weight_files(target), cache_dir),
        "tokenizer_files": files_digest(tokenizer, cache_dir),
        "chat_template": hashlib.sha256((chat_template or "").encode()).hexdigest(),
        "responses_file": file_digest(Path(responses)) if responses else None,
    }
