"""Datasets from the local Hugging Face hub cache, read offline: a snapshot's parquet, arrow or JSON-lines
files for one config and split, and the revision they came from.

Why: the prompt sets of the DFlash paper's table (gsm8k, math500, aime, livecodebench, swe-bench, mt-bench,
alpaca) are Hugging Face datasets that users already keep in the cache (`hf download --repo-type dataset
REPO`). This tool never downloads at run time, and `datasets.load_dataset` offline reads only its own
processed cache, never the hub cache; so the files of a snapshot are found and read here. A cache miss is a
user-fixable input problem: one `InputError` line with the `hf download` command that fixes it.

Where the cache is (`hub_cache_dir`): huggingface_hub's rule (huggingface_hub/constants.py: `HF_HUB_CACHE`,
else `HUGGINGFACE_HUB_CACHE`, else `HF_HOME`/hub, else `XDG_CACHE_HOME`/huggingface/hub, else
~/.cache/huggingface/hub), read when called, not when imported, so a changed environment counts. A dataset
lives in `datasets--ORG--NAME/`; `refs/main` names the snapshot (`snapshots/REV/`) unless a revision is asked
for (`@REV`: a commit or a ref name under refs/).

Which files make a config's split (`data_files`), the rules of datasets 5.1 (datasets/load.py,
datasets/data_files.py) on a local folder:
- the README's YAML `configs:` list: the config asked for, else the one marked `default: true`, else the one
  named "default", else the only one; its `data_files` (a pattern or list of patterns: split "train"; or a
  list of {split, path}), relative to its `data_dir` when given;
- without `configs:`, the first of datasets' default patterns that matches anything: sharded
  `data/{split}-NNNNN-of-NNNNN*.*` files (`SPLIT_PATTERN_SHARDED`); a split keyword as a folder name, then
  in a file name (`DEFAULT_PATTERNS_SPLIT_IN_DIR_NAME`, `..._IN_FILENAME`: train/training,
  validation/valid/dev/val, test/testing/eval/evaluation, delimited by "-._ 0-9"); else every file is "train".
Patterns are fsspec globs: `*` stops at "/", `**` crosses folders. Hidden files and folders (".x", "__x")
and the card files datasets ignores (`FILES_TO_IGNORE`) are skipped; matches are sorted by path, each
split's files in that order, which is the row order `load_dataset` gives.

Reading (`read_rows`): .parquet with pyarrow.parquet, .arrow as the Arrow IPC stream datasets writes (or the
IPC file format), .jsonl / .json line by line (a .json holding one JSON array is read whole). Parquet and
arrow need pyarrow, which the base install does not carry (it is large): a missing pyarrow is refused by name
with the command that installs it (`pip install 'dflash-eval[hf]'`); JSON lines need nothing.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import InputError, open_regular, read_text, regular_files

DATA_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json")
FILES_TO_IGNORE = {"README.md", "config.json", "dataset_info.json", "dataset_infos.json", "dataset_dict.json"}
SPLIT_KEYWORDS = {"train": ("train", "training"), "validation": ("validation", "valid", "dev", "val"),
                  "test": ("test", "testing", "eval", "evaluation")}
_SEP = "[-._ 0-9]"
SHARDED = re.compile(r"data/(?P<split>[^/]+?)-\d{5}-of-\d{5}[^/]*\.[^/]*")
PYARROW_HINT = "pip install 'dflash-eval[hf]' (or pip install pyarrow)"


def hub_cache_dir() -> Path:
    """The hub cache folder, by huggingface_hub's rule (module docstring), read from the environment now."""
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                                              "huggingface")
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(os.path.expandvars(home), "hub")
    return Path(os.path.expanduser(os.path.expandvars(hub)))


def download_command(repo: str, files: tuple[str, ...] = (), revision: str | None = None) -> str:
    """The command that puts `repo` (or just `files` of it) into the cache, for a cache-miss message."""
    return " ".join(["hf download --repo-type dataset", repo, *files, *(["--revision", revision] if revision else [])])


