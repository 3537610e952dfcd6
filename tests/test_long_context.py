"""Long contexts: the serving window (--draft-window, SGLang's rule), repository- and stdlib-packed prompts
(--prompts repo:PATH / stdlib, --context-tokens), and a repo: run at a few thousand tokens end to end."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from dflash_eval.core.attention import LayerAttention
from dflash_eval.core.settings.run_settings import Scoring
from dflash_eval.model.masks import block_masks


def test_draft_window_mask_hand_computed():
    """Anchor a = 5, W = 2: only context rows 3 and 4 (a - W <= p < a), on top of the layer's own rule."""
    full = LayerAttention("full", None, False)
    ctx, own = block_masks([5], [2], 8, full, draft_window=2)
    assert ctx[0].int().tolist() == [[0, 0, 0, 1, 1, 0, 0, 0]] * 2
    assert own.all()  # no window inside the block
    ctx, _ = block_masks([5], [2], 8, full)
    assert ctx[0, 0].int().tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    # a sliding layer (window 2 from the query q = a + j) under a wider serving window keeps its own rule
    sliding = LayerAttention("sliding", 2, False, "query")
    ctx, _ = block_masks([5], [2], 8, sliding, draft_window=3)
    assert ctx[0].int().tolist() == [[0, 0, 0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0]]


def test_draft_window_is_the_anchor_window_on_every_layer(test_bed, drafter_dirs):
    """--draft-window W on a full-attention drafter replays exactly like the same drafter with every layer
    windowed W rows back from the anchor; a window past the sequence changes nothing; a small one changes
    drafts."""
    from dflash_eval.formats.checkpoints import read_spec
    from dflash_eval.formats.files import weight_files
    from dflash_eval.model.drafter import load_drafter
    from dflash_eval.model.engine import replay
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.scoring import windowed

    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    spec = read_spec(drafter_dirs["zlab"])[0]
    drafter = load_drafter(spec, weight_files(drafter_dirs["zlab"])).attach_target(target.embed_tokens, target.lm_head)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(10, 200, (48,), generator=generator)
    taps = torch.randn(48, len(spec.taps) * target.info.hidden_size, generator=generator)

    def run(d):
        return replay(d, taps, tokens, 20, Scoring(28, anchor_batch=8))

    served = run(windowed(drafter, 4))
    assert windowed(drafter, None) is drafter
    layers = tuple(dataclasses.replace(layer, window=4, window_from="anchor", kind="sliding") for layer in spec.layers)
    drafter.spec = dataclasses.replace(spec, layers=layers)
    as_layers = run(drafter)
    drafter.spec = spec
    assert served.drafts == as_layers.drafts and served.walk_accept_lengths == as_layers.walk_accept_lengths
    assert run(windowed(drafter, 64)).drafts == run(drafter).drafts
    assert served.drafts != run(drafter).drafts


def test_packing_hand_computed():
    """Whole files while they fit, then the next file cut at a line boundary with its fence open; the
    next prompt starts at the file after the cut one (count = characters here, tokens in a run)."""
    from dflash_eval.core.errors import InputError
    from dflash_eval.pipeline.long_prompts import REPO_HEADER, pack

    files = [("a.py", "python", "a1\na2\n"), ("b.py", "python", "b1\nb2\nb3\n"), ("c.go", "go", "c1\nc2\n"),
             ("d.py", "python", "d1\nd2\nd3\nd4\n")]
    whole_a = "### a.py\n```python\na1\na2\n```\n\n"
    budget = len(REPO_HEADER + whole_a + "### b.py\n```python\nb1\nb2\n")
    prompts = pack(files, budget, len, "repo:x")
    assert [p.id for p in prompts] == ["repo:x/0:b.py", "repo:x/1:d.py"]
    assert prompts[0].text == REPO_HEADER + whole_a + "### b.py\n```python\nb1\nb2\n"
    assert prompts[1].text == REPO_HEADER + "### c.go\n```go\nc1\nc2\n```\n\n### d.py\n```python\nd1\nd2\nd3\n"
    with pytest.raises(InputError, match="do not fill one prompt"):  # everything fits whole: nothing to continue
        pack(files, 10_000, len, "repo:x")
    assert all(len(p.text) <= budget for p in prompts) and {p.set for p in prompts} == {"repo:x"}
    # a fence longer than any backtick run in the file
    cut = pack([("e.py", "python", "x = '```'\n" * 20)], 100, len, "s")[0].text
    assert cut.startswith(REPO_HEADER + "### e.py\n````python\nx = '```'\n") and len(cut) <= 100


