"""A training run's hidden-state data on disk, read as its trainer reads it: which format a folder holds,
its samples in the trainer's order, the split the trainer validated on, and what the files record about
their layers. No tensor is loaded here (model/training_taps.py reads the arrays).

| format | detected by | samples, in the trainer's order | layers recorded |
|---|---|---|---|
| speculators (0.6+, vLLM `ExampleHiddenStatesConnector`) | `state.json` (a `datasets.save_to_disk` folder) + `hidden_states/` | arrow rows; row i <-> `hidden_states/hs_{i}.safetensors`; validation = rows from int(n x 0.9) (speculators.train.data.ArrowDataset, `--train-data-ratio`) | no (the drafter's aux_hidden_state_layer_ids) |
| SpecForge 0.2.0 (`scripts/prepare_hidden_states.py`) | `rows_*/data_*.ckpt` or `.ckpt.gz` | every `.ckpt`/`.ckpt.gz` under the folder, paths sorted (specforge.runtime.data_plane.offline_reader.list_feature_files) | no (the draft config's dflash_config.target_layer_ids) |
| DeepSpec (`scripts/data/prepare_target_cache.py`) | `manifest.json` + `samples.idx` | samples.idx records 0..n-1 (deepspec.data.target_cache_dataset.CacheDataset) | manifest target_layer_ids (z-lab numbering, -1 = embeddings) |
| speculators before 0.6 | `data_config.json` + `data_*.pt` | os.walk's `*pt` files shuffled by random.seed(0), validation the last 10% (speculators 0.5.0 train.data.split_files) | data_config.json hidden_states.layer_ids (z-lab numbering) |
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import InputError, read_json_object
from .hf_cache import PYARROW_HINT

SPLITS = ("validation", "train", "all")
TRAIN_RATIO = 0.9  # speculators' --train-data-ratio default; speculators 0.5.0 split_files(ratio=0.9)
# the teacher (last hidden state) each format stores, and on which side of the target's final norm
TEACHER = {"speculators": "pre-norm", "specforge": None, "deepspec": "post-norm", "speculators-legacy": "pre-norm"}


@dataclass(frozen=True)
class SampleRef:
    """One sample: its number in the trainer's numbering and the file(s) that hold it."""

    index: int  # dataset row (speculators), data_N (SpecForge, legacy), sample id (DeepSpec)
    file: Path
    input_ids: tuple[int, ...] | None = None  # speculators: the arrow row's input_ids and loss_mask
    loss_mask: tuple[int, ...] | None = None
    record: object | None = None  # DeepSpec: its training_files.DeepSpecRecord


@dataclass
class TrainingData:
    format: str
    path: Path
    samples: list[SampleRef]  # the chosen ones, in the trainer's order
    total: int  # samples the data holds
    split: str  # which ones, in words
    stored_layers: tuple[int, ...] | None = None  # z-lab numbering, as the files record them (DeepSpec, legacy)
    hidden_size: int | None = None  # as recorded (DeepSpec manifest, legacy data_config)
    manifest: dict | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def teacher(self) -> str | None:
        return TEACHER[self.format]


def detect_format(path: Path) -> str:
    """The format a folder holds, or one line saying what was looked for."""
    if not path.is_dir():
        raise InputError(path, "is not a folder (trained-taps reads a training run's hidden-state data folder)")
    if (path / "manifest.json").is_file() or (path / "samples.idx").is_file():
        return "deepspec"
    if (path / "state.json").is_file() and (path / "hidden_states").is_dir():
        return "speculators"
    if (path / "data_config.json").is_file():
        return "speculators-legacy"
    if any(name.endswith((".ckpt", ".ckpt.gz")) for _, _, names in os.walk(path) for name in names):
        return "specforge"
    if (path / "hidden_states").is_dir() or (path / "state.json").is_file():
        raise InputError(path, "looks like speculators data but lacks " + (
            "state.json (the datasets.save_to_disk folder the hidden states belong to)"
            if not (path / "state.json").is_file() else "its hidden_states/ folder"))
    raise InputError(path, "holds no training data dflash-eval knows: expected speculators (state.json + "
                           "hidden_states/hs_*.safetensors), SpecForge (rows_*/data_*.ckpt[.gz]), DeepSpec "
                           "(manifest.json + samples.idx) or speculators < 0.6 (data_config.json + data_*.pt)")