@dataclass(frozen=True)
class Snapshot:
    """One dataset snapshot in the cache: the repo, the commit (`revision`) and its folder."""

    repo: str
    revision: str
    folder: Path

    def files(self) -> list[str]:
        """Every data file of the snapshot (DATA_SUFFIXES, not hidden, not a card file), sorted by relative path.
        Files are symlinks into blobs/; a link whose blob is missing (an interrupted download) is not a file."""
        found = []
        for path in self.folder.rglob("*"):
            relative = path.relative_to(self.folder).as_posix()
            parts = relative.split("/")
            if any(p.startswith((".", "__")) for p in parts) or parts[-1] in FILES_TO_IGNORE:
                continue
            if path.suffix.lower() in DATA_SUFFIXES and path.exists() and not path.is_dir():
                regular_files([path], " in the dataset snapshot")  # a FIFO would block its reader forever
                found.append(relative)
        return sorted(found)


def find_snapshot(repo: str, revision: str | None = None, files: tuple[str, ...] = ()) -> Snapshot:
    """The snapshot of dataset `repo` in the cache: `revision` (a commit, or a ref such as "main"), default
    what refs/main names, else the only snapshot there is. A miss: InputError with the download command."""
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise InputError(f"hf:{repo}", "expected a dataset repo id ORG/NAME (hf:ORG/NAME[:CONFIG][:SPLIT])")
    cache = hub_cache_dir()
    root = cache / ("datasets--" + repo.replace("/", "--"))
    fix = f"download it once, where there is a network: {download_command(repo, files, revision)}"
    snapshots = root / "snapshots"
    if not snapshots.is_dir():
        raise InputError(f"hf:{repo}", f"not in the Hugging Face cache ({cache}); {fix}")
    wanted = revision or "main"
    ref = root / "refs" / wanted
    if ref.is_file():
        commit = read_text(ref).strip()
    elif revision and (snapshots / revision).is_dir():
        commit = revision
    elif revision is None and len(present := [p.name for p in snapshots.iterdir() if p.is_dir()]) == 1:
        commit = present[0]
    else:
        raise InputError(f"hf:{repo}", f"revision {wanted!r} is not in the Hugging Face cache ({root}); {fix}")
    if not (snapshots / commit).is_dir():
        raise InputError(f"hf:{repo}", f"refs/{wanted} names snapshot {commit}, which is not in the cache; {fix}")
    return Snapshot(repo, commit, snapshots / commit)


# --- which files make a split ----------------------------------------------------------------------------


def glob_regex(pattern: str) -> re.Pattern:
    """An fsspec glob as a regular expression over relative posix paths: `**/` any folders (or none), `**`
    anything, `*` anything but "/", `?` one character but "/", `[...]` a character class."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 1)) > i:
            body = pattern[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _matching(files: list[str], patterns: list[str]) -> list[str]:
    chosen: list[str] = []
    for pattern in patterns:
        regex = glob_regex(pattern.lstrip("./") if pattern.startswith("./") else pattern)
        chosen += [f for f in files if regex.match(f) and f not in chosen]
    return chosen


def _default_splits(files: list[str]) -> dict[str, list[str]]:
    """datasets' default patterns, first match wins (module docstring)."""
    sharded = {m["split"] for f in files if (m := SHARDED.fullmatch(f))}
    if sharded:
        order = [s for s in SPLIT_KEYWORDS if s in sharded] + sorted(sharded - set(SPLIT_KEYWORDS))
        return {s: [f for f in files if (m := SHARDED.fullmatch(f)) and m["split"] == s] for s in order}
    for kind in ("dir", "file"):
        found = {}
        for split, keywords in SPLIT_KEYWORDS.items():
            for keyword in keywords:
                patterns = ([f"**/{keyword}/**", f"**/{keyword}{_SEP}*/**", f"**/*{_SEP}{keyword}/**",
                             f"**/*{_SEP}{keyword}{_SEP}*/**"] if kind == "dir"
                            else [f"**/{keyword}{_SEP}*", f"**/*{_SEP}{keyword}{_SEP}*"])
                matched = _matching(files, patterns)
                if matched:
                    found[split] = matched
                    break
        if found:
            return found
    return {"train": list(files)} if files else {}


