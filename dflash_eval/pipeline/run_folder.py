"""The run folder: one object owns its state file, the settings digest, resume, atomic writes and the
message that names what differs. Stages never touch the folder's files directly.

Layout (docs/result-documents.md documents each file): `run_state.json` (settings, their digest, complete flag),
`samples.jsonl` (rows, appended per prompt), `run.partial.json` while unfinished, then `run.json` and
`per_position.csv`; `written.json` lists every file dflash-eval wrote there (so `--overwrite` removes those
and nothing else) and `run.lock` is the lock one writer holds while it works (filelock: a second process
writing into the same folder is refused, never interleaved).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from ..core.documents import results as R
from ..core.documents.run_document import RunDocument
from ..core.errors import InputError, read_json_object
from ..core.paths import RESULT_FILES


def settings_hash(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def _describe(value: Any) -> str:
    """A setting's value as a person reads it: a digest by its first 8 hex digits, text bare, short."""
    if isinstance(value, str) and len(value) >= 32 and all(c in "0123456789abcdef" for c in value):
        return value[:8]
    text = value if isinstance(value, str) else "none" if value is None else json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _dict_differences(key: str, a: dict, b: dict) -> list[str]:
    """Per entry of a setting that is a mapping (drafter name -> fingerprint, name -> attention rules)."""
    label = "drafter" if key == "drafters" else key
    out = []
    for name in sorted(set(a) | set(b), key=str):
        if name not in a:
            out.append(f"{label} {name}: added")
        elif name not in b:
            out.append(f"{label} {name}: removed")
        elif a[name] != b[name]:
            what = "other checkpoint files, fingerprint " if key == "drafters" else ""
            out.append(f"{label} {name}: {what}{_describe(a[name])} -> {_describe(b[name])}")
    return out


def settings_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """'name: old -> new' for each setting that differs (prompts by count and first differing id)."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if key == "prompts" and isinstance(a, list) and isinstance(b, list):
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            where = (f"first difference at #{first} ({_describe(a[first][0]) if first < len(a) else 'none'} vs "
                     f"{_describe(b[first][0]) if first < len(b) else 'none'})")
            out.append(f"prompts: {len(a)} -> {len(b)} prompts, {where}")
        elif isinstance(a, dict) and isinstance(b, dict):
            out.extend(_dict_differences(key, a, b))
        else:
            out.append(f"{key}: {_describe(a)} -> {_describe(b)}")
    return out


def different_settings(path: Path, detail: str) -> InputError:
    """The one refusal of a resume with other settings (RunFolder.check, and pipeline/preflight.py sooner)."""
    return InputError(path, f"already holds a run with different settings ({detail}); rerun with the same settings "
                            "to resume, --overwrite to replace it, or choose another --out")


WRITTEN = "written.json"  # the files dflash-eval wrote into a folder: what --overwrite may remove
LOCK = "run.lock"
# what older versions wrote, before written.json existed (removed by --overwrite there, and nothing else)
KNOWN_FILES = RESULT_FILES  # what older versions wrote: every name a result folder holds (core/paths.py)


def record_written(folder: Path, *names: str) -> None:
    """Add files (names relative to `folder`) to its written.json: the record `--overwrite` goes by."""
    folder = Path(folder)
    listed = set(written_files(folder) or ())
    if set(names) <= listed:
        return
    R.atomic_write(folder / WRITTEN, json.dumps(sorted(listed | set(names) | {WRITTEN}), indent=0) + "\n")


REPORT_HTML = "report.html"


def write_recorded(folder: Path, name: str, text: str) -> Path:
    """FOLDER/NAME written beside then renamed, and recorded among the folder's written files (so
    `--overwrite` removes it with the rest): how the library leaves every file it adds to a folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    record_written(folder, name)
    R.atomic_write(folder / name, text)
    return folder / name


def write_run_html(folder: Path, text: str, name: str = REPORT_HTML) -> Path:
    """A run's (or track's, or trained-taps') HTML page in its folder, recorded: the one function every
    command that leaves a page in a folder writes it with (run, merge, doctor, track, trained-taps)."""
    return write_recorded(folder, name, text)


