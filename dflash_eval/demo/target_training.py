"""The demo target: its corpus (HumanEval and MBPP solutions as chat conversations), its tokenizer corpus, its
config and its training loop (packed rows, AdamW with warm-up), and the drafters' training prompts."""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from . import CORPUS_DIR, HUMANEVAL_FILE, MBPP_FILE

SEED = 0

# The target: 6 decoder layers, Qwen3.5's pattern in miniature (two Gated-DeltaNet layers, then one gated
# full-attention layer, twice).
TARGET_SHAPE: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 6,
    "layer_types": ["linear_attention", "linear_attention", "full_attention"] * 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 32,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
}

SEQ_LEN = 512

BATCH = 4

LR = 3e-3

WARMUP_STEPS = 40

WEIGHT_DECAY = 0.01

DRAFT_MAX_NEW = 64

DRAFT_PROMPTS = 256  # the first MBPP task texts; half continued with thinking off, half with it on

# z-lab's HumanEval template (primer section 7)
HUMANEVAL_TEMPLATE = ("Write a solution to the following problem and make sure that it passes the tests:\n"
                      "```python\n{prompt}\n```")

def log_line(message: str) -> None:
    print(message, flush=True)


def load_records(corpus_dir: Path = CORPUS_DIR) -> tuple[list[dict], list[dict]]:
    mbpp = json.loads((corpus_dir / MBPP_FILE).read_text())
    humaneval = [json.loads(line) for line in (corpus_dir / HUMANEVAL_FILE).read_text().splitlines() if line.strip()]
    return mbpp, humaneval


def code_block(code: str) -> str:
    return "```python\n" + code.strip("\n") + "\n```"


def conversations(corpus_dir: Path = CORPUS_DIR) -> list[tuple[str, str]]:
    """(user text, assistant text) per corpus item: MBPP first (file order), then HumanEval."""
    mbpp, humaneval = load_records(corpus_dir)
    pairs = [(r["prompt"], code_block(r["code"])) for r in mbpp]
    pairs += [(HUMANEVAL_TEMPLATE.format(prompt=r["prompt"]), code_block(r["prompt"] + r["canonical_solution"]))
              for r in humaneval]
    return pairs


def drafter_training_prompts(corpus_dir: Path = CORPUS_DIR, count: int = DRAFT_PROMPTS) -> list[str]:
    """The drafters' training prompts: the first `count` MBPP task texts (file order), none a demo prompt."""
    from ..pipeline.prompts import DEMO_PROMPTS

    mbpp, _ = load_records(corpus_dir)
    demo = set(DEMO_PROMPTS)
    return [r["prompt"] for r in mbpp if r["prompt"] not in demo][:count]


