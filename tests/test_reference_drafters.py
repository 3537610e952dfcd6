"""References: z-lab drafter registry, offline resolution through a real Hugging Face cache layout, paper tau.

The cache is built on disk exactly as huggingface_hub lays it out (blobs named by git blob sha1, snapshot
files as relative symlinks into blobs, refs/main holding the commit sha with no newline), and found by the
real `snapshot_download(local_files_only=True)`: nothing here is mocked and nothing reaches the network.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import constants

from dflash_eval.core.errors import InputError
from dflash_eval.formats.references import (
    published_tau,
    published_tau_source,
    resolve_recorded_verifier,
    resolve_zlab_reference,
    zlab_reference_for,
)

SHA = "0123456789abcdef0123456789abcdef01234567"


def cache_repo(cache: Path, repo_id: str, files: dict[str, bytes], commit: str = SHA,
               tree_listing: dict[str, bytes] | None = None) -> Path:
    """Write `repo_id` into `cache` as hf_hub_download would; return the snapshot folder."""
    storage = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = storage / "snapshots" / commit
    for name, content in files.items():
        blob_id = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()  # git blob sha1 (non-LFS etag)
        blob = storage / "blobs" / blob_id
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(content)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    (storage / "refs" / "main").write_text(commit)  # no trailing newline: huggingface_hub does not strip it
    if tree_listing is not None:  # trees/<commit>.json, written by snapshot_download since huggingface_hub 2.x
        listing = {n: {"size": len(c), "blob_id": hashlib.sha1(b"blob %d\0" % len(c) + c).hexdigest()}
                   for n, c in tree_listing.items()}
        (storage / "trees").mkdir(exist_ok=True)
        (storage / "trees" / f"{commit}.json").write_text(json.dumps({"format_version": 1, "files": listing}))
    return snapshot


DRAFTER_FILES = {"config.json": b'{"architectures": ["DFlashDraftModel"], "block_size": 16}',
                 "model.safetensors": b"not really weights"}


@pytest.fixture
def hf_cache(tmp_path, monkeypatch) -> Path:
    """An empty HF cache, made the library default too (the constant, since the env is read at import)."""
    cache = tmp_path / "hf_home" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_registry_maps_repo_ids_case_insensitively():
    assert zlab_reference_for("Qwen/Qwen3-8B") == "z-lab/Qwen3-8B-DFlash-b16"
    assert zlab_reference_for("qwen/QWEN3-8b") == "z-lab/Qwen3-8B-DFlash-b16"
    assert zlab_reference_for("meta-llama/Llama-3.1-8B-Instruct") == "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat"
    assert zlab_reference_for("Qwen/Qwen3.5-35B-A3B") == "z-lab/Qwen3.5-35B-A3B-DFlash"


def test_registry_maps_local_folders(tmp_path):
    by_name = tmp_path / "Qwen3-8B"
    by_name.mkdir()
    assert zlab_reference_for(str(by_name)) == "z-lab/Qwen3-8B-DFlash-b16"
    by_config = tmp_path / "my-target"
    by_config.mkdir()
    (by_config / "config.json").write_text(json.dumps({"_name_or_path": "Qwen/Qwen3-4B"}))
    assert zlab_reference_for(str(by_config)) == "z-lab/Qwen3-4B-DFlash-b16"
    # a cache snapshot: the models--Org--Name folder wins over an uploader's stray _name_or_path
    snap = cache_repo(tmp_path / "hub", "Qwen/Qwen3-8B", {"config.json": b'{"_name_or_path": "/data/ckpt/base"}'})
    assert zlab_reference_for(str(snap)) == "z-lab/Qwen3-8B-DFlash-b16"


def test_unknown_target_lists_known_targets():
    with pytest.raises(InputError) as caught:
        zlab_reference_for("mistralai/Mistral-7B-v0.1")
    message = str(caught.value)
    assert message.startswith("mistralai/Mistral-7B-v0.1: no published z-lab drafter for this target")
    assert "Qwen/Qwen3-8B" in message and "openai/gpt-oss-20b" in message and "\n" not in message


def test_resolves_cached_drafter_offline(hf_cache):
    snap = cache_repo(hf_cache, "z-lab/Qwen3-8B-DFlash-b16", DRAFTER_FILES)
    for cache_dir in (hf_cache, None):  # explicit, and through the library default
        found = resolve_zlab_reference("Qwen/Qwen3-8B", cache_dir=cache_dir)
        assert found.resolve() == snap.resolve()
        assert json.loads((found / "config.json").read_text())["block_size"] == 16  # through the blob symlink
    target_snapshot = cache_repo(hf_cache, "Qwen/Qwen3-8B", {"config.json": b"{}"}, commit="f" * 40)
    assert resolve_zlab_reference(str(target_snapshot), cache_dir=hf_cache).resolve() == snap.resolve()


def test_offline_env_is_honoured_at_call_time(hf_cache, monkeypatch):
    """HF_HUB_OFFLINE set after huggingface_hub was imported still means: no download attempt."""
    cache_repo(hf_cache, "z-lab/Qwen3-8B-DFlash-b16", DRAFTER_FILES)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    calls = []
    real = huggingface_hub.snapshot_download

    def spy(*args, **kwargs):
        calls.append(kwargs.get("local_files_only", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", spy)
    resolve_zlab_reference("Qwen/Qwen3-8B", cache_dir=hf_cache)
    assert calls == [True]


def test_known_but_not_cached_says_how_to_download(hf_cache):
    with pytest.raises(InputError) as caught:
        resolve_zlab_reference("Qwen/Qwen3-4B", cache_dir=hf_cache)
    message = str(caught.value)
    assert message.startswith("z-lab/Qwen3-4B-DFlash-b16: z-lab reference drafter for Qwen/Qwen3-4B is not in")
    assert "hf download z-lab/Qwen3-4B-DFlash-b16" in message and "\n" not in message
    assert caught.value.__suppress_context__  # no chained huggingface_hub traceback


def test_incomplete_cached_snapshot_is_reported(hf_cache):
    cache_repo(hf_cache, "z-lab/Qwen3-8B-DFlash-b16", {"config.json": DRAFTER_FILES["config.json"]},
               tree_listing=DRAFTER_FILES)  # the listing says model.safetensors should be there
    with pytest.raises(InputError, match="incomplete; download it with: hf download z-lab/Qwen3-8B-DFlash-b16"):
        resolve_zlab_reference("Qwen/Qwen3-8B", cache_dir=hf_cache)


def test_recorded_verifier(hf_cache, tmp_path):
    drafter = tmp_path / "runs" / "drafter"
    drafter.mkdir(parents=True)
    target = tmp_path / "runs" / "target"
    target.mkdir()
    assert resolve_recorded_verifier(drafter, "../target").resolve() == target.resolve()
    assert resolve_recorded_verifier(drafter, str(target)) == target
    snap = cache_repo(hf_cache, "Qwen/Qwen3-8B", {"config.json": b"{}"})
    assert resolve_recorded_verifier(drafter, "Qwen/Qwen3-8B", cache_dir=hf_cache).resolve() == snap.resolve()
    assert resolve_recorded_verifier(drafter, "Qwen/Qwen3-8B").resolve() == snap.resolve()  # library default
    with pytest.raises(InputError) as caught:
        resolve_recorded_verifier(drafter, "Qwen/Qwen3-4B", cache_dir=hf_cache)
    assert caught.value.path == str(drafter)
    assert "Qwen/Qwen3-4B" in caught.value.problem and "hf download Qwen/Qwen3-4B" in caught.value.problem
    with pytest.raises(InputError, match="/nowhere/target"):
        resolve_recorded_verifier(drafter, "/nowhere/target", cache_dir=hf_cache)


def test_published_tau(tmp_path):
    assert published_tau("Qwen/Qwen3-8B", "humaneval") == 6.55
    assert published_tau("Qwen/Qwen3-8B", "HumanEval", temperature=1) == 5.4
    assert published_tau("Qwen/Qwen3-8B", "humaneval", drafter_family="EAGLE-3") == 3.36
    assert published_tau("Qwen/Qwen3-4B", "mt_bench") == 4.35
    local = tmp_path / "Qwen3-8B"
    local.mkdir()
    assert published_tau(str(local), "mbpp") == 6.0
    assert published_tau("Qwen/Qwen3-8B", "no-such-set") is None
    assert published_tau("openai/gpt-oss-20b", "humaneval") is None
    assert "2602.06036" in published_tau_source()


def test_the_paper_s_temperature_one_number_with_the_settings_that_differ():
    from dflash_eval.formats.references import published_comparison, published_tau

    provenance = {"target": {"name": "Qwen/Qwen3-8B", "path": "/models/qwen3-8b"}, "temperature": 1,
                  "prompts": {"sets": {"humaneval": 164}}, "enable_thinking": False, "max_new_tokens": 2048,
                  "sampling": {"draft_policy": "argmax", "top_p": 1.0, "top_k": 0}, "estimate": True}
    paper = published_tau("Qwen/Qwen3-8B", "humaneval", temperature=1)
    assert paper is not None and paper != published_tau("Qwen/Qwen3-8B", "humaneval")
    (line,) = published_comparison(provenance, [16])
    assert f"paper tau for humaneval at temperature 1 (z-lab drafter): {paper:.2f}" in line
    assert "draft policy argmax" in line and "offline estimate" in line and "max_new_tokens" not in line
    same = {**provenance, "sampling": {"draft_policy": "sample"}, "estimate": False}
    assert published_comparison(same, [16])[0].endswith("same settings")
    assert published_comparison({**provenance, "target": {"name": "tiny"}}, [16]) == []