@pytest.mark.slow
def test_stdlib_set_and_refusals(test_bed):
    import platform

    from dflash_eval.core.errors import InputError
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.model.target import load_tokenizer
    from dflash_eval.pipeline.long_prompts import fit_context, long_prompts

    tokenizer = load_tokenizer(test_bed["qwen3"])
    prompts = long_prompts("stdlib", tokenizer, 512)
    assert prompts == long_prompts("stdlib", tokenizer, 512)  # deterministic
    assert prompts[0].set == f"stdlib:{platform.python_version()}" and len(prompts) > 20
    assert all(len(tokenizer(p.text, add_special_tokens=False)["input_ids"]) <= 512 for p in prompts)
    assert all(p.id.split(":", 2)[-1].endswith(".py") for p in prompts)
    base = dict(drafters=[], out=None, prompts="humaneval")
    for changes, message in (({"context_tokens": 4096}, "--context-tokens packs"),
                             ({"max_context": "truncate"}, "truncate shortens"),
                             ({"max_context": "clip"}, "unknown --max-context")):
        with pytest.raises(InputError, match=message):  # --max-context's rules: RunSettings.check, before any read
            RunOptions(**{**base, **changes}).check()
    packed = {**base, "prompts": "stdlib", "context_tokens": 8000, "max_context": "truncate", "max_new_tokens": 100}
    n, warnings = fit_context(RunOptions(**packed), 4096, 20)
    assert n == 4096 - 100 - 20 and "packed to 3976 tokens" in warnings[0]
    assert fit_context(RunOptions(**{**packed, "max_context": "refuse"}), 4096, 20) == (8000, [])
    with pytest.raises(InputError, match="no such directory"):
        long_prompts("repo:/nonexistent/folder", tokenizer, 512)


@pytest.mark.slow
def test_repo_run_at_thousands_of_tokens_with_a_draft_window(test_bed, drafter_dirs, tmp_path):
    """A repo: run on the test bed, prompts of ~2K tokens, --draft-window 256, end to end: provenance and
    settings record it, steps land in the 1K-2K depth bucket, and the window changes the drafts; a
    prompt the target cannot hold is refused by name, or packed shorter with --max-context truncate."""
    import shutil

    from dflash_eval.commands.evaluate import RunOptions, evaluate
    from dflash_eval.core.errors import InputError

    repo = tmp_path / "repo"
    shutil.copytree(__import__("dflash_eval.core", fromlist=["x"]).__path__[0], repo / "core",
                    ignore=shutil.ignore_patterns("__pycache__"))
    common = dict(drafters=[f"{drafter_dirs['zlab']}:z"], target=str(test_bed["qwen3"]), prompts=f"repo:{repo}",
                  context_tokens=2000, limit=2, max_new_tokens=12, device="cpu", cache_dir=tmp_path / "cache",
                  depth_buckets="1K,2K", argv=["test"])
    run = evaluate(RunOptions(out=tmp_path / "w", draft_window=256, **common)).document
    prov = run["provenance"]
    assert prov["draft_window"] == 256
    assert prov["prompts"]["context_tokens"] == 2000 and prov["prompts"]["sets"] == {"repo:repo": 2}
    depth = {e["bucket"]: e["metrics"]["steps"] for e in run["drafters"][0]["by_depth"]}
    assert depth["1K-2K"] + depth["2K+"] == run["drafters"][0]["metrics"]["steps"] and depth["0-1K"] == 0
    state = json.loads((tmp_path / "w" / "run_state.json").read_text())
    assert state["settings"]["draft_window"] == 256
    rows = [json.loads(line) for line in (tmp_path / "w" / "samples.jsonl").read_text().splitlines()]
    assert all(1500 < r["prompt_len"] <= 2100 for r in rows)
    evaluate(RunOptions(out=tmp_path / "f", **common))
    full_rows = [json.loads(line) for line in (tmp_path / "f" / "samples.jsonl").read_text().splitlines()]
    assert [r["continuation_ids"] for r in rows] == [r["continuation_ids"] for r in full_rows]
    assert [r["walk_drafts"] for r in rows] != [r["walk_drafts"] for r in full_rows]
    too_long = dict(common, context_tokens=6000, limit=1)
    with pytest.raises(InputError, match="max_position_embeddings"):
        evaluate(RunOptions(out=tmp_path / "refused", **too_long))
    assert not (tmp_path / "refused").exists()
    from dflash_eval.pipeline.inputs import prepare_inputs

    inputs = prepare_inputs(RunOptions(out=tmp_path / "t", max_context="truncate", **too_long))
    assert max(len(ids) for ids in inputs.prompt_ids().values()) + 12 <= 4096
    assert any("--max-context truncate" in w for w in inputs.warnings)