def written_files(folder: Path) -> list[str] | None:
    """written.json's list, or None for a folder of an older version that has none."""
    from ..core.errors import regular_file_present

    path = Path(folder) / WRITTEN
    if not regular_file_present(path):  # a FIFO or a link loop is refused, never taken for an older folder
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise InputError(path, "is not the list of files dflash-eval wrote (damaged or edited); remove the folder "
                               "by hand or choose another --out") from None
    if not isinstance(data, list) or not all(isinstance(n, str) for n in data):
        raise InputError(path, "is not a list of file names (damaged or edited)")
    return data


def remove_written(folder: Path, keep: tuple[str, ...] = ()) -> None:
    """--overwrite: delete the files dflash-eval wrote into `folder` (written.json, or the names older
    versions wrote), recursing into the run folders a track keeps under runs/; everything else stays."""
    folder = Path(folder).resolve()
    names = written_files(folder)
    for name in sorted(KNOWN_FILES if names is None else names, reverse=True):  # deepest first
        if name in keep:  # the lock this process holds: deleting it would let a second writer in
            continue
        path = (folder / name).resolve()
        if folder not in path.parents:  # a record never reaches outside its folder
            continue
        if path.is_dir() and not path.is_symlink():
            remove_written(path)
            with contextlib.suppress(OSError):
                path.rmdir()  # only when nothing foreign is left in it
        elif path.is_file() or path.is_symlink():
            path.unlink()


class FolderLock:
    """An exclusive, non-blocking lock on a result folder (the `filelock` package: an OS lock on LOCK, released
    when the process ends however it ends). A second writer is refused by name, never interleaved."""

    def __init__(self, folder: Path, name: str = LOCK):
        from filelock import FileLock

        self.folder = Path(folder)
        self.name = name
        self._lock = FileLock(str(self.folder / name), timeout=0)

    def acquire(self) -> None:
        from filelock import Timeout

        try:
            self._lock.acquire()
        except Timeout:
            raise InputError(self.folder, f"is in use: another dflash-eval process is writing into it (it holds "
                                          f"{self.name}); wait for it to finish, or choose another --out") from None
        except OSError as exc:
            raise InputError(self.folder / self.name, f"cannot lock: {exc.strerror or exc}") from None

    def release(self) -> None:
        if self._lock.is_locked:
            self._lock.release(force=True)


_CLAIMED: dict[tuple[Path, str], FolderLock] = {}  # the folders this process claimed (`claimed`), by path and lock


def held_lock(folder: Path, name: str = LOCK) -> FolderLock:
    """The lock this process claimed on `folder` (`claimed`), else a new one: a command's RunFolder or
    TrackFolder goes on holding the lock its command took at the start, never a second one of its own (which
    the first would refuse)."""
    return _CLAIMED.get((Path(folder).absolute(), name)) or FolderLock(folder, name)


@contextlib.contextmanager
def claimed(folder: Path | None, name: str = LOCK):
    """The one guard before anything in a result folder is replaced or deleted: a command that writes into
    `folder` calls this first, before any slow work (imports, tokenizers, hashing, models), and holds the
    folder's lock from there to its end. The lock is taken with zero wait: a folder another process is
    still writing is refused at once, naming its lock, so that process's results (it may already have
    printed `results:`) are never replaced by a command that merely started while it ran and reached the
    folder after it finished. Only a folder that holds the lock file already is locked here: no file is
    created by a command that may yet be refused (a new folder is locked by `RunFolder.open` when it creates
    the run, a folder of an older version by `RunFolder.check`)."""
    if folder is None:
        yield None
        return
    key = (Path(folder).absolute(), name)
    if key in _CLAIMED:  # already claimed by this command (the CLI, then the library under it)
        yield _CLAIMED[key]
        return
    from ..core.paths import output_path

    output_path(Path(folder), "--out", folder=True)  # never a lock file made inside a result it may not write
    lock = FolderLock(folder, name)
    if (Path(folder) / name).exists():  # a folder a writer of ours made (it records its lock from the start)
        lock.acquire()
    _CLAIMED[key] = lock
    try:
        yield lock
    finally:
        del _CLAIMED[key]
        lock.release()


