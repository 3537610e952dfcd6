"""Revisions in provenance: a drafter (or target) resolved from the HF cache records the commit of its snapshot
beside its fingerprint, `inspect` shows it, and `diff` and `track` warn when two results of one repository name
measured different revisions or architectures (z-lab/dflash #152: one name, 6 layers / 8 taps / window 4096 at
one commit, 4 / 6 / 2048 at an earlier one). The cache is written as hf_hub_download writes it (blobs, relative
symlinks, refs/main) and read offline by huggingface_hub itself."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.core.snapshots import conflicts, drafter_architecture, snapshot_of

OLD = "1111111111111111111111111111111111111111"
NEW = "2222222222222222222222222222222222222222"


def test_snapshot_of_reads_the_cache_layout():
    assert snapshot_of(f"/x/hub/models--z-lab--Qwen3.5-122B-A10B-DFlash/snapshots/{OLD}") == {
        "repo": "z-lab/Qwen3.5-122B-A10B-DFlash", "revision": OLD}
    assert snapshot_of(f"/x/hub/models--z-lab--q/snapshots/{OLD}/sub") == {"repo": "z-lab/q", "revision": OLD}
    assert snapshot_of("/data/checkpoints/step-100") is None and snapshot_of(None) is None
    assert snapshot_of("/x/models--z-lab--q/blobs/abc") is None  # a blob is not a snapshot


def test_conflicts_name_the_repository_revisions_and_shapes():
    arch_new = {"layers": 6, "taps": 8, "sliding window": [4096]}
    arch_old = {"layers": 4, "taps": 6, "sliding window": [2048]}
    warnings = conflicts([("A", {"repo": "z-lab/big", "revision": NEW}, arch_new),
                          ("B", {"repo": "z-lab/big", "revision": OLD}, arch_old),
                          ("C", None, arch_old), ("D", {"repo": "other/x", "revision": OLD}, arch_old)])
    assert len(warnings) == 1 and "A and B name one repository, z-lab/big" in warnings[0]
    assert f"revisions {NEW[:12]} vs {OLD[:12]}" in warnings[0]
    assert "layers 6 vs 4, taps 8 vs 6, sliding window 4096 vs 2048" in warnings[0]
    assert conflicts([("A", {"repo": "r/x", "revision": OLD}, arch_old),
                      ("B", {"repo": "r/x", "revision": OLD}, arch_old)]) == []


def _publish(cache, source, commit):
    from test_reference_drafters import cache_repo

    return cache_repo(cache, "acme/drafter", {p.name: p.read_bytes() for p in source.iterdir() if p.is_file()},
                      commit=commit)


def _run(target, out, cache):
    return CliRunner().invoke(app, [
        "run", "-d", "acme/drafter:mine", "--target", str(target), "--prompts", "demo", "--limit", "2",
        "--max-new-tokens", "8", "--no-thinking", "--out", str(out), "--cache-dir", str(cache), "--device", "cpu",
        "--no-html"])


@pytest.fixture
def two_revisions(drafter_dirs, test_bed, tmp_path, monkeypatch):
    """One repository name, two commits with two architectures (all-full layers, then a sliding layer)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    _publish(cache, drafter_dirs["zlab"], OLD)
    first = _run(test_bed["qwen3"], tmp_path / "old", tmp_path / "c")
    assert first.exit_code == 0, first.output
    _publish(cache, drafter_dirs["sliding"], NEW)  # refs/main moves to the new commit
    second = _run(test_bed["qwen3"], tmp_path / "new", tmp_path / "c")
    assert second.exit_code == 0, second.output
    return tmp_path / "old", tmp_path / "new"


def test_revision_recorded_shown_and_warned_by_diff_and_track(two_revisions, test_bed):
    old, new = two_revisions
    runs = [json.loads((folder / "run.json").read_text()) for folder in (old, new)]
    assert [r["drafters"][0]["snapshot"] for r in runs] == [{"repo": "acme/drafter", "revision": OLD},
                                                          {"repo": "acme/drafter", "revision": NEW}]
    assert runs[0]["provenance"]["target"]["snapshot"] is None  # a local folder: its fingerprint is its identity
    assert runs[0]["drafters"][0]["fingerprint"] != runs[1]["drafters"][0]["fingerprint"]

    shown = CliRunner().invoke(app, ["inspect", "acme/drafter"], env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output
    assert f"acme/drafter at revision {NEW} (HF cache)" in shown.output

    compared = CliRunner().invoke(app, ["diff", str(old), str(new), "--json"])
    assert compared.exit_code == 0, compared.output
    warnings = json.loads(compared.output)["warnings"]
    assert len(warnings) == 1 and "name one repository, acme/drafter" in warnings[0]
    assert f"revisions {OLD[:12]} vs {NEW[:12]}" in warnings[0] and "sliding window None vs 3" in warnings[0]

    # track: rows as track writes them (track_folder.track_row) from these two runs' drafter objects
    from dflash_eval.core.track_summary import curve
    from dflash_eval.formats.checkpoints import read_spec
    from dflash_eval.pipeline.inputs import DrafterEntry
    from dflash_eval.pipeline.track_folder import track_row

    rows = []
    for step, (folder, run) in enumerate(zip((old, new), runs)):
        d = run["drafters"][0]
        entry = DrafterEntry(d["name"], folder, read_spec(d["path"])[0])
        rows.append(track_row("checkpoint", entry, d["fingerprint"], f"step-{step}", d, step=step,
                              step_source="test", identity=()))
    assert rows[1]["snapshot"]["revision"] == NEW and rows[1]["architecture"] == drafter_architecture(
        runs[1]["drafters"][0]["spec"])
    notes = curve(rows).notes
    assert any("step 0 and step 1 name one repository, acme/drafter" in n for n in notes)
