"""The tiny checkpoints behave like the real Qwen releases they stand in for.

Every other test trusts these fixtures, so this file checks the properties the evaluator relies on:
the tokenizer and chat template (thinking on/off), the DFlash mask id, that each kind reloads through
``AutoModelForCausalLM`` like a downloaded model (the Qwen3.5 VLM wrapper included, with every text
weight loaded), where the decoder layers live, and that greedy continuations are not degenerate.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never touch the network

import json

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3_5ForConditionalGeneration

from dflash_eval.demo import tiny_tokenizer
from dflash_eval.testing import tiny

# transformers' internals: also run on the oldest supported transformers (scripts/compat.sh)
pytestmark = pytest.mark.compat

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Write a python function to identify non-prime numbers."},
]
EXPECTED_MODEL_TYPE = {
    "qwen3": "qwen3",
    "qwen3_5": "qwen3_5",
    "qwen3_5_text": "qwen3_5_text",
    "qwen3_next": "qwen3_next",
}
# What AutoModelForCausalLM builds for each saved kind: the Qwen3.5 VLM comes back as its text model.
EXPECTED_CAUSAL_LM_CLASS = {
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_5": "Qwen3_5ForCausalLM",
    "qwen3_5_text": "Qwen3_5ForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM",
}
HYBRID_KINDS = ("qwen3_5", "qwen3_5_text", "qwen3_next")


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    return tiny.build_test_bed(tmp_path_factory.mktemp("bed"))


@pytest.fixture(scope="module")
def tokenizer(bed):
    return AutoTokenizer.from_pretrained(bed["tokenizer"])


def chat_ids(tokenizer, **template_kwargs):
    return tokenizer.apply_chat_template(
        MESSAGES, add_generation_prompt=True, return_tensors="pt", return_dict=True, **template_kwargs
    )["input_ids"]


# --- tokenizer ---------------------------------------------------------------------------------------


def test_tokenizer_round_trips_text(tokenizer):
    texts = ["def f(x):\n    return x * 2  # doubled\n", "Grüße, 世界! tabs\tand  spaces", "<think>\nok\n</think>"]
    for text in texts:
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_special_tokens_follow_the_bpe_vocabulary(tokenizer):
    # As in Qwen: <|endoftext|> is pad, <|im_end|> is eos, there is no bos, and the added tokens sit
    # after the BPE entries, so the model's vocab_size must be len(tokenizer), not tokenizer.vocab_size.
    assert tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.bos_token is None
    assert tokenizer.convert_tokens_to_ids("<|endoftext|>") == tokenizer.vocab_size
    assert tokenizer.convert_tokens_to_ids(tiny_tokenizer.MASK_TOKEN) == len(tokenizer) - 1
    for token in ("<|im_start|>", "<|im_end|>", "<think>", "</think>"):
        assert tokenizer.encode(token) == [tokenizer.convert_tokens_to_ids(token)]


def test_mask_token_has_its_own_id(tokenizer):
    mask_id = tokenizer.mask_token_id
    assert tokenizer.mask_token == tiny_tokenizer.MASK_TOKEN
    assert tokenizer.convert_tokens_to_ids(tiny_tokenizer.MASK_TOKEN) == mask_id
    assert mask_id not in {tokenizer.pad_token_id, tokenizer.eos_token_id}
    assert tokenizer.encode(tiny_tokenizer.MASK_TOKEN) == [mask_id]
    # Ordinary text never produces the mask id.
    assert mask_id not in tokenizer.encode("<|mask| > mask <| mask |>" + tokenizer.decode(list(range(300))))


def test_chat_template_switches_thinking_like_qwen3(tokenizer):
    head = (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWrite a python function to identify non-prime numbers.<|im_end|>\n"
    )
    def render(**kw):
        return tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True, **kw)
    assert render(enable_thinking=False) == head + "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert render(enable_thinking=True) == head + "<|im_start|>assistant\n"
    assert render() == head + "<|im_start|>assistant\n"  # thinking is on by default, as in Qwen3
    no_prompt = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=False)
    assert no_prompt == head


def test_tokenizer_training_is_deterministic(tmp_path):
    first = tiny_tokenizer.train_tokenizer(tmp_path / "a")
    second = tiny_tokenizer.train_tokenizer(tmp_path / "b")
    assert (first / "tokenizer.json").read_bytes() == (second / "tokenizer.json").read_bytes()
    custom = tiny_tokenizer.train_tokenizer(tmp_path / "c", corpus=["aaaa bbbb aaaa bbbb"] * 10, vocab_size=300)
    assert (custom / "tokenizer.json").read_bytes() != (first / "tokenizer.json").read_bytes()


# --- targets -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", tiny.TARGET_KINDS)
def test_target_reloads_like_a_downloaded_model(bed, tokenizer, kind):
    config = json.loads((bed[kind] / "config.json").read_text())
    assert config["model_type"] == EXPECTED_MODEL_TYPE[kind]
    assert (bed[kind] / "model.safetensors").is_file()
    assert (bed[kind] / "tokenizer.json").read_bytes() == (bed["tokenizer"] / "tokenizer.json").read_bytes()

    model = AutoModelForCausalLM.from_pretrained(bed[kind]).eval()
    assert type(model).__name__ == EXPECTED_CAUSAL_LM_CLASS[kind]
    text_config = model.config
    assert text_config.vocab_size == len(tokenizer)
    assert text_config.tie_word_embeddings is False
    assert text_config.eos_token_id == tokenizer.eos_token_id
    assert text_config.pad_token_id == tokenizer.pad_token_id
    assert text_config.max_position_embeddings >= 4096
    # Tap hooks attach here, for every kind once loaded as a causal LM.
    assert len(model.model.layers) == text_config.num_hidden_layers == 6

    ids = chat_ids(tokenizer, enable_thinking=False)
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    assert out.logits.shape == (1, ids.shape[1], len(tokenizer))
    assert torch.isfinite(out.logits).all()
    assert len(out.hidden_states) == text_config.num_hidden_layers + 1


@pytest.mark.parametrize("kind", HYBRID_KINDS)
def test_hybrid_targets_contain_gated_deltanet_layers(bed, kind):
    model = AutoModelForCausalLM.from_pretrained(bed[kind])
    layer_types = model.config.layer_types
    assert layer_types.count("linear_attention") >= 2
    assert "full_attention" in layer_types
    for layer, layer_type in zip(model.model.layers, layer_types):
        if layer_type == "linear_attention":
            assert type(layer.linear_attn).__name__.endswith("GatedDeltaNet")
        else:
            assert type(layer.self_attn).__name__.endswith("Attention")


def test_qwen3_next_is_a_tiny_moe(bed):
    config = AutoModelForCausalLM.from_pretrained(bed["qwen3_next"]).config
    assert (config.num_experts, config.num_experts_per_tok) == (4, 2)


@pytest.mark.parametrize("kind", tiny.TARGET_KINDS)
def test_greedy_continuation_is_not_degenerate(bed, tokenizer, kind):
    model = AutoModelForCausalLM.from_pretrained(bed[kind]).eval()
    ids = chat_ids(tokenizer, enable_thinking=False)
    # min_new_tokens only bans eos, so the length is fixed while the tokens stay greedy.
    out = model.generate(input_ids=ids, max_new_tokens=40, min_new_tokens=40, do_sample=False)
    new = out[0, ids.shape[1] :].tolist()
    assert len(new) == 40
    assert len(set(new)) >= 10, tokenizer.decode(new)


def test_qwen3_5_is_saved_as_the_released_vlm_and_loads_as_causal_lm(bed, tokenizer):
    path = bed["qwen3_5"]
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert config["text_config"]["model_type"] == "qwen3_5_text"
    with safe_open(path / "model.safetensors", "pt") as f:
        names = list(f.keys())
    assert any(n.startswith("model.language_model.layers.") for n in names)
    assert any(n.startswith("model.visual.") for n in names)

    causal, info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    vlm = Qwen3_5ForConditionalGeneration.from_pretrained(path)
    # In the VLM the decoder layers sit one level deeper than in the causal LM.
    assert len(vlm.model.language_model.layers) == len(causal.model.layers)

    ids = chat_ids(tokenizer)
    with torch.no_grad():
        want = vlm.eval()(input_ids=ids).logits
        got = causal.eval()(input_ids=ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # By construction the VLM's text model is the qwen3_5_text target built with the same seed.
    with torch.no_grad():
        text_only = AutoModelForCausalLM.from_pretrained(bed["qwen3_5_text"]).eval()(input_ids=ids).logits
    torch.testing.assert_close(got, text_only, atol=1e-5, rtol=1e-5)


def test_build_is_deterministic_and_leaves_the_callers_rng_alone(bed, tmp_path):
    torch.manual_seed(1234)
    expected_next = torch.rand(4)
    torch.manual_seed(1234)
    again = tiny.build_target("qwen3", tmp_path / "again", bed["tokenizer"])
    assert torch.equal(torch.rand(4), expected_next)

    def weights(p):
        return (p / "model.safetensors").read_bytes()
    assert weights(again) == weights(bed["qwen3"])
    other_seed = tiny.build_target("qwen3", tmp_path / "seed1", bed["tokenizer"], seed=1)
    assert weights(other_seed) != weights(bed["qwen3"])


def test_sizes_and_dtype_are_honoured(bed, tmp_path):
    path = tiny.build_target(
        "qwen3_5", tmp_path / "small", bed["tokenizer"], num_layers=2, hidden_size=32, dtype=torch.bfloat16
    )
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.dtype == torch.bfloat16
    assert model.config.layer_types == ["linear_attention", "full_attention"]
    assert model.config.hidden_size == 32


def test_unknown_kind_is_refused(bed, tmp_path):
    with pytest.raises(ValueError, match="unknown target kind"):
        tiny.build_target("llama", tmp_path / "x", bed["tokenizer"])
