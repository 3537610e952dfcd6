"""How the drafter pass cuts its work: anchors per forward and lm_head pieces, from the shapes and the cache.

Why one module: the anchors per drafter forward fix the GEMM shapes, and in bf16 the GEMM shapes move near-tie
argmaxes, so the value the engine runs is provenance (run.json `provenance.numerics.anchor_batch`), a planned
quantity (`dflash-eval plan`) and the baseline of `run --numerics-check`. All four call `anchor_batch` here;
none keeps a copy of the rule. Pure arithmetic over the shapes and a device kind ("cpu", "cuda", ...): never
the free memory of the moment, so a prompt gets the same anchors per forward on every machine of a kind.

The rule (`anchor_batch`), per device kind, for a sequence of T tokens and a drafter of block size B:

    wanted = ceil(ROWS[kind] / B)                              block slots per forward: anchors x B
    cached = floor(CACHE[kind] / (B x heads x (T + B) x 4))    one fp32 copy of a chunk's attention scores
    fits   = floor(BUDGET[kind] / (B x heads x (T + B) x SCORE_BYTES))
    anchors = clamp(min(fits, max(ceil(MIN_ROWS[kind] / B), min(wanted, cached))), 1, MAX_ANCHOR_BATCH)

- Rows: the drafter's GEMMs (projections, MLP, lm_head) run over anchors x B rows. With the lm_head in
  pieces (`lm_head_pieces`, model/lm_head.py) no chunk holds its logits, so more rows buy nothing once the
  GEMMs are efficient and cost cache. CPU: 512 rows (32 anchors at B = 16); GPU: 8,192 rows, where a GEMM
  over a 1,024-wide weight needs thousands of rows to occupy the device.
- Cache (CPU only): the attention's element-wise steps (scale, mask, concatenation, fp32 softmax) pass over
  the chunk's scores several times; past the last-level cache each pass goes to memory. CPU: 32 MiB of fp32
  scores, but never under 256 rows (16 anchors at B = 16), below which the GEMMs lose more than the cache
  gains. On a GPU the scores live in device memory whatever the chunk, so rows alone decide.
- Memory: one chunk's attention scores in up to four copies (fp32 products, the fp32 scores, their fp32
  softmax and its bf16 cast: at most 10 bytes live per element, SCORE_BYTES = 16 budgeted) within a fixed
  budget (CPU 1 GiB, GPU 4 GiB), so a long context gets fewer anchors, never an out-of-memory.

Measured (docs/performance.md, benchmarks/real_vocab.py): at the 0.6B-like shape on the CPU the rule gives
32 anchors at 512 tokens, 31 at 1,024 and 16 at 2,048, within 1% of the best batch measured at 512 and 2,048.

The lm_head pieces (`lm_head_pieces`): a piece of logits, rows x vocabulary in the compute dtype. CPU: at
most 4 MiB, 512 rows (512 x 4,096 tokens in bf16: within the last-level cache, each GEMM large enough to
run at its peak rate; measured faster than 1 MiB pieces and than the whole product, docs/performance.md).
GPU: at most 256 MiB, 8,192 rows (8,192 x 16,384 tokens): on a device each piece costs a few kernel launches,
so pieces stay large and bound the memory, not the cache. Without vocabulary pieces (a whole-vocabulary
caller, or a head that cannot be sliced) a row piece holds its whole vocabulary within PIECE_WHOLE.
"""

from __future__ import annotations

MIB = 2 ** 20
GIB = 2 ** 30

MAX_ANCHOR_BATCH = 1024
SCORE_BYTES = 16  # bytes per attention-score element of one chunk: at most 10 live (fp32 products, fp32 scores,
# their fp32 softmax and its cast to the values' dtype: model/drafter.block_attention), 16 budgeted
ROWS = {"cpu": 512, "gpu": 8192}  # block slots (anchors x B) per drafter forward
MIN_ROWS = {"cpu": 256, "gpu": 8192}  # the cache never cuts a chunk below this
CACHE = {"cpu": 32 * MIB, "gpu": None}  # one fp32 copy of a chunk's attention scores (None: no cache term)
BUDGET = {"cpu": 1 * GIB, "gpu": 4 * GIB}  # one chunk's attention scores, all copies
PIECE = {"cpu": 4 * MIB, "gpu": 256 * MIB}  # one piece of logits (rows x vocabulary piece)
PIECE_ROWS = {"cpu": 512, "gpu": 8192}
PIECE_WHOLE = {"cpu": 64 * MIB, "gpu": 512 * MIB}  # a row piece with the whole vocabulary