class RunFolder:
    """`--out`: created fresh, or resumed when it holds an unfinished run with the same settings. Opened, it
    holds the folder's lock until `finish` or `close`."""

    def __init__(self, path: Path, settings: dict[str, Any], *, owner: Path | None = None):
        """`owner`: the result folder this run belongs to (a track's runs/<label>), the one writer allowed
        inside it; a user's --out is never inside another result folder (core/paths.output_path)."""
        self.path = Path(path)
        self.settings = settings
        self.digest = settings_hash(settings)
        self.lock = held_lock(self.path)
        self.owner = owner

    def _guard(self) -> None:
        from ..core.paths import output_path, writable_dir

        if self.owner is None:
            output_path(self.path, "--out", folder=True)
        else:
            writable_dir(self.path, "--out")

    def check(self, overwrite: bool = False) -> None:
        """What `open` would refuse, found without writing anything (a foreign folder, a run with other
        settings, a folder another process is writing into): called before the models load, so a refusal
        comes at once. An existing run folder's lock is taken here and held until `finish` or `close`, so
        no other writer slips in between this check and the last file written."""
        self._guard()
        state_path = self.path / R.STATE
        if state_path.exists():
            self.lock.acquire()  # held from here: a run still writing here is refused before anything loads
            try:
                if not overwrite:
                    self._check_settings(read_json_object(state_path, missing="run state missing"))
            except BaseException:
                self.lock.release()
                raise
        elif self.path.exists() and any(p.name not in (LOCK, WRITTEN) for p in self.path.iterdir()):
            raise InputError(self.path, "exists and is not a dflash-eval run folder (no run_state.json); choose "
                                        "another --out (--overwrite only replaces folders dflash-eval wrote)")

    def finished_document(self) -> RunDocument | None:
        """run.json of the finished run this folder holds with these very settings (its state complete, its
        rows and run.json read and checked like every reader checks them), or None: rerunning the command
        that finished a run leaves its record as it is (its work counters and `created` are what that run
        did, not a recount of nothing). Call after `check` (the lock is held)."""
        state_path = self.path / R.STATE
        if not state_path.exists():
            return None
        state = read_json_object(state_path, missing="run state missing")
        if state.get("complete") is not True or state.get("settings_hash") != self.digest:
            return None
        if not (self.path / R.RUN_JSON).exists():
            return None  # a finish cut between the state and run.json: the run is finished again
        from ..core.documents.run_rows import run_rows

        document = R.read_run_document(self.path)
        run_rows(self.path, document)  # its rows must be what its counts say, or the run is refused by name
        return document

    def _check_settings(self, state: dict[str, Any]) -> None:
        if state.get("settings_hash") != self.digest:
            recorded = state.get("settings") if isinstance(state.get("settings"), dict) else None
            differences = settings_differences(recorded or {}, self.settings)
            detail = "; ".join(differences) if recorded else "settings not recorded (older run)"
            raise different_settings(self.path, detail)

    def open(self, overwrite: bool = False) -> list[dict[str, Any]]:
        """Create, resume or refuse (naming each setting that differs); the rows already written.
        `overwrite` replaces what dflash-eval wrote into the folder, never a foreign file. Call it once every
        input is validated: it is the first thing that touches the folder."""
        self._guard()
        state_path = self.path / R.STATE
        if state_path.exists():
            self.lock.acquire()  # (already held since `check`: acquiring again is a no-op)
            try:
                return self._reopen(overwrite)
            except BaseException:
                self.lock.release()
                raise
        if self.path.exists() and any(p.name not in (LOCK, WRITTEN) for p in self.path.iterdir()):
            raise InputError(self.path, "exists and is not a dflash-eval run folder (no run_state.json); choose "
                                        "another --out (--overwrite only replaces folders dflash-eval wrote)")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(self.path, f"cannot create the folder: {exc.strerror or exc}") from None
        self.lock.acquire()
        if state_path.exists():  # another process created it between our look and our lock: theirs
            self.lock.release()
            raise InputError(self.path, "another dflash-eval process has just started a run in this folder; "
                                        "choose another --out")
        record_written(self.path, LOCK)
        self._write_state(complete=False)
        return []

    def _reopen(self, overwrite: bool) -> list[dict[str, Any]]:
        state = read_json_object(self.path / R.STATE, missing="run state missing")
        if overwrite:
            remove_written(self.path, keep=(LOCK,))
            record_written(self.path, LOCK)
            self._write_state(complete=False)
            return []
        self._check_settings(state)
        rows = R.read_samples(self.path / R.SAMPLES, torn_tail="drop")
        self._check_rows_belong(rows)
        from ..core.documents.invariants import check_samples_row

        for row in rows:  # a resumed run never builds on a row it could not have written
            check_samples_row(row, self.path / R.SAMPLES)
        return rows

    def _check_rows_belong(self, rows: list[dict[str, Any]]) -> None:
        """Rows of a resumed run name only this run's prompts and drafters (anything else: edited, or another
        run's file copied in), refused by name rather than mixed into the results."""
        prompts = {str(p[0]) for p in self.settings.get("prompts") or []}
        drafters = set(self.settings.get("drafters") or {})
        for row in rows:
            if str(row.get("prompt_id")) not in prompts:
                raise InputError(self.path / R.SAMPLES, f"holds a row for prompt {row.get('prompt_id')!r}, which "
                                                        "this run does not have; --overwrite to start again")
            if drafters and row.get("drafter") not in drafters:
                raise InputError(self.path / R.SAMPLES, f"holds a row of drafter {row.get('drafter')!r}, which this "
                                                        "run does not have; --overwrite to start again")

    def close(self) -> None:
        self.lock.release()

    def keep_complete(self, rows: list[dict[str, Any]], expected: set) -> list[dict[str, Any]]:
        """Keep the rows of prompts every drafter finished (a torn prompt is redone); those rows.
        `expected`: the drafter names, or (name, sample) pairs when each prompt is sampled K times."""
        by_prompt: dict[str, set] = {}
        for row in rows:
            key = row["drafter"] if all(isinstance(e, str) for e in expected) else (row["drafter"], row.get("sample") or 0)
            by_prompt.setdefault(row["prompt_id"], set()).add(key)
        complete = {pid for pid, names in by_prompt.items() if names == expected}
        kept = [r for r in rows if r["prompt_id"] in complete]
        self.write_rows(kept)
        return kept

    def write_rows(self, rows: list[dict[str, Any]]) -> None:
        """samples.jsonl with exactly these rows (merge writes the joined shards' rows at once)."""
        self._write(R.SAMPLES, "".join(json.dumps(r) + "\n" for r in rows))

    def append(self, rows: list[dict[str, Any]]) -> None:
        """One prompt's rows, all drafters at once (resume relies on that)."""
        record_written(self.path, R.SAMPLES)
        R.append_text(self.path / R.SAMPLES, "".join(json.dumps(r) + "\n" for r in rows))

    def write_partial(self, document: dict[str, Any], done: int, total: int) -> None:
        self._write(R.PARTIAL_JSON, json.dumps({**document, "incomplete": {"done": done, "total": total}}, indent=1) + "\n")

    def finish(self, document: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        """The final files, then the lock released: `extra` (name -> text, e.g. report.html) is written
        under the lock too, so no other writer replaces the run between its results and its report."""
        self._write(R.RUN_JSON, json.dumps(document, indent=1) + "\n")
        (self.path / R.PARTIAL_JSON).unlink(missing_ok=True)
        self._write(R.PER_POSITION, R.per_position_csv(document["drafters"]))
        splits = R.per_position_splits_csv(document["drafters"])  # k, depth, segment, token class
        if splits is not None:
            self._write(R.PER_POSITION_SPLITS, splits)
        for name, text in (extra or {}).items():
            write_run_html(self.path, text, name)
        self._write_state(complete=True)
        self.close()

    def _write(self, name: str, text: str) -> None:
        record_written(self.path, name)
        R.atomic_write(self.path / name, text)

    def _write_state(self, complete: bool) -> None:
        self._write(R.STATE, json.dumps({"settings_hash": self.digest, "complete": complete,
                                         "settings": self.settings}))