def _card_configs(snapshot: Snapshot) -> list[dict]:
    card = snapshot.folder / "README.md"
    if not card.is_file():
        return []
    from huggingface_hub.repocard import metadata_load

    try:
        meta = metadata_load(card) or {}
    except Exception as exc:  # a broken card is one line naming it
        raise InputError(card, f"its YAML header cannot be read ({type(exc).__name__})") from None
    configs = meta.get("configs") or []
    return [c for c in configs if isinstance(c, dict)] if isinstance(configs, list) else []


def _config_splits(config: dict, files: list[str]) -> dict[str, list[str]]:
    base = str(config.get("data_dir") or "").strip("/")
    scoped = [f[len(base) + 1:] for f in files if f.startswith(base + "/")] if base else files
    spec = config.get("data_files")
    if spec is None:
        splits = _default_splits(scoped)
    else:
        entries = [spec] if isinstance(spec, str) else spec if isinstance(spec, list) else []
        if isinstance(spec, dict):
            entries = [{"split": k, "path": v} for k, v in spec.items()]
        patterns: dict[str, list[str]] = {}
        for entry in entries:
            split, paths = ("train", entry) if isinstance(entry, str) else (entry.get("split", "train"), entry.get("path"))
            patterns.setdefault(str(split), []).extend([paths] if isinstance(paths, str) else list(paths or []))
        splits = {split: _matching(scoped, ps) for split, ps in patterns.items()}
    return {s: [f"{base}/{f}" if base else f for f in fs] for s, fs in splits.items()}


def configs(snapshot: Snapshot) -> list[str]:
    """The config names the card declares (empty: the one default config)."""
    return [str(c.get("config_name", "default")) for c in _card_configs(snapshot)]


def data_files(snapshot: Snapshot, config: str | None, split: str | None) -> tuple[str, str, list[str]]:
    """(config, split, files) of a snapshot: the files that make that split (module docstring). Default split:
    "test" when there is one, else the only split. Unknown names are refused with the ones there are."""
    declared = _card_configs(snapshot)
    everything = snapshot.files()
    source = f"hf:{snapshot.repo}"
    if declared:
        names = [str(c.get("config_name", "default")) for c in declared]
        if config is None:
            marked = [c for c in declared if c.get("default")] or [c for c in declared if c.get("config_name") == "default"]
            chosen = marked[0] if marked else declared[0] if len(declared) == 1 else None
            if chosen is None:
                raise InputError(source, f"has several configs; name one (hf:{snapshot.repo}:CONFIG): {', '.join(names)}")
        elif config in names:
            chosen = declared[names.index(config)]
        else:
            raise InputError(source, f"no config {config!r} (configs: {', '.join(names)})")
        config, splits = str(chosen.get("config_name", "default")), _config_splits(chosen, everything)
    else:
        if config not in (None, "default"):
            raise InputError(source, f"no config {config!r}: the card declares none (use hf:{snapshot.repo}:default:SPLIT)")
        config, splits = "default", _default_splits(everything)
    splits = {s: fs for s, fs in splits.items() if fs}
    if not splits:
        raise InputError(snapshot.folder, f"no data files ({', '.join(DATA_SUFFIXES)}) for config {config!r}; the "
                                          f"download may be incomplete: {download_command(snapshot.repo)}")
    if split is None:
        split = "test" if "test" in splits else next(iter(splits)) if len(splits) == 1 else None
        if split is None:
            raise InputError(source, f"config {config!r} has several splits; name one "
                                     f"(hf:{snapshot.repo}:{config}:SPLIT): {', '.join(splits)}")
    if split not in splits:
        raise InputError(source, f"config {config!r} has no split {split!r} (splits: {', '.join(splits)})")
    return config, split, splits[split]


# --- reading rows ------------------------------------------------------------------------------------------


def _pyarrow(path: Path):
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise InputError(path, f"reading {path.suffix} files needs pyarrow, which is not installed: {PYARROW_HINT}") from None
    return pyarrow


def _arrow_table(path: Path, columns: list[str] | None = None):
    """A parquet or arrow file as a pyarrow table; with `columns`, only those of them the file has."""
    pa = _pyarrow(path)
    regular_files([path])  # a FIFO in a snapshot would block pyarrow's open forever
    if path.suffix == ".parquet":
        names = pa.parquet.read_schema(path).names
        return pa.parquet.read_table(path, columns=None if columns is None else [c for c in columns if c in names])
    with pa.memory_map(str(path)) as source:
        try:
            table = pa.ipc.open_stream(source).read_all()  # what datasets writes (ArrowWriter)
        except pa.ArrowInvalid:
            source.seek(0)
            table = pa.ipc.open_file(source).read_all()
    return table if columns is None else table.select([c for c in columns if c in table.column_names])