def drafter_sequences(target, prompts: list[str]) -> list[tuple[torch.Tensor, int]]:
    """The target's own greedy continuations: even-indexed prompts with thinking off, odd ones with the
    family default (on), so the drafters see both prompt endings `run` may send (the target, trained on
    thinking-off prompts, writes the empty think block itself when it is not pre-filled)."""
    from .train import greedy_sequences

    off = greedy_sequences(target, prompts[0::2], DRAFT_MAX_NEW, enable_thinking=False)
    on = greedy_sequences(target, prompts[1::2], DRAFT_MAX_NEW, enable_thinking=True)
    merged = []
    for i in range(len(prompts)):
        merged.append(off[i // 2] if i % 2 == 0 else on[i // 2])
    return merged


def tokenizer_corpus(pairs: list[tuple[str, str]]) -> list[str]:
    """Text the BPE is trained on: each exchange with its role words (so that "user" and "assistant" become
    tokens of their own); the special tokens are added by train_tokenizer after the BPE vocabulary."""
    return [f"user\n{user}\nassistant\n{assistant}\n" for user, assistant in pairs]


def document_ids(tokenizer, user: str, assistant: str) -> list[int]:
    """One exchange as token ids, tokenized exactly as `run` sees it: the prompt is the chat template with
    the generation prompt and thinking off (``continuations.prompt_ids``), tokenized on its own; the answer
    (code block, ``<|im_end|>``, newline) is tokenized separately and appended. Tokenizing the rendered
    conversation as one string would differ at the seam (the prompt's trailing "\n\n" merges into one
    token at the end of a prompt but splits before "```"), and the target would never have seen the
    token sequence it is prompted with."""
    from ..pipeline.continuations import Prompt, prompt_ids
    from .tiny_tokenizer import IM_END

    head = prompt_ids(tokenizer, Prompt("corpus", user), enable_thinking=False)
    return head + tokenizer(assistant + IM_END + "\n", add_special_tokens=False)["input_ids"]


def target_config(tokenizer):
    from transformers import Qwen3_5TextConfig

    from .tiny_tokenizer import IM_END, PAD_TOKEN

    pad, eos = tokenizer.convert_tokens_to_ids(PAD_TOKEN), tokenizer.convert_tokens_to_ids(IM_END)
    rotary_half = int(TARGET_SHAPE["head_dim"] * 0.25) // 2
    return Qwen3_5TextConfig(
        vocab_size=len(tokenizer), **TARGET_SHAPE,
        max_position_embeddings=4096, initializer_range=0.02, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=pad, eos_token_id=eos, pad_token_id=pad,
        # Qwen3.5's RoPE as released: partial rotary with interleaved multimodal sections summing to the
        # rotary half-dimension
        rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [rotary_half - 2 * (rotary_half // 4), rotary_half // 4, rotary_half // 4],
                         "mrope_interleaved": True},
    )


def _packed_rows(docs: list[list[int]], generator: torch.Generator, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One epoch: documents in a seeded random order, packed greedily into rows of SEQ_LEN (a document never
    straddles two rows; longer ones are cut), right-padded. Returns (ids, labels) with -100 on padding."""
    rows, current = [], []
    for i in torch.randperm(len(docs), generator=generator).tolist():
        doc = docs[i][:SEQ_LEN]
        if len(current) + len(doc) > SEQ_LEN:
            rows.append(current)
            current = []
        current = current + doc
    if current:
        rows.append(current)
    ids = torch.full((len(rows), SEQ_LEN), pad, dtype=torch.long)
    labels = torch.full((len(rows), SEQ_LEN), -100, dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, :len(row)] = torch.tensor(row)
        labels[r, :len(row)] = torch.tensor(row)
    order = torch.randperm(len(rows), generator=generator)
    return ids[order], labels[order]


def train_target(tokenizer, docs: list[list[int]], steps: int, seed: int = SEED):
    """Train the hybrid target from scratch on token-id documents; returns (model, loss log [[step, mean]])."""
    from transformers import Qwen3_5ForCausalLM

    tokens = sum(min(len(d), SEQ_LEN) for d in docs)
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(target_config(tokenizer)).float().train()
    params = sum(p.numel() for p in model.parameters())
    log_line(f"target: {params / 1e6:.2f}M parameters, {len(docs)} documents, {tokens} tokens, {steps} steps of "
         f"{BATCH} x {SEQ_LEN}")
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=(0.9, 0.95))
    generator = torch.Generator().manual_seed(seed)
    ids = labels = None
    cursor = 0
    log, window = [], []
    began = time.perf_counter()
    for step in range(steps):
        if ids is None or cursor + BATCH > ids.shape[0]:
            ids, labels = _packed_rows(docs, generator, tokenizer.pad_token_id)
            cursor = 0
        batch_ids, batch_labels = ids[cursor:cursor + BATCH], labels[cursor:cursor + BATCH]
        cursor += BATCH
        if step < WARMUP_STEPS:
            lr = LR * (step + 1) / WARMUP_STEPS
        else:
            progress = (step - WARMUP_STEPS) / max(1, steps - WARMUP_STEPS)
            lr = LR * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = model(input_ids=batch_ids, labels=batch_labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        window.append(float(loss.detach()))
        if (step + 1) % 25 == 0 or step == 0 or step == steps - 1:
            mean = sum(window) / len(window)
            log.append([step + 1, round(mean, 4)])
            log_line(f"  target step {step + 1:5d}/{steps}  loss {mean:.3f}  lr {lr:.2e}  "
                 f"{time.perf_counter() - began:6.1f}s")
            window = []
    return model.eval(), log


def save_target(model, tokenizer_dir: Path, out_dir: Path) -> Path:
    """save_pretrained (float32 safetensors), a Qwen-style greedy generation config, the tokenizer files."""
    from transformers import GenerationConfig

    config = model.config
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id,
                                               eos_token_id=[config.eos_token_id, config.pad_token_id],
                                               pad_token_id=config.pad_token_id, do_sample=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    for path in sorted(tokenizer_dir.iterdir()):
        if path.is_file():
            shutil.copyfile(path, out_dir / path.name)
    return out_dir
