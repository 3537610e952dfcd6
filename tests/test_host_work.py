"""Host work off the GPU's critical path (issue 47): the tokenizer serialised once per run, not once per
document; run.partial.json rewritten periodically, not after every prompt; the weights hashed once by
processes that start together, in parallel threads, with the same digests; the repetition flags as fast as
their rules allow and block for block what the plain statement of those rules gives; the live loop's
prefill asking for the last position's logits only. What it saves: benchmarks/host_work.py."""

from __future__ import annotations

import hashlib
import random
import sys
import threading
import time
from pathlib import Path

import pytest

from dflash_eval.core.settings.run_settings import Scoring

sys.path.insert(0, str(Path(__file__).resolve().parent))


class _CountingBackend:
    """A tokenizers.Tokenizer seen through a proxy that counts its serialisations."""

    def __init__(self, inner, calls: list):
        self.inner, self.calls = inner, calls

    def to_str(self, *args, **kwargs):
        self.calls.append(1)
        return self.inner.to_str(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def serialisations(monkeypatch):
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    calls: list = []
    real = TokenizersBackend.backend_tokenizer
    monkeypatch.setattr(TokenizersBackend, "backend_tokenizer",
                        property(lambda self: _CountingBackend(real.fget(self), calls)))
    return calls


def test_the_tokenizer_hash_serialises_a_tokenizer_once(test_bed, serialisations):
    from dflash_eval.model.target import load_tokenizer
    from dflash_eval.pipeline.continuations import tokenizer_hash

    tokenizer = load_tokenizer(test_bed["qwen3"])
    first = tokenizer_hash(tokenizer)
    assert [tokenizer_hash(tokenizer) for _ in range(3)] == [first] * 3
    assert len(serialisations) == 1
    other = load_tokenizer(test_bed["qwen3"])  # another object, the same content: the same hash
    assert tokenizer_hash(other) == first and len(serialisations) == 2
    other.add_tokens(["<|a new token|>"])  # a tokenizer that changed is hashed again
    assert tokenizer_hash(other) != first and len(serialisations) == 3


def test_a_run_serialises_its_tokenizer_once_and_writes_one_partial_document(trained, tmp_path, serialisations,
                                                                            monkeypatch):
    """Six prompts: before, five partial documents and the final one, each serialising the 1.5K-token test
    tokenizer (0.3-0.8 s each for a 248K vocabulary); now the partial document after the first prompt only
    (the next is due 30 s later) and one serialisation for the whole run."""
    from dflash_eval.commands.evaluate import RunOptions, evaluate
    from dflash_eval.pipeline.run_folder import RunFolder

    partials = []
    real = RunFolder.write_partial
    monkeypatch.setattr(RunFolder, "write_partial", lambda self, doc, done, total: (partials.append(done),
                                                                                     real(self, doc, done, total)))
    run = evaluate(RunOptions(drafters=[str(trained["qwen3"]["good"])], target=str(trained["qwen3"]["target"]),
                              out=tmp_path / "run", limit=6, max_new_tokens=12, device="cpu",
                              cache_dir=tmp_path / "cache", argv=["test"])).document
    assert partials == [1]
    assert len(serialisations) == 1 and run["provenance"]["tokenizer_hash"]
    assert not (tmp_path / "run" / "run.partial.json").exists()
    assert len((tmp_path / "run" / "samples.jsonl").read_text().splitlines()) == 6


def test_the_partial_document_is_rewritten_by_time_and_never_costs_more_than_its_share():
    from dflash_eval.pipeline.document import PartialSchedule

    now = [100.0]
    schedule = PartialSchedule(every=30.0, share=0.05, clock=lambda: now[0])
    written = []

    def write(cost):
        def build():
            now[0] += cost
            written.append(now[0])
        return build

    assert schedule.due()  # the first prompt's
    schedule.write(write(0.5))
    for _step in range(70):  # a prompt every half second for 35 s: one more document, 30 s after the first
        now[0] += 0.5
        if schedule.due():
            schedule.write(write(0.5))
    assert len(written) == 2 and written[1] - written[0] >= 30
    slow = PartialSchedule(every=30.0, share=0.05, clock=lambda: now[0])
    slow.write(write(4.0))  # a document that takes 4 s waits 80 s (5% of the time), not 30
    now[0] += 79
    assert not slow.due()
    now[0] += 1
    assert slow.due()


def _shards(root: Path, sizes: list[int]) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i, size in enumerate(sizes):
        path = root / f"model-{i:05d}-of-{len(sizes):05d}.safetensors"
        path.write_bytes(random.Random(i).randbytes(size))
        out.append(path)
    return out


def test_weights_are_hashed_in_parallel_with_the_plain_sha256_of_each_file(tmp_path, monkeypatch):
    from dflash_eval.formats import files

    shards = _shards(tmp_path / "w", [3 << 20, 1, 0, 5 << 20])
    running, most = [0], [0]
    real = files._sha256_file
    lock = threading.Lock()

    def watched(path):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        try:
            return real(path)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(files, "_sha256_file", watched)
    monkeypatch.setattr(files, "hashing_threads", lambda n: min(n, 4))
    digests = files.file_digests(shards, tmp_path / "cache")
    assert digests == [hashlib.sha256(p.read_bytes()).hexdigest() for p in shards]
    assert most[0] == 4  # all four at once
    again = files.file_digests(shards, tmp_path / "cache")  # remembered
    assert again == digests and most[0] == 4


def test_ranks_that_start_together_hash_the_weights_once_and_a_swap_is_still_seen(tmp_path, monkeypatch):
    """Two torchrun ranks (threads here, each with its own OS lock on the cache's fingerprints.lock, as two
    processes would) ask for the same target's fingerprints at once: each shard is hashed once, by the first;
    the other waits and reads what it remembered. A shard rewritten afterwards gets its new digest."""
    from dflash_eval.formats import files

    shards = _shards(tmp_path / "w", [1 << 20] * 3)
    hashed = []
    real = files._sha256_file

    def slow(path):
        hashed.append(path.name)
        time.sleep(0.3)
        return real(path)

    monkeypatch.setattr(files, "_sha256_file", slow)
    results = {}
    ranks = [threading.Thread(target=lambda r=r: results.__setitem__(r, files.files_digest(shards, tmp_path / "cache")))
             for r in range(2)]
    for rank in ranks:
        rank.start()
    for rank in ranks:
        rank.join()
    assert results[0] == results[1] and sorted(hashed) == sorted(p.name for p in shards)
    time.sleep(0.01)
    shards[1].write_bytes(b"other weights")
    swapped = files.files_digest(shards, tmp_path / "cache")
    assert swapped != results[0] and hashed.count(shards[1].name) == 2


def test_the_repetition_flags_are_block_for_block_the_plain_rules():
    """flag_block skips what cannot change its verdict (the reference where the draft shows no pattern, the
    text of reasons that do not fire); on many small-alphabet blocks, where every detector fires often, its
    flags and reasons equal the plain statement of the rules (tests/reference_repetition.py)."""
    from reference_repetition import flag_block as plain

    from dflash_eval.core.repetition import DETECTORS, flag_block

    rng = random.Random(0)
    fired = dict.fromkeys(DETECTORS, 0)
    for case in range(4000):
        alphabet, m = rng.randint(1, 6), rng.randint(1, 15)
        block = [rng.randrange(alphabet) for _ in range(m)]
        reference = [rng.randrange(alphabet) for _ in range(rng.randint(max(1, m - 2), m))]
        shift = rng.randrange(m)
        prev = (None if case % 3 == 0 else ([rng.randrange(alphabet) for _ in range(m)], block[::-1]) if case % 3 == 1
                else (block[shift:] + block[:shift], [rng.randrange(alphabet) for _ in range(m)]))
        pieces = [f"t{t}" for t in block] if case % 2 else None
        args = (block, reference) if prev is None else (block, reference, *prev)
        prev_pieces = None if prev is None or not pieces else [f"t{t}" for t in prev[0]]
        ours = flag_block(*args, pieces=pieces, prev_pieces=prev_pieces)
        assert ours == plain(*args, pieces=pieces, prev_pieces=prev_pieces), (args, pieces)
        for name in DETECTORS:
            fired[name] += getattr(ours, name)
    assert min(fired.values()) >= 20, fired  # every detector fires, some hundreds of times


def test_the_live_prefill_keeps_the_last_positions_logits_only(test_bed, drafter_dirs):
    """A prefill's logits at every prompt position are 16 GB at 32K tokens over a 248K vocabulary; the loop
    reads the last one. The prefill (and a rollback's re-run) ask for `logits_to_keep=1`; the verify step,
    which reads every position, does not."""
    from dflash_eval.formats.checkpoints import checked_spec
    from dflash_eval.formats.files import weight_files
    from dflash_eval.model.drafter import load_drafter
    from dflash_eval.model.live import live_generate
    from dflash_eval.model.target import load_target

    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    spec, _ = checked_spec(str(drafter_dirs["zlab"]), target.info)
    drafter = load_drafter(spec, weight_files(str(drafter_dirs["zlab"]))).attach_target(target.embed_tokens,
                                                                                      target.lm_head)
    calls = []
    handle = target.model.register_forward_hook(
        lambda module, args, kwargs, out: calls.append((kwargs["input_ids"].shape[1], kwargs.get("logits_to_keep"),
                                                        tuple(out.logits.shape))), with_kwargs=True)
    try:
        prompt = target.tokenizer("def add(a, b):\n    return a + b\n")["input_ids"]
        result = live_generate(target, drafter, prompt, Scoring(12))
    finally:
        handle.remove()
    assert calls[0] == (len(prompt), 1, (1, 1, target.info.vocab_size))
    verify = [c for c in calls[1:] if c[1] is None]
    assert verify and all(shape[1] == n for n, _, shape in verify)
    assert len(result.tokens) > len(prompt)