def _json_items(path: Path):
    """(line number, raw line) of every non-blank line of a JSON-lines file; a .json holding one JSON array
    yields (None, object) per element instead."""
    import io

    with io.TextIOWrapper(open_regular(path), encoding="utf-8-sig") as handle:
        head = handle.read(1)
        while head and head.isspace():
            head = handle.read(1)
        handle.seek(0)
        if head == "[" and path.suffix == ".json":
            for item in json.load(handle):
                yield None, item
            return
        for number, line in enumerate(handle, 1):
            if line.strip():
                yield number, line


def _parsed(path: Path, number: int | None, item):
    if number is not None:
        from ..core.jsonl import jsonl_value

        return jsonl_value(item, number, path)  # core/jsonl.py: its one wording
    if not isinstance(item, dict):
        raise InputError(path, f"expected one JSON object per row, got {type(item).__name__}")
    return item


@contextmanager
def _reading(path: Path):
    """Every way reading a data file fails, as one InputError line naming it."""
    try:
        yield
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:  # pyarrow's ArrowInvalid is a ValueError: a damaged or foreign file
        raise InputError(path, f"not a readable {path.suffix} file ({str(exc).splitlines()[0][:160]})") from None


def iter_rows(path: Path, keep=None, columns: list[str] | None = None):
    """The rows of one data file, as dicts, in file order; with `keep(index)`, only the rows it accepts (a
    JSON line it refuses is not even parsed: livecodebench's files hold gigabytes of test cases); with
    `columns`, only those (parquet reads no other column)."""
    with _reading(path):
        if path.suffix in (".parquet", ".arrow"):
            index = 0
            for batch in _arrow_table(path, columns).to_batches():
                for row in batch.to_pylist():
                    if keep is None or keep(index):
                        yield row
                    index += 1
        else:
            for index, (number, item) in enumerate(_json_items(path)):
                if keep is None or keep(index):
                    row = _parsed(path, number, item)
                    yield row if columns is None else {c: row[c] for c in columns if c in row}


def columns_of(path: Path) -> list[str]:
    """A data file's column names (of its first row, for JSON lines)."""
    if path.suffix in (".parquet", ".arrow"):
        with _reading(path):
            return list(_arrow_table(path).schema.names) if path.suffix == ".arrow" else \
                list(_pyarrow(path).parquet.read_schema(path).names)
    return list(next(iter_rows(path), {}))


def count_rows(snapshot: Snapshot, files: list[str]) -> int:
    """How many rows `files` hold, without building them: parquet metadata, an arrow table's length, the
    non-blank lines of JSON lines."""
    total = 0
    for relative in files:
        path = snapshot.folder / relative
        with _reading(path):
            if path.suffix == ".parquet":
                total += _pyarrow(path).parquet.ParquetFile(path).metadata.num_rows
            elif path.suffix == ".arrow":
                total += _arrow_table(path).num_rows
            else:
                total += sum(1 for _ in _json_items(path))
    return total


def read_rows(snapshot: Snapshot, files: list[str], columns: tuple[str, ...] | None = None,
              keep: set[int] | None = None, optional: tuple[str, ...] = ()) -> list[dict]:
    """The rows of `files` in order (only the indices in `keep`, counted over all files, when given), with
    only `columns` (and the `optional` ones a row has) kept; a row lacking one of `columns` is refused naming
    the file and the columns it has."""
    rows: list[dict] = []
    offset = 0
    wanted = None if columns is None else [*columns, *optional]
    for relative in files:
        path = snapshot.folder / relative
        seen = 0

        def take(index: int, offset: int = offset) -> bool:
            nonlocal seen
            seen = index + 1
            return keep is None or offset + index in keep

        for row in iter_rows(path, take, wanted):
            missing = [c for c in columns or () if c not in row]
            if missing:
                raise InputError(path, f"has no column {missing[0]!r} (columns: {', '.join(columns_of(path))})")
            rows.append(row)
        offset += seen
    return rows