def _split(indices: list, split: str, ratio: float) -> tuple[list, str]:
    cut = int(len(indices) * ratio)
    chosen = {"validation": indices[cut:], "train": indices[:cut], "all": indices}[split]
    words = {"validation": f"validation: the last {len(indices) - cut} of {len(indices)} (train ratio {ratio:g})",
             "train": f"train: the first {cut} of {len(indices)} (train ratio {ratio:g})",
             "all": f"all {len(indices)}"}[split]
    return chosen, words


def _arrow_rows(path: Path) -> tuple[list, list]:
    """input_ids and loss_mask of every row of a `datasets.save_to_disk` folder (its state.json's data
    files, Arrow IPC streams), through pyarrow (memory-mapped: only what is read is touched)."""
    try:
        import pyarrow as pa
    except ImportError:
        raise InputError(path, f"reading speculators' arrow dataset needs pyarrow: {PYARROW_HINT}") from None
    state = read_json_object(path / "state.json", missing="no state.json")
    files = [f.get("filename") for f in state.get("_data_files") or [] if isinstance(f, dict)]
    if not files or not all(isinstance(f, str) and Path(f).name == f for f in files):
        raise InputError(path / "state.json", "lists no data files (_data_files): not a datasets.save_to_disk folder")
    ids, masks = [], []
    for name in files:
        try:
            with pa.memory_map(str(path / name)) as source:
                table = pa.ipc.open_stream(source).read_all()
        except (OSError, pa.ArrowInvalid) as exc:
            raise InputError(path / name, f"is not a readable Arrow stream ({str(exc).splitlines()[0]})") from None
        missing = [c for c in ("input_ids", "loss_mask") if c not in table.column_names]
        if missing:
            raise InputError(path / name, f"has no {' or '.join(missing)} column (speculators' preprocessing writes "
                                          "input_ids, loss_mask, seq_len)")
        ids.append(table.column("input_ids"))
        masks.append(table.column("loss_mask"))
    return ids, masks


def _row(columns: list, i: int) -> tuple[int, ...]:
    for column in columns:
        if i < len(column):
            return tuple(column[i].as_py())
        i -= len(column)
    raise IndexError(i)


def _speculators(path: Path, split: str, ratio: float, limit: int | None) -> TrainingData:
    ids, masks = _arrow_rows(path)
    n = sum(len(c) for c in ids)
    chosen, words = _split(list(range(n)), split, ratio)
    chosen = chosen[:limit] if limit else chosen
    samples = [SampleRef(i, path / "hidden_states" / f"hs_{i}.safetensors", _row(ids, i), _row(masks, i)) for i in chosen]
    return TrainingData("speculators", path, samples, n, f"{words} rows (speculators.train.data.ArrowDataset)")


def specforge_files(path: Path) -> list[Path]:
    """SpecForge's own order (offline_reader.list_feature_files): every .ckpt / .ckpt.gz below, absolute paths sorted."""
    found = [Path(root).resolve() / name for root, _, names in os.walk(path) for name in names
             if name.endswith((".ckpt", ".ckpt.gz"))]
    return sorted(found, key=str)


def _file_number(file: Path) -> int:
    match = re.search(r"(\d+)\.(?:ckpt|pt)(?:\.gz)?$", file.name)
    return int(match.group(1)) if match else -1