def kind(device: str | None) -> str:
    """"cpu" for the CPU (and an absent device), "gpu" for any accelerator (cuda, xpu, mps...); `device` is a
    device type or a device string ("cuda:1")."""
    return "cpu" if device in (None, "") or device.split(":")[0] in ("cpu", "meta") else "gpu"


def anchor_batch(seq_len: int, block_size: int, heads: int, device_type: str | None) -> int:
    """Anchors per drafter forward for a sequence of `seq_len` tokens (prompt + continuation) and a drafter
    of block size B and `heads` attention heads on `device_type` (the rule in the module docstring)."""
    k = kind(device_type)
    scores = max(block_size * heads * (seq_len + block_size), 1)  # score elements per anchor
    wanted = -(-ROWS[k] // block_size)
    cache = CACHE[k]
    if cache is not None:
        wanted = max(-(-MIN_ROWS[k] // block_size), min(wanted, cache // (scores * 4)))
    fits = BUDGET[k] // (scores * SCORE_BYTES)
    return int(max(1, min(MAX_ANCHOR_BATCH, wanted, fits)))


def rule_text(device_type: str | None) -> str:
    """The rule as run.json's `anchor_batch_rule` states it, with this device kind's constants."""
    k = kind(device_type)
    cache_bytes = CACHE[k]
    cache = (f", fewer to keep one chunk's fp32 scores (B x heads x (T + B) x 4 bytes per anchor) within "
             f"{cache_bytes // MIB} MiB but at least ceil({MIN_ROWS[k]} / B)") if cache_bytes is not None else ""
    return (f"{k}: ceil({ROWS[k]} rows / B){cache}; at most {BUDGET[k] // MIB} MiB of one chunk's attention scores "
            f"(B x heads x (T + B) x {SCORE_BYTES} bytes per anchor); 1..{MAX_ANCHOR_BATCH} (core/batching.py)")


def lm_head_pieces(rows: int, vocab: int, itemsize: int, device_type: str | None, *,
                   whole_vocab: bool = False) -> tuple[int, int]:
    """(rows per piece, vocabulary per piece) for `rows` rows of logits over `vocab` tokens of `itemsize`
    bytes; with `whole_vocab` the vocabulary is one piece and only the rows are cut."""
    k = kind(device_type)
    if whole_vocab:
        return max(1, min(rows, PIECE_WHOLE[k] // max(vocab * itemsize, 1))), vocab
    r = max(1, min(rows, PIECE_ROWS[k]))
    width = max(1, min(vocab, PIECE[k] // (r * itemsize)))
    return r, width


def anchor_batches(seq_lens, block_size: int, heads: int, device: str | None,
                   given: int | None = None) -> dict[str, int]:
    """{anchors per forward: sequences that ran it} for one drafter over the sequences the engine replayed
    (run.json `provenance.numerics.anchor_batch`): the rule per sequence, or `given` (--anchor-batch) for all.
    Keys are strings (JSON), in ascending order."""
    counts: dict[int, int] = {}
    for T in seq_lens:
        a = given or anchor_batch(T, block_size, heads, device)
        counts[a] = counts.get(a, 0) + 1
    return {str(a): counts[a] for a in sorted(counts)}


def merged_anchor_batches(parts: list[dict]) -> dict:
    """The shards' `anchor_batch` records as one (merge): each drafter's sequence counts summed."""
    out: dict[str, dict[str, int]] = {}
    for part in parts:
        for name, counts in (part or {}).items():
            mine = out.setdefault(name, {})
            for a, n in counts.items():
                mine[a] = mine.get(a, 0) + n
    return {name: {a: c[a] for a in sorted(c, key=int)} for name, c in out.items()}
