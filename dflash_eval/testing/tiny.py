"""Tiny but real Qwen-class checkpoints on disk, for tests, benchmarks and the bundled demo.

Why real checkpoints rather than mocks: dflash-eval's hard parts sit exactly where a mock would lie --
which decoder-layer list a hook must attach to, what ``output_hidden_states`` contains, whether
``AutoModelForCausalLM`` really loads a Qwen3.5 VLM release as a text model, how Gated-DeltaNet layers
behave on CPU, and which token ids the chat template produces. Everything here goes through the same
``from_pretrained`` / ``save_pretrained`` paths as a downloaded model, just at a size that builds and
runs in seconds on two CPU cores.

What gets built:

* :func:`train_tokenizer` -- a byte-level BPE tokenizer trained in-process on a small built-in corpus,
  with Qwen's special tokens appended after the BPE vocabulary (as Qwen does), a dedicated DFlash
  ``<|mask|>`` token and a ChatML chat template that honours ``enable_thinking`` the way Qwen3's does.
* :func:`build_target` -- a randomly initialised target of one of :data:`TARGET_KINDS`:

  ========================  ===================================  ==========================================
  kind                      class saved (``architectures``)      decoder layers live at
  ========================  ===================================  ==========================================
  ``qwen3``                 ``Qwen3ForCausalLM`` (dense)         ``model.model.layers``
  ``qwen3_5_text``          ``Qwen3_5ForCausalLM`` (hybrid GDN)  ``model.model.layers``
  ``qwen3_5``               ``Qwen3_5ForConditionalGeneration``  saved VLM: ``model.model.language_model
                            (VLM wrapper, as released)           .layers``; loaded via
                                                                 ``AutoModelForCausalLM`` it becomes a
                                                                 ``Qwen3_5ForCausalLM`` (``model.model
                                                                 .layers``)
  ``qwen3_next``            ``Qwen3NextForCausalLM`` (hybrid     ``model.model.layers``
                            GDN + MoE)
  ========================  ===================================  ==========================================

* :func:`build_test_bed` -- one tokenizer plus all four targets under one root.

Weights are drawn with a larger standard deviation than transformers' default (``initializer_range``
:data:`INIT_STD` instead of 0.02): at width 64 small stds make the dense target's greedy continuation
repeat one or a few tokens, and a drafter would then look excellent for a meaningless reason.
Building is deterministic: the same arguments give the same ``model.safetensors`` and
``tokenizer.json`` bytes, and the caller's global torch RNG state is left untouched.

Command: ``python -m dflash_eval.testing.tiny OUT_DIR`` builds the test bed under ``OUT_DIR``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from ..demo.tiny_tokenizer import (
    ADDED_TOKENS,
    EXPERTS_PER_TOKEN,
    HEAD_DIM,
    IM_END,
    IMAGE_PAD,
    INIT_STD,
    LINEAR_HEAD_DIM,
    LINEAR_KEY_HEADS,
    LINEAR_VALUE_HEADS,
    MAX_POSITIONS,
    NUM_EXPERTS,
    NUM_HEADS,
    NUM_KV_HEADS,
    PAD_TOKEN,
    VIDEO_PAD,
    VISION_END,
    VISION_START,
    train_tokenizer,
)

TARGET_KINDS = ("qwen3", "qwen3_5", "qwen3_5_text", "qwen3_next")


def _layer_types(num_layers: int) -> list[str]:
    """Qwen3.5/Qwen3-Next layer pattern: three Gated-DeltaNet ("linear_attention") layers, then one
    gated full-attention layer, repeated. Short stacks still get one full-attention layer (the last) so
    that both layer kinds are always exercised."""
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(num_layers)]
    if "full_attention" not in types:
        types[-1] = "full_attention"
    return types


def _token_ids(tokenizer) -> dict[str, int]:
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok, _ in ADDED_TOKENS}
    unk = tokenizer.unk_token_id
    missing = [tok for tok, i in ids.items() if i is None or (unk is not None and i == unk)]
    if missing:
        raise ValueError(f"tokenizer lacks the special tokens {missing}; build it with train_tokenizer")
    return ids


def _text_config_kwargs(kind: str, tokenizer, num_layers: int, hidden_size: int) -> dict:
    """Config keyword arguments shared by every kind, plus the hybrid/MoE extras of each."""
    ids = _token_ids(tokenizer)
    kwargs = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        initializer_range=INIT_STD,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        # Qwen's released configs carry bos = <|endoftext|> although the tokenizer adds no bos.
        bos_token_id=ids[PAD_TOKEN],
        eos_token_id=ids[IM_END],
        pad_token_id=ids[PAD_TOKEN],
    )
    if kind == "qwen3":
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": 1_000_000.0}
        return kwargs
    if num_layers < 2:
        raise ValueError(f"{kind}: a hybrid target needs at least 2 layers (one Gated-DeltaNet, one attention)")
    kwargs.update(
        layer_types=_layer_types(num_layers),
        linear_conv_kernel_dim=4,
        linear_key_head_dim=LINEAR_HEAD_DIM,
        linear_value_head_dim=LINEAR_HEAD_DIM,
        linear_num_key_heads=LINEAR_KEY_HEADS,
        linear_num_value_heads=LINEAR_VALUE_HEADS,
    )
    if kind in ("qwen3_5", "qwen3_5_text"):
        # As released: partial rotary (a quarter of head_dim) with interleaved multimodal RoPE sections
        # that must sum to the rotary half-dimension (16 * 0.25 / 2 = 2 here).
        kwargs["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": 10_000_000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [1, 1, 0],
            "mrope_interleaved": True,
        }
    else:  # qwen3_next
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25}
        kwargs.update(
            num_experts=NUM_EXPERTS,
            num_experts_per_tok=EXPERTS_PER_TOKEN,
            moe_intermediate_size=hidden_size // 2,
            shared_expert_intermediate_size=hidden_size // 2,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            norm_topk_prob=True,
        )
    return kwargs


def _vision_config_kwargs(hidden_size: int) -> dict:
    """A one-block vision tower: only there so the checkpoint has the released VLM layout."""
    return dict(
        depth=1,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        patch_size=16,
        spatial_merge_size=2,
        temporal_patch_size=2,
        out_hidden_size=hidden_size,
        num_position_embeddings=64,
        initializer_range=INIT_STD,
    )


def _build_model(kind: str, tokenizer, num_layers: int, hidden_size: int):
    """Instantiate the randomly initialised model of ``kind`` (the caller seeds the RNG)."""
    from transformers import (
        Qwen3_5Config,
        Qwen3_5ForCausalLM,
        Qwen3_5ForConditionalGeneration,
        Qwen3_5TextConfig,
        Qwen3Config,
        Qwen3ForCausalLM,
        Qwen3NextConfig,
        Qwen3NextForCausalLM,
    )

    kwargs = _text_config_kwargs(kind, tokenizer, num_layers, hidden_size)
    if kind == "qwen3":
        return Qwen3ForCausalLM(Qwen3Config(**kwargs))
    if kind == "qwen3_5_text":
        return Qwen3_5ForCausalLM(Qwen3_5TextConfig(**kwargs))
    if kind == "qwen3_next":
        return Qwen3NextForCausalLM(Qwen3NextConfig(**kwargs))
    # qwen3_5: build the text model first, exactly as for "qwen3_5_text" with the same seed, then copy its
    # weights into the VLM wrapper. So a qwen3_5 and a qwen3_5_text target with the same seed and sizes
    # compute the same logits, and the VLM's vision tower draws from the RNG only afterwards.
    text_model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**kwargs))
    ids = _token_ids(tokenizer)
    config = Qwen3_5Config(
        text_config=text_model.config.to_dict(),
        vision_config=_vision_config_kwargs(hidden_size),
        image_token_id=ids[IMAGE_PAD],
        video_token_id=ids[VIDEO_PAD],
        vision_start_token_id=ids[VISION_START],
        vision_end_token_id=ids[VISION_END],
        tie_word_embeddings=False,
    )
    vlm = Qwen3_5ForConditionalGeneration(config)
    vlm.model.language_model.load_state_dict(text_model.model.state_dict())
    vlm.lm_head.load_state_dict(text_model.lm_head.state_dict())
    return vlm


def build_target(
    kind: str,
    out_dir: str | Path,
    tokenizer_dir: str | Path,
    *,
    seed: int = 0,
    num_layers: int = 6,
    hidden_size: int = 64,
    dtype=torch.float32,
) -> Path:
    """Build a tiny randomly initialised target of ``kind`` and save it, with the tokenizer, in ``out_dir``.

    The weights come from transformers' own initialisation of the model class (so structural inits such
    as Gated-DeltaNet's ``A_log``/``dt_bias`` and the zero-centred ``(1 + w)`` RMSNorms stay as the
    library intends) with ``initializer_range`` raised to :data:`INIT_STD`, under ``torch.manual_seed(seed)``
    inside a forked RNG, so the result is reproducible and the caller's RNG is not advanced.

    The directory holds ``config.json``, ``generation_config.json`` (greedy; eos = ``<|im_end|>`` and
    ``<|endoftext|>`` as in Qwen's releases), ``model.safetensors`` and the tokenizer files copied
    byte-for-byte from ``tokenizer_dir``, i.e. what ``from_pretrained`` expects of a downloaded model.

    For ``"qwen3_5"`` the saved form is the released VLM wrapper; after saving, the checkpoint is loaded
    back with ``AutoModelForCausalLM`` and its logits are compared with the VLM's, so a transformers version
    that silently re-initialised the language model on that path fails here rather than in a test of
    something else.
    """
    from transformers import AutoTokenizer

    if kind not in TARGET_KINDS:
        raise ValueError(f"unknown target kind {kind!r}; expected one of {TARGET_KINDS}")
    if num_layers < 1 or hidden_size < 8:
        raise ValueError("build_target: num_layers must be >= 1 and hidden_size >= 8")
    out_dir = Path(out_dir)
    tokenizer_dir = Path(tokenizer_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))

    # fork_rng: building, and the reload check below, draw from the global RNG; the caller's stream must
    # not depend on whether (or how many) test checkpoints were built.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _build_model(kind, tokenizer, num_layers, hidden_size).to(dtype).eval()
        _save(model, tokenizer, out_dir, tokenizer_dir)
        if kind == "qwen3_5":
            _check_vlm_loads_as_causal_lm(out_dir)
    return out_dir


def _save(model, tokenizer, out_dir: Path, tokenizer_dir: Path) -> None:
    """save_pretrained the model with a Qwen-style greedy generation config, plus the tokenizer files."""
    from transformers import GenerationConfig

    ids = _token_ids(tokenizer)
    model.generation_config = GenerationConfig(
        bos_token_id=ids[PAD_TOKEN],
        eos_token_id=[ids[IM_END], ids[PAD_TOKEN]],
        pad_token_id=ids[PAD_TOKEN],
        do_sample=False,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    for path in sorted(tokenizer_dir.iterdir()):
        if path.is_file():
            shutil.copyfile(path, out_dir / path.name)


def _check_vlm_loads_as_causal_lm(out_dir: Path) -> None:
    """Load the saved VLM with AutoModelForCausalLM and require the VLM's own logits.

    This is the path the evaluator takes for Qwen3.5/3.6 releases: transformers maps ``qwen3_5`` to
    ``Qwen3_5ForCausalLM``, swaps in ``config.text_config`` and strips the ``model.language_model.``
    prefix from the weight names (the vision tower is dropped as an ignored unexpected key). A text
    weight that failed to map would be silently re-initialised, which no shape check catches, so compare
    outputs. Both sides are loaded from disk in float32: comparing against the in-memory model would
    flag harmless differences (``.to(bfloat16)`` also casts the non-persistent RoPE buffers, a fresh
    load keeps them in float32).
    """
    from transformers import AutoModelForCausalLM, Qwen3_5ForConditionalGeneration

    causal, info = AutoModelForCausalLM.from_pretrained(str(out_dir), dtype=torch.float32, output_loading_info=True)
    if info.get("missing_keys") or info.get("mismatched_keys"):
        raise RuntimeError(
            f"{out_dir}: AutoModelForCausalLM did not load all text weights: missing "
            f"{sorted(info.get('missing_keys', []))}, mismatched {sorted(info.get('mismatched_keys', []))}"
        )
    vlm = Qwen3_5ForConditionalGeneration.from_pretrained(str(out_dir), dtype=torch.float32)
    ids = torch.arange(24)[None].remainder(vlm.config.text_config.vocab_size)
    with torch.no_grad():
        want = vlm.eval()(input_ids=ids).logits
        got = causal.eval()(input_ids=ids).logits
    if want.shape != got.shape or not torch.allclose(want, got, atol=1e-5, rtol=1e-5):
        same_shape = want.shape == got.shape
        diff = (want - got).abs().max().item() if same_shape else f"{tuple(want.shape)} vs {tuple(got.shape)}"
        raise RuntimeError(
            f"{out_dir}: AutoModelForCausalLM does not reproduce the saved Qwen3.5 VLM's logits ({diff})"
        )


def build_test_bed(root: str | Path) -> dict[str, Path]:
    """Train one tokenizer under ``root/"tokenizer"`` and build every kind of target under ``root/<kind>``.

    Returns ``{"tokenizer": ..., "qwen3": ..., "qwen3_5": ..., "qwen3_5_text": ..., "qwen3_next": ...}``.
    All targets share the tokenizer (and hence the mask id and chat template) and use the default sizes
    and seed, so the whole bed is reproducible and builds in a few seconds.
    """
    root = Path(root)
    paths: dict[str, Path] = {"tokenizer": train_tokenizer(root / "tokenizer")}
    for kind in TARGET_KINDS:
        paths[kind] = build_target(kind, root / kind, paths["tokenizer"])
    return paths


def main(argv: list[str] | None = None) -> None:
    """`python -m dflash_eval.testing.tiny OUT_DIR`: the test bed (a tokenizer and one tiny random-weight
    target per kind) under OUT_DIR, one folder per kind, e.g. OUT_DIR/qwen3 for the fixture trainer's
    `--target`. An option-like OUT_DIR (`--help`) is never taken for a folder."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m dflash_eval.testing.tiny", description=main.__doc__)
    parser.add_argument("out_dir", metavar="OUT_DIR", help="folder to build the test bed in (created)")
    out = parser.parse_args(argv).out_dir
    for name, path in build_test_bed(out).items():
        print(f"{name}\t{path}")


if __name__ == "__main__":
    main()
