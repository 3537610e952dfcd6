"""A byte-level BPE tokenizer trained in-process, with Qwen's special tokens (ChatML, think tags, vision
placeholders, `<|mask|>`) and a Qwen-style chat template, for the tiny test and demo targets."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

# Special tokens, appended after the BPE vocabulary in this order (Qwen's order, then DFlash's mask).
PAD_TOKEN = "<|endoftext|>"


IM_START = "<|im_start|>"


IM_END = "<|im_end|>"


VISION_START = "<|vision_start|>"


VISION_END = "<|vision_end|>"


IMAGE_PAD = "<|image_pad|>"


VIDEO_PAD = "<|video_pad|>"


THINK_START = "<think>"


THINK_END = "</think>"


MASK_TOKEN = "<|mask|>"


# (token, special): Qwen marks <think>/</think> as non-special so that decoding with
# skip_special_tokens=True keeps them; everything else is special.
ADDED_TOKENS = (
    (PAD_TOKEN, True),
    (IM_START, True),
    (IM_END, True),
    (VISION_START, True),
    (VISION_END, True),
    (IMAGE_PAD, True),
    (VIDEO_PAD, True),
    (THINK_START, False),
    (THINK_END, False),
    (MASK_TOKEN, True),
)


# A ChatML template written for this module, with Qwen3's two observable behaviours that DFlash numbers
# depend on: `enable_thinking=False` pre-fills an empty think block, anything else (including leaving it
# undefined) opens a plain assistant turn. Message content may be a string or a list of
# {"type": "text", "text": ...} parts.
CHAT_TEMPLATE = """\
{%- for message in messages %}
    {%- if message['role'] not in ['system', 'user', 'assistant'] %}
        {{- raise_exception('tiny chat template: unsupported role ' ~ message['role']) }}
    {%- endif %}
    {%- if message['content'] is string %}
        {%- set content = message['content'] %}
    {%- else %}
        {%- set content = message['content'] | selectattr('type', 'equalto', 'text')
                                              | map(attribute='text') | join('') %}
    {%- endif %}
    {{- '<|im_start|>' ~ message['role'] ~ '\\n' ~ content ~ '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""


# Std of the random init (transformers' `initializer_range`, default 0.02). Measured at the default sizes
# (greedy, 40 new tokens, 3 chat prompts, seeds 0 and 1): with 0.05-0.1 the dense qwen3 target repeats one
# to a few tokens; with 0.15 every kind gives 26-39 distinct tokens out of 40 and none stops early; at 0.3
# some continuations hit <|im_end|> within 10 tokens.
INIT_STD = 0.15


# Fixed small shapes shared by all kinds; hidden_size and num_layers are arguments of build_target.
HEAD_DIM = 16


NUM_HEADS = 4


NUM_KV_HEADS = 2


MAX_POSITIONS = 4096


# Gated-DeltaNet (linear attention) shapes.
LINEAR_KEY_HEADS = 2


LINEAR_VALUE_HEADS = 4


LINEAR_HEAD_DIM = 16


# Qwen3-Next MoE shapes: tiny experts, top-2 of 4, plus the shared expert Qwen3-Next always has.
NUM_EXPERTS = 4


EXPERTS_PER_TOKEN = 2


_BUILTIN_CORPUS = (
    "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n    return a + b\n",
    "def fizzbuzz(n):\n    for i in range(1, n + 1):\n        if i % 15 == 0:\n            print('FizzBuzz')\n"
    "        elif i % 3 == 0:\n            print('Fizz')\n        elif i % 5 == 0:\n            print('Buzz')\n"
    "        else:\n            print(i)\n",
    "from typing import List\n\n\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
    "    for i, x in enumerate(numbers):\n        for j, y in enumerate(numbers):\n"
    "            if i != j and abs(x - y) < threshold:\n                return True\n    return False\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"
    "        self.items.append(item)\n\n    def pop(self):\n        return self.items.pop()\n\n"
    "    def is_empty(self) -> bool:\n        return len(self.items) == 0\n",
    "import math\n\n\ndef is_prime(n: int) -> bool:\n    if n < 2:\n        return False\n"
    "    for k in range(2, int(math.sqrt(n)) + 1):\n        if n % k == 0:\n            return False\n"
    "    return True\n",
    "def count_words(text: str) -> dict:\n    counts = {}\n    for word in text.split():\n"
    "        counts[word] = counts.get(word, 0) + 1\n    return counts\n",
    "def binary_search(items, target):\n    lo, hi = 0, len(items) - 1\n    while lo <= hi:\n"
    "        mid = (lo + hi) // 2\n        if items[mid] == target:\n            return mid\n"
    "        if items[mid] < target:\n            lo = mid + 1\n        else:\n            hi = mid - 1\n"
    "    return -1\n",
    "assert add(2, 3) == 5\nassert is_prime(7) is True\nassert binary_search([1, 2, 3], 2) == 1\n",
    "Write a solution to the following problem and make sure that it passes the tests:\n",
    "Write a function to find the shared elements from the given two lists.\n",
    "Write a python function to identify non-prime numbers.\n",
    "You are a helpful assistant. Answer the question step by step.\n",
    "Hello! How can I help you today?\n",
    "What is the capital of France? The capital of France is Paris.\n",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May? She sold 48 / 2 = 24 clips in May, "
    "so 48 + 24 = 72 clips in total. The answer is 72.\n",
    "Let me think about this carefully. First, we read the input. Then we compute the answer and "
    "return it to the user.\n",
    "Sure, here is a short explanation of the code: the function loops over the list and keeps the "
    "largest value seen so far.\n",
    "Can you explain what a binary search does? It repeatedly halves the search interval until the "
    "target value is found or the interval is empty.\n",
)


def _filled(backend, size: int):
    """The trained BPE with its vocabulary filled to `size` entries by merges of learned tokens (each new
    token the concatenation of two earlier ones, ranked after every learned merge): a real vocabulary's
    size (Qwen3.5's 248,320) for what scales with it (serialising, hashing, decoding), encoding text almost
    as the trained merges do."""
    import json

    from tokenizers import Tokenizer, models

    model = json.loads(backend.to_str())["model"]
    vocab = dict(model["vocab"])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    learned = sorted(vocab, key=vocab.get)
    for a in learned:
        for b in learned:
            if len(vocab) >= size:
                break
            if a + b not in vocab:
                vocab[a + b] = len(vocab)
                merges.append((a, b))
        if len(vocab) >= size:
            break
    filled = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    filled.pre_tokenizer, filled.decoder = backend.pre_tokenizer, backend.decoder
    return filled


def train_tokenizer(out_dir: str | Path, corpus: Iterable[str] | None = None, vocab_size: int = 512,
                    fill_to: int | None = None) -> Path:
    """Train a tiny byte-level BPE tokenizer and save it as a transformers tokenizer in ``out_dir``.

    ``vocab_size`` is the size of the BPE vocabulary (256 byte symbols plus merges; fewer if the corpus
    runs out of merges); the special tokens (:data:`ADDED_TOKENS`) are appended after it, as Qwen
    appends its ``<|endoftext|>`` ... ``</think>`` after the 151643 BPE entries, so ``len(tokenizer)``
    is larger than ``vocab_size``. Roles: ``<|endoftext|>`` is the pad token, ``<|im_end|>`` the eos
    token (a chat model's end of turn), no bos token (as in Qwen3), and ``<|mask|>`` is both the
    tokenizer's ``mask_token`` (so ``tokenizer.mask_token_id`` is the DFlash mask id) and a token of its
    own, never produced by BPE.

    The byte-level pre-tokenizer and decoder make every string encodable and round-trip exactly. The
    BPE trainer is deterministic for a given corpus order, so the same input gives the same
    ``tokenizer.json`` bytes (across processes too). ``fill_to``: the BPE vocabulary filled to that size
    with merges of learned tokens (`_filled`: a real vocabulary's size for host-cost benchmarks).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    texts = list(_BUILTIN_CORPUS if corpus is None else corpus)
    if not texts:
        raise ValueError("train_tokenizer: the corpus is empty")

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer)
    if fill_to is not None:
        backend = _filled(backend, fill_to)
    # Added after training so that they take ids after the BPE vocabulary, in ADDED_TOKENS order.
    for token, special in ADDED_TOKENS:
        added = AddedToken(token, special=special, normalized=False, single_word=False, lstrip=False, rstrip=False)
        if special:
            backend.add_special_tokens([added])
        else:
            backend.add_tokens([added])

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        mask_token=MASK_TOKEN,
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out_dir))
    return out_dir