def _specforge(path: Path, split: str, limit: int | None) -> TrainingData:
    files = specforge_files(path)
    chosen = files[:limit] if limit else files
    notes = []
    if any(not re.fullmatch(r"rows_\d+-\d+", f.parent.name) for f in files):
        notes.append("some .ckpt files are not inside rows_G-G+2000/ folders (prepare_hidden_states._get_file_path)")
    return TrainingData("specforge", path, [SampleRef(_file_number(f), f) for f in chosen], len(files),
                        f"all {len(files)} files, in SpecForge's sorted order", notes=notes)


def _deepspec(path: Path, split: str, limit: int | None) -> TrainingData:
    from .training_files import deepspec_manifest, deepspec_records

    manifest = deepspec_manifest(path)
    wanted = list(range(manifest["num_samples"]))[:limit] if limit else list(range(manifest["num_samples"]))
    records = deepspec_records(path, manifest, wanted)
    return TrainingData("deepspec", path, [SampleRef(r.sample_id, r.shard, record=r) for r in records],
                        manifest["num_samples"], f"all {manifest['num_samples']} samples of samples.idx",
                        stored_layers=tuple(manifest["target_layer_ids"]), hidden_size=manifest["hidden_size"],
                        manifest=manifest)


def _legacy(path: Path, split: str, ratio: float, limit: int | None) -> TrainingData:
    config = read_json_object(path / "data_config.json", missing="no data_config.json")
    try:
        layers = config["hidden_states"]["layer_ids"]
        hidden = config["model"]["hidden_size"]
    except (KeyError, TypeError):
        raise InputError(path / "data_config.json", "has no hidden_states.layer_ids / model.hidden_size (speculators' "
                                                    "DataGenerationConfig writes both)") from None
    if not isinstance(layers, list) or len(layers) < 2 or not all(isinstance(i, int) for i in layers):
        raise InputError(path / "data_config.json", f"hidden_states.layer_ids {layers!r} is not a list of >= 2 ids "
                                                    "(the taps, then the last layer the teacher comes from)")
    # speculators 0.5.0 train.data.list_files (os.walk, every name ending in "pt") and split_files (seeded shuffle)
    listed = [Path(root) / name for root, _, names in os.walk(path) for name in names if name.endswith("pt")]
    random.Random(0).shuffle(listed)
    chosen, words = _split(listed, split, ratio)
    chosen = [f for f in chosen if re.fullmatch(r"data_\d+\.pt", f.name)]
    chosen = chosen[:limit] if limit else chosen
    return TrainingData("speculators-legacy", path, [SampleRef(_file_number(f), f) for f in chosen], len(listed),
                        f"{words} files, shuffled as speculators 0.5 split_files does (os.walk order, seed 0)",
                        stored_layers=tuple(layers), hidden_size=hidden,
                        notes=["speculators < 0.6 data: the split follows this filesystem's os.walk order"])


def read_training_data(path: Path, *, split: str | None = None, train_ratio: float = TRAIN_RATIO,
                       limit: int | None = None) -> TrainingData:
    """The data folder `path`: its format, and the samples to compare (the validation split where the trainer
    has one, else all; the first `limit` of them)."""
    path = Path(path)
    fmt = detect_format(path)
    if not 0.0 < train_ratio < 1.0:
        raise InputError(None, f"--train-ratio must be in (0, 1) (got {train_ratio:g})")
    has_split = fmt in ("speculators", "speculators-legacy")
    split = split or ("validation" if has_split else "all")
    if split not in SPLITS:
        raise InputError(None, f"unknown --split {split!r} (choose {', '.join(SPLITS)})")
    if split != "all" and not has_split:
        raise InputError(path, f"{fmt} data records no train/validation split; use --split all")
    if fmt == "speculators":
        data = _speculators(path, split, train_ratio, limit)
    elif fmt == "specforge":
        data = _specforge(path, split, limit)
    elif fmt == "deepspec":
        data = _deepspec(path, split, limit)
    else:
        data = _legacy(path, split, train_ratio, limit)
    if not data.samples:
        raise InputError(path, f"holds no sample in the chosen split ({data.split})")
    return data
