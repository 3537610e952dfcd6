"""trained-taps: the training run's own hidden states, read back as each trainer reads them, against ours.

Fixtures are written by dflash_eval/testing/trainer_data.py exactly as each trainer writes its files, from the
tiny targets' real taps; the readers are checked against the trainers' own readers where they import on CPU
(speculators' ArrowDataset with hs_connectors' FileTransfer / FP8Transfer, SpecForge's load_feature_file +
normalize_offline_sample + list_feature_files). Then: correct data within the measured noise floor (dense and
hybrid), every injected skew named with its layer, evaluation on correct fp32 training taps equal to ours, the
shifted data's gap with an interval above 0, the CLI, the bad inputs, and doctor --trained-taps.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.commands.trained_taps import TrainedTapsSettings, trained_taps
from dflash_eval.core.settings.run_settings import RunOptions
from dflash_eval.formats.training_data import read_training_data
from dflash_eval.model.training_taps import load_sample
from dflash_eval.testing import trainer_data as W

runner = CliRunner()
TAPS = [1, 2, 3]  # z-lab numbering (speculators aux ids 2, 3, 4)


def _samples(target, count: int, tokens: int):
    from dflash_eval.pipeline.continuations import Prompt, generate_greedy, prompt_ids
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS

    ids = [prompt_ids(target.tokenizer, Prompt(str(i), p), False) for i, p in enumerate(DEMO_PROMPTS[:count])]
    return W.samples_from([(torch.tensor(a + b), len(a)) for a, b in zip(ids, generate_greedy(target, ids, tokens))])


@pytest.fixture(scope="module")
def bed(test_bed, tmp_path_factory):
    """The dense target in fp32 and bf16, 12 training samples (prompt + 24 greedy tokens, continuation
    supervised), and a drafter trained on taps 2, 3, 4 while its checkpoint records 1, 2, 3 (train.shift_taps)."""
    from dflash_eval.demo.train import fixture_config, train_drafter
    from dflash_eval.model.target import load_target

    root = tmp_path_factory.mktemp("trained-taps")
    t32 = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    t16 = load_target(str(test_bed["qwen3"]), device="cpu", dtype="bfloat16")
    samples = _samples(t32, 12, 24)
    sequences = [(s.ids, int((s.loss_mask == 0).sum())) for s in samples]
    shifted = train_drafter(t32, sequences, fixture_config(block_size=4, shift_taps=1, steps=150), root / "shifted")
    return {"root": root, "target": test_bed["qwen3"], "t32": t32, "t16": t16, "samples": samples, "shifted": shifted}


def _states(bed, target="t16", **skew):
    pairs = [W.states(bed[target], s, TAPS, **skew) for s in bed["samples"]]
    return [a for a, _ in pairs], [b for _, b in pairs]


CPU = RunOptions(device="cpu")  # the run's settings trained-taps reads: the device (and the anchors per forward)


def _run(bed, data, **options):
    options.setdefault("split", "all")
    return trained_taps(TrainedTapsSettings(data=data, target=str(bed["target"]), **options), CPU).result


def test_tap_stats_and_the_judgement_on_hand_computed_cases():
    """stored [[1, 2], [3, 4]] vs ours [[1, 2], [3, 5]]: dot 34, sums of squares 30 and 39, one unit of difference;
    then the rules: within 4 x the floor is ok, a neighbour within its floor (and twice as close) is a shift."""
    import math

    from dflash_eval.core.tap_skew import TapStats, judge_tap
    from dflash_eval.model.tap_compare import tap_stats

    s = tap_stats(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 2.0], [3.0, 5.0]]))
    assert (s.dot, s.ss_stored, s.ss_ours, s.ss_diff, s.max_abs, s.bf16_equal, s.zero) == (34, 30, 39, 1, 1, 3, 0)
    assert math.isclose(s.rel_l2, math.sqrt(1 / 39)) and math.isclose(s.cosine, 34 / math.sqrt(30 * 39))
    bad = tap_stats(torch.tensor([[float("nan"), 0.0], [0.0, 0.0]]), torch.ones(2, 2))
    assert (bad.nonfinite, bad.compared, bad.nonfinite_samples, bad.zero_samples) == (1, 3, 1, 0)
    assert tap_stats(torch.zeros(2, 2), torch.ones(2, 2)).all_zero

    def rel(x):  # TapStats whose relative L2 is x
        return TapStats(elements=4, compared=4, samples=1, ss_ours=1.0, ss_stored=1.0, ss_diff=x * x)

    floors = {t: rel(0.01) for t in (0, 1, 2)}
    assert judge_tap(0, 1, {0: rel(0.5), 1: rel(0.012), 2: rel(0.6)}, floors)["status"] == "ok"
    shifted = judge_tap(0, 1, {0: rel(0.011), 1: rel(0.5), 2: rel(0.6)}, floors)
    assert (shifted["status"], shifted["match"]) == ("shifted", 0) and "numbered from the embeddings" in shifted["line"]
    assert judge_tap(0, 1, {0: rel(0.5), 1: rel(0.03), 2: rel(0.005)}, floors)["match"] == 2  # own within, but 6x farther
    assert judge_tap(0, 1, {0: rel(0.5), 1: rel(0.3), 2: rel(0.6)}, floors)["status"] == "unmatched"


def test_speculators_files_read_as_speculators_reads_them(bed):
    """ArrowDataset (split "val", train ratio 0.9: rows 10 and 11) through FileTransfer and FP8Transfer is the
    oracle: the same fc input (hidden_states[:, :-1] flattened), teacher, token ids and loss mask."""
    from hs_connectors import FP8Transfer
    from speculators.train.data import ArrowDataset

    slots, teachers = _states(bed)
    for fp8 in (False, True):
        folder = W.write_speculators(bed["root"] / f"spec-oracle-{fp8}", bed["samples"], slots, teachers, fp8=fp8)
        data = read_training_data(folder)
        assert [r.index for r in data.samples] == [10, 11] and data.total == 12
        transfer = FP8Transfer(folder / "hidden_states") if fp8 else None
        oracle = ArrowDataset(max_len=4096, datapath=str(folder), transfer=transfer, on_missing="raise", train_ratio=0.9,
                              split="val")
        assert len(oracle) == 2
        for k, ref in enumerate(data.samples):
            ours, theirs = load_sample(data, ref, 64), oracle[k]
            assert ours.dtype == ("F8_E4M3" if fp8 else "BF16")
            assert torch.equal(ours.fc_input, theirs["hidden_states"])
            assert torch.equal(ours.teacher, theirs["verifier_last_hidden_states"])
            assert torch.equal(ours.input_ids, theirs["input_ids"]) and torch.equal(ours.loss_mask, theirs["loss_mask"])


def test_specforge_files_read_as_specforge_reads_them(bed):
    """SpecForge's own order (list_feature_files) and tensors (load_feature_file + normalize_offline_sample), for
    plain and gzip files of padded batches; our reader strips the right padding (token 0, mask 0)."""
    from specforge.algorithms.common.dflash_family_data import normalize_offline_sample
    from specforge.runtime.data_plane.feature_store import load_feature_file
    from specforge.runtime.data_plane.offline_reader import list_feature_files

    slots, _ = _states(bed)
    for compress in (False, True):
        folder = W.write_specforge(bed["root"] / f"sf-oracle-{compress}", bed["samples"], slots, compress=compress,
                                   batch=4)
        data = read_training_data(folder)
        assert [str(r.file) for r in data.samples] == list_feature_files(str(folder))
        assert [r.index for r in data.samples][:4] == [0, 1, 10, 11]  # sorted paths, as SpecForge iterates them
        for ref in data.samples:
            ours, theirs = load_sample(data, ref, 64), normalize_offline_sample(load_feature_file(str(ref.file)), 4096)
            T = ours.input_ids.shape[0]
            assert T == len(bed["samples"][ref.index].ids) and ours.padding == theirs["input_ids"].shape[1] - T
            assert torch.equal(ours.fc_input, theirs["hidden_states"][0, :T])
            assert torch.equal(ours.input_ids, theirs["input_ids"][0, :T])
            assert ours.teacher is None


def test_deepspec_records_are_the_56_byte_layout(bed):
    """No DeepSpec package imports: the record bytes are checked by hand against pack_index_record's layout
    (<QIIQQQQQ: sample id, shard id, seq_len, then five offsets in write order), the arrays against what was stored."""
    import struct

    slots, teachers = _states(bed)
    folder = W.write_deepspec(bed["root"] / "ds-layout", bed["samples"], slots, teachers, TAPS, "t")
    raw = (folder / "samples.idx").read_bytes()
    assert len(raw) == 56 * 12
    T = len(bed["samples"][0].ids)
    assert struct.unpack("<QIIQQQQQ", raw[:56]) == (0, 0, T, 0, 4 * T, 5 * T, 6 * T, 6 * T + 2 * T * 3 * 64)
    data = read_training_data(folder)
    assert data.stored_layers == tuple(TAPS) and data.teacher == "post-norm"
    sample = load_sample(data, data.samples[3], 64)
    assert torch.equal(sample.slots, slots[3].to(torch.bfloat16)) and torch.equal(sample.teacher, teachers[3].bfloat16())
    assert torch.equal(sample.input_ids, bed["samples"][3].ids) and torch.equal(sample.loss_mask, bed["samples"][3].loss_mask)


@pytest.mark.parametrize("kind", ["qwen3", "qwen3_5_text"])
def test_correct_bf16_data_is_within_the_measured_noise_floor(kind, bed, test_bed, tmp_path):
    """A correct bf16 extraction (the target's own bf16 pass, as vLLM hands it over), in every format: every slot
    and the teacher within NOISE_FACTOR x the floor, and the floor itself measured (non-zero, bf16-sized)."""
    from dflash_eval.model.target import load_target

    target = load_target(str(test_bed[kind]), device="cpu", dtype="bfloat16") if kind != "qwen3" else bed["t16"]
    samples = bed["samples"][:6] if kind == "qwen3" else _samples(target, 6, 12)
    pairs = [W.states(target, s, TAPS) for s in samples]
    slots, pre = [a for a, _ in pairs], [b for _, b in pairs]
    post = [W.states(target, s, TAPS, teacher="post")[1] for s in samples]
    folders = {"speculators": W.write_speculators(tmp_path / "spec", samples, slots, pre),
               "specforge": W.write_specforge(tmp_path / "sf", samples, slots, batch=3),
               "deepspec": W.write_deepspec(tmp_path / "ds", samples, slots, post, TAPS, "t"),
               "legacy": W.write_legacy(tmp_path / "legacy", samples, slots, pre, TAPS + [5], "t")}
    for name, folder in folders.items():
        options = {"layer_ids": "2,3,4"} if name == "speculators" else {"layer_ids": "1,2,3"} if name == "specforge" else {}
        result = trained_taps(TrainedTapsSettings(data=folder, target=str(test_bed[kind]), split="all", **options),
                              CPU).result
        assert [s["status"] for s in result["slots"]] == ["ok"] * (3 + (name != "specforge")), (name, result["verdict"])
        assert result["findings"] == [] and result["verdict"].startswith("the training taps are the target's own")
        for slot in result["slots"][:3]:
            assert 1e-3 < slot["floor_rel_l2"] < 0.2 and slot["rel_l2"] <= 4 * slot["floor_rel_l2"]


def test_each_injected_skew_is_named_with_its_layer(bed, test_bed, tmp_path):
    samples = bed["samples"]
    down, down_t = _states(bed, shift=-1)
    result = _run(bed, W.write_speculators(tmp_path / "down", samples, down, down_t), layer_ids="2,3,4")
    assert [(s["status"], s["match"]) for s in result["slots"][:3]] == [("shifted", 0), ("shifted", 1), ("shifted", 2)]
    assert result["verdict"].startswith("your training taps are the target's layers shifted by one: slot 0 matches our "
                                        "tap 0, not 1: the data was numbered from the embeddings")
    up, _ = _states(bed, shift=1)
    _, post = _states(bed, teacher="post")
    result = _run(bed, W.write_deepspec(tmp_path / "up", samples, up, post, TAPS, "t"))
    assert [s["match"] for s in result["slots"][:3]] == [2, 3, 4] and result["slots"][3]["status"] == "ok"
    assert "slot 0 matches our tap 2, not 1" in result["verdict"]
    slots, pre = _states(bed)
    result = _run(bed, W.write_speculators(tmp_path / "post", samples, slots, post), layer_ids="2,3,4")
    assert result["slots"][3]["status"] == "post-norm"
    assert result["verdict"].startswith("the teacher was taken after the final norm")
    result = _run(bed, W.write_deepspec(tmp_path / "pre", samples, slots, pre, TAPS, "t"))
    assert result["verdict"].startswith("the teacher was taken before the final norm")
    nan, _ = _states(bed, nan_slot=1)
    result = _run(bed, W.write_specforge(tmp_path / "nan", samples, nan), layer_ids="1,2,3")
    assert result["slots"][1]["status"] == "nonfinite" and "vLLM #45734" in result["verdict"]
    result = _run(bed, W.write_speculators(tmp_path / "fp8", samples, slots, pre, fp8=True), layer_ids="2,3,4")
    assert result["findings"] == [] and "fp8 round trip" in result["noise_floor"]["what"]
    assert result["layout"]["stored_dtypes"] == ["F8_E4M3"]
    result = _run(bed, W.write_speculators(tmp_path / "mismatch", samples, slots, pre, other_tokens=(4,)),
                  layer_ids="2,3,4")
    assert [s["sample"] for s in result["samples"]["skipped"]] == [4] and result["samples"]["compared"] == 11
    assert result["findings"][0]["kind"] == "token-mismatch" and "arrow row 4" in result["findings"][0]["lines"][0]
    result = _run(bed, W.write_speculators(tmp_path / "no-last", samples, slots, pre, include_last=False),
                  layer_ids="2,3,4")
    assert [f["kind"] for f in result["findings"]] == ["no-last-layer"] and "speculators #705" in result["verdict"]


def test_all_zero_hybrid_layer_and_unsorted_taps(bed, test_bed, tmp_path):
    """A zeroed Gated-DeltaNet slot of the hybrid target is named as vLLM's hybrid bug; a drafter whose config
    lists its taps out of order is reported (every trainer stores them ascending)."""
    from dflash_eval.model.target import load_target
    from dflash_eval.testing.testbed import write_random_drafter

    target = load_target(str(test_bed["qwen3_5_text"]), device="cpu", dtype="bfloat16")
    samples = _samples(target, 6, 12)
    pairs = [W.states(target, s, TAPS, zero_slot=0) for s in samples]
    folder = W.write_deepspec(tmp_path / "zero", samples, [a for a, _ in pairs],
                              [W.states(target, s, TAPS, teacher="post")[1] for s in samples], TAPS, "t")
    result = trained_taps(TrainedTapsSettings(data=folder, target=str(test_bed["qwen3_5_text"])), CPU).result
    assert result["slots"][0]["status"] == "zero" and 1 in result["target"]["hybrid_layers"]
    assert result["verdict"].startswith("the training data's hybrid-layer taps are all zero: slot 0 (layer 1) is all "
                                        "zero in every sample: a Gated-DeltaNet layer") and "PR #46301" in result["verdict"]
    unsorted = write_random_drafter(bed["target"], tmp_path / "unsorted", "speculators", taps=[3, 1, 2], block_size=4,
                                    num_layers=1)
    slots, pre = _states(bed)
    result = _run(bed, W.write_speculators(tmp_path / "spec", bed["samples"], slots, pre), drafter=str(unsorted))
    assert result["layout"]["taps"] == TAPS and [s["status"] for s in result["slots"]] == ["ok"] * 4
    assert [f["kind"] for f in result["findings"]] == ["unsorted"]
    assert "lists taps [3, 1, 2]; every trainer stores them ascending [1, 2, 3]" in result["findings"][0]["lines"][0]


def test_evaluation_on_correct_fp32_training_taps_equals_evaluation_on_ours(bed, tmp_path):
    """Data written from our own fp32 pass (F32 in the file): the drafter on the stored fc input and teacher and on
    our taps and greedy tokens gives the same drafts and counts, row for row."""
    slots, pre = _states(bed, target="t32")
    folder = W.write_speculators(tmp_path / "spec32", bed["samples"], slots, pre, dtype=torch.float32)
    done = trained_taps(TrainedTapsSettings(data=folder, target=str(bed["target"]), split="all",
                                            drafter=str(bed["shifted"])), CPU)
    rows = {(r["drafter"].split("@")[1], r["prompt_id"]): r for r in done.rows}
    assert len(rows) == 24
    for pid in {p for _, p in rows}:
        trained, ours = rows["trained-taps", pid], rows["our-taps", pid]
        assert trained["counts"] == ours["counts"] and trained["walk_drafts"] == ours["walk_drafts"]
        assert trained["label_ids"] == ours["label_ids"]
    evaluation = done.result["evaluation"]
    assert evaluation["trained"]["tau_macro"] == evaluation["ours"]["tau_macro"] and evaluation["gap"]["estimate"] == 0
    assert all(s["rel_l2"] < 1e-6 for s in done.result["slots"][:3])


def test_shifted_training_data_gap_has_an_interval_above_zero(bed, tmp_path):
    """The drafter was trained on layers 2-4 recorded as 1-3, and its data holds them so: on its own taps it does
    significantly better than on the taps dflash-eval computes for its recorded layers."""
    up, teachers = _states(bed, target="t32", shift=1)
    folder = W.write_speculators(tmp_path / "up", bed["samples"], up, teachers)
    result = _run(bed, folder, drafter=str(bed["shifted"]))
    gap = result["evaluation"]["gap"]
    assert gap["n"] == 12 and gap["low"] > 0 and gap["p_value"] < 0.05, result["evaluation"]["line"]
    assert result["findings"][0]["kind"] == "shifted" and result["slots"][0]["match"] == 2


def test_cli_writes_a_run_folder_that_diff_reads(bed, tmp_path):
    slots, pre = _states(bed)
    data = W.write_speculators(tmp_path / "spec", bed["samples"], slots, pre)
    out = tmp_path / "out"
    args = ["trained-taps", str(data), "--target", str(bed["target"]), "-d", f"{bed['shifted']}:s", "--split", "all",
            "--device", "cpu", "--noise-samples", "2", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "verdict: the training taps are the target's own" in " ".join(result.output.split())
    assert {"trained_taps.json", "trained_taps.html", "run.json", "samples.jsonl", "per_position.csv"} <= {
        p.name for p in out.iterdir()}
    document = json.loads((out / "run.json").read_text())
    assert [d["name"] for d in document["drafters"]] == ["s@trained-taps", "s@our-taps"]
    assert document["provenance"]["trained_taps"]["labels"] == "stored teacher"
    diff = runner.invoke(app, ["diff", f"{out}:s@our-taps", f"{out}:s@trained-taps", "--json"])
    assert diff.exit_code == 0, diff.output
    assert json.loads(diff.stdout)["prompts"] == 12
    as_json = runner.invoke(app, ["trained-taps", str(data), "--target", str(bed["target"]), "--layer-ids", "2,3,4",
                                  "--limit", "1", "--device", "cpu", "--json"])
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["samples"]["compared"] == 1  # validation: row 10
    again = runner.invoke(app, args[:-4] + ["--noise-samples", "3", "--out", str(out)])
    assert again.exit_code == 2 and "different settings" in again.output and "--overwrite" in again.output


def test_bad_training_data_is_one_line_naming_the_file(bed, tmp_path):
    slots, pre = _states(bed)
    base = ["trained-taps", "--target", str(bed["target"]), "--device", "cpu", "--split", "all"]
    data = W.write_speculators(tmp_path / "spec", bed["samples"], slots, pre)
    missing = runner.invoke(app, base + [str(data)])
    assert missing.exit_code == 2 and "does not record its layers: give -d DRAFTER" in missing.output
    hs = data / "hidden_states" / "hs_3.safetensors"
    lock = Path(f"{hs}.lock")
    lock.write_text("")
    fd = os.open(lock, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the writer still holds it
    try:
        held = runner.invoke(app, base + [str(data), "--layer-ids", "2,3,4", "--lock-timeout", "0.2"])
    finally:
        os.close(fd)
    assert held.exit_code == 2 and "hs_3.safetensors: is still being written" in " ".join(held.output.split())
    assert runner.invoke(app, base + [str(data), "--layer-ids", "2,3,4", "--noise-samples", "1"]).exit_code == 0  # lock free
    hs.write_bytes(hs.read_bytes()[:-100])
    cut = runner.invoke(app, base + [str(data), "--layer-ids", "2,3,4"])
    assert cut.exit_code == 2 and "hs_3.safetensors: truncated safetensors file" in " ".join(cut.output.split())
    foreign = W.write_specforge(tmp_path / "sf", bed["samples"][:2], slots[:2])
    pickle = foreign / "rows_0-2000" / "data_1.ckpt"
    torch.save({"input_ids": torch.zeros(3)}, pickle, _use_new_zipfile_serialization=False)
    bad = runner.invoke(app, base + [str(foreign), "--layer-ids", "1,2,3"])
    assert bad.exit_code == 2 and "data_1.ckpt: is not a torch.save archive" in " ".join(bad.output.split())
    assert "Traceback" not in bad.output
    zipped = W.write_specforge(tmp_path / "sf-cut", bed["samples"][:2], slots[:2])
    ckpt = zipped / "rows_0-2000" / "data_0.ckpt"
    ckpt.write_bytes(ckpt.read_bytes()[:-200])
    cut_zip = runner.invoke(app, base + [str(zipped), "--layer-ids", "1,2,3"])
    assert cut_zip.exit_code == 2 and "data_0.ckpt: is a truncated torch.save archive" in " ".join(cut_zip.output.split())
    gz = W.write_specforge(tmp_path / "sf-gz", bed["samples"][:2], slots[:2], compress=True)
    stream = gz / "rows_0-2000" / "data_1.ckpt.gz"
    stream.write_bytes(stream.read_bytes()[:len(stream.read_bytes()) // 2])
    cut_gz = runner.invoke(app, base + [str(gz), "--layer-ids", "1,2,3"])
    assert cut_gz.exit_code == 2 and "data_1.ckpt.gz: is a truncated or damaged gzip stream" in " ".join(cut_gz.output.split())
    deep = W.write_deepspec(tmp_path / "ds-cut", bed["samples"][:3], slots[:3], pre[:3], TAPS, "t")
    shard = deep / "shard-00000.bin"
    shard.write_bytes(shard.read_bytes()[:-10])
    cut_ds = runner.invoke(app, base + [str(deep)])
    assert cut_ds.exit_code == 2 and "shard-00000.bin: is truncated: samples.idx record 2" in " ".join(cut_ds.output.split())
    wrong = runner.invoke(app, base + [str(data), "--layer-ids", "2,3"])
    assert wrong.exit_code == 2 and "holds 4 layers (the taps, then the last layer)" in " ".join(wrong.output.split())
    other = tmp_path / "foreign-out"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    refused = runner.invoke(app, base + [str(data), "--layer-ids", "2,3,4", "--out", str(other)])
    assert refused.exit_code == 2 and (other / "notes.txt").read_text() == "mine" and len(list(other.iterdir())) == 1
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "train.jsonl").write_text("{}")
    nothing = runner.invoke(app, base + [str(tmp_path / "empty")])
    assert nothing.exit_code == 2 and "holds no training data dflash-eval knows" in " ".join(nothing.output.split())


def test_doctor_names_the_tap_skew_that_explains_the_gap(bed, tmp_path):
    up, _ = _states(bed, target="t32", shift=1)
    _, post = _states(bed, target="t32", teacher="post")
    data = W.write_deepspec(tmp_path / "up", bed["samples"], up, post, TAPS, str(bed["target"]))
    result = runner.invoke(app, ["doctor", "-d", str(bed["shifted"]), "--target", str(bed["target"]), "--limit", "4",
                                 "--max-new-tokens", "12", "--device", "cpu", "--no-context-variants",
                                 "--cache-dir", str(tmp_path / "cache"), "--trained-taps", str(data),
                                 "--out", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    doctor = json.loads((tmp_path / "d" / "doctor.json").read_text())
    assert "your training taps are the target's layers shifted by one" in doctor["verdict"]
    assert doctor["trained_taps"]["evaluation"]["gap"]["low"] > 0 and doctor["passes"]["trained taps"] == 12
