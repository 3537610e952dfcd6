"""The prompt sets of the DFlash paper's table, built as z-lab's benchmark code builds them: which Hugging Face
dataset (repo, config, split or files), which columns, the user message of each row, and the paper's draw.

Why: tau is only comparable with the paper's when the prompts are the paper's, word for word. Every set here
cites where its construction is defined; the user messages are ours to build, but string for string the
same (tests/test_benchmark_sets.py runs z-lab's installed `dflash/benchmark.py` on the same rows).

Where each construction comes from:
- gsm8k, math500, humaneval, mbpp, mt-bench: `dflash==0.1.0`, dflash/benchmark.py (`DATASETS`,
  `load_and_process_dataset`): gsm8k `openai/gsm8k` config main split test, `question` + `BOXED`; math500
  `HuggingFaceH4/MATH-500` split test, `problem` + `BOXED`; mt-bench `HuggingFaceH4/mt_bench_prompts` split
  train, its `prompt` list as the user turns (multi-turn: each turn after the model's own answer to the one
  before). humaneval and mbpp are bundled (pipeline/prompts.py `PROMPT_SETS`), built the same way.
- aime24, aime25, livecodebench, swe-bench, alpaca: not in 0.1.0; z-lab/dflash commit bb48ef9 ("init commit",
  2026-01-05), model/utils.py `load_and_process_dataset`, unchanged through 4850ba9 (2026-03-13): aime24
  `HuggingFaceH4/aime_2024` split train and aime25 `MathArena/aime_2025` split train, `problem` + `BOXED`;
  alpaca `tatsu-lab/alpaca` split train, `instruction`, plus "\\n\\nInput:\\n" and `input` when that is not
  empty; swe-bench `princeton-nlp/SWE-bench_Lite` split test, "Problem Statement:\\n" + `problem_statement` +
  "\\nPlease fix the issue described above."; livecodebench the files test.jsonl .. test6.jsonl of
  `livecodebench/code_generation_lite` (revision main), `question_content` and `starter_code` in
  `LCB_SYSTEM` / format / answer lines (`livecodebench_message`).

The paper's rows (`paper_rows`, `PAPER_DRAW`): z-lab's benchmark.py at bb48ef9..4850ba9 (the repository when
the paper appeared) evaluated `dataset.shuffle(seed=0).select(range(N))` when the set has more than N rows
(datasets' `Dataset.shuffle`: the permutation `numpy.random.default_rng(0).permutation(len)`), with N from
run_benchmark.sh: 128 for gsm8k, math500, mbpp, livecodebench, swe-bench and alpaca; 30 (all) for aime24 and
aime25; 164 (all) for humaneval; 80 (all) for mt-bench. `dflash==0.1.0` draws differently: `_select_dataset`
keeps the first N of `random.Random(42).shuffle(range(len))`, the same subset as `--limit N --seed 42`
(pipeline/prompts.py `select`).
"""

from __future__ import annotations

from dataclasses import dataclass

BOXED = "\nPlease reason step by step, and put your final answer within \\boxed{}."
LCB_SYSTEM = ("You are an expert Python programmer. You will be given a question (problem specification) and will "
              "generate a correct Python program that matches the specification and passes all tests. You will NOT "
              "return anything except for the program")
LCB_FILES = ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl", "test6.jsonl")
ZLAB_0_1_0 = "dflash==0.1.0 dflash/benchmark.py (DATASETS, load_and_process_dataset)"
ZLAB_INIT = "z-lab/dflash bb48ef9 model/utils.py (load_and_process_dataset; unchanged through 4850ba9)"
PAPER_DRAW = ("z-lab's benchmark.py at bb48ef9..4850ba9: dataset.shuffle(seed=0).select(range(N)) when the set has "
              "more than N rows (numpy default_rng(0).permutation), N from run_benchmark.sh")


def boxed(text: str) -> str:
    return text + BOXED


def alpaca_message(instruction: str, input_text: str) -> str:
    return f"{instruction}\n\nInput:\n{input_text}" if input_text else instruction


def swe_bench_message(problem_statement: str) -> str:
    return f"Problem Statement:\n{problem_statement}\nPlease fix the issue described above."


def livecodebench_message(question_content: str, starter_code: str | None) -> str:
    if starter_code:
        layout, code = "### Format: Use the following code structure:", f"```python\n{starter_code}\n```"
    else:
        layout, code = "### Format: Write your code in the following format:", "```python\n# YOUR CODE HERE\n```"
    return (f"{LCB_SYSTEM}\n\n### Question:\n{question_content}\n\n{layout}\n{code}\n\n"
            "### Answer: (use the provided format with backticks)")


@dataclass(frozen=True)
class BenchmarkSet:
    """One named set: where its rows are and how a row becomes user turns (`turns`)."""

    name: str
    repo: str
    split: str | None  # None: `files` name the data files
    columns: tuple[str, ...]  # what `turns` reads (a row lacking one is refused by name)
    id_column: str | None  # ids are "<name>/<value>" (values unique), else "<name>/<row index>"
    paper_rows: int
    origin: str
    config: str | None = None
    files: tuple[str, ...] = ()
    multi_turn: bool = False
    optional: tuple[str, ...] = ()  # read when present (z-lab reads them with .get)

    def turns(self, row: dict) -> list[str]:
        """The user turns of one row (one, except for mt-bench)."""
        if self.name == "mt-bench":
            turns = row["prompt"]
            return list(turns) if isinstance(turns, (list, tuple)) else [turns]
        if self.name == "alpaca":
            return [alpaca_message(row["instruction"], row["input"])]
        if self.name == "swe-bench":
            return [swe_bench_message(row["problem_statement"])]
        if self.name == "livecodebench":
            return [livecodebench_message(row["question_content"], row.get("starter_code"))]
        return [boxed(row[self.columns[0]])]

    def download(self) -> str:
        from .hf_cache import download_command

        return download_command(self.repo, self.files)


BENCHMARK_SETS: dict[str, BenchmarkSet] = {s.name: s for s in (
    BenchmarkSet("gsm8k", "openai/gsm8k", "test", ("question",), None, 128, ZLAB_0_1_0, config="main"),
    BenchmarkSet("math500", "HuggingFaceH4/MATH-500", "test", ("problem", "unique_id"), "unique_id", 128, ZLAB_0_1_0),
    BenchmarkSet("aime24", "HuggingFaceH4/aime_2024", "train", ("problem", "id"), "id", 30, ZLAB_INIT),
    BenchmarkSet("aime25", "MathArena/aime_2025", "train", ("problem", "problem_idx"), "problem_idx", 30, ZLAB_INIT),
    BenchmarkSet("livecodebench", "livecodebench/code_generation_lite", None,
                 ("question_content", "question_id"), "question_id", 128, ZLAB_INIT, files=LCB_FILES,
                 optional=("starter_code",)),
    BenchmarkSet("swe-bench", "princeton-nlp/SWE-bench_Lite", "test", ("problem_statement", "instance_id"),
                 "instance_id", 128, ZLAB_INIT),
    BenchmarkSet("mt-bench", "HuggingFaceH4/mt_bench_prompts", "train", ("prompt", "prompt_id"), "prompt_id", 80,
                 ZLAB_0_1_0, multi_turn=True),
    BenchmarkSet("alpaca", "tatsu-lab/alpaca", "train", ("instruction", "input"), None, 128, ZLAB_INIT),
)}
# the bundled sets (pipeline/prompts.py) have a paper draw too
PAPER_ROWS: dict[str, int] = {"humaneval": 164, "mbpp": 128, **{n: s.paper_rows for n, s in BENCHMARK_SETS.items()}}
PAPER_ALL_ROWS = frozenset({"humaneval", "aime24", "aime25", "mt-bench"})  # N >= the set's size: every row
PAPER_TURNS = {"mt-bench": 2}  # every MT-Bench question has two turns, each one request of the paper's mean


def paper_difference(prompts: dict, name: str) -> str | None:
    """How a run's prompts of set `name` (its provenance "prompts": source, sets) differ from the rows the paper
    evaluated (`PAPER_DRAW`), or None when they are those rows (or `name` is not in the paper's table)."""
    if name not in PAPER_ROWS:
        return None
    expected = PAPER_ROWS[name] * PAPER_TURNS.get(name, 1)
    count = (prompts.get("sets") or {}).get(name)
    source = str(prompts.get("source") or "")
    if count is not None and count != expected:
        return f"{count} {name} prompts (paper: {expected}; --prompts paper:{name} gives its rows)"
    if source and source != f"paper:{name}" and not (source == name and name in PAPER_ALL_ROWS):
        return f"prompts {source}, not the paper's draw of {name} (--prompts paper:{name})"
    return None


def paper_indices(total: int, rows: int) -> list[int]:
    """The rows the paper evaluated out of `total` (`PAPER_DRAW`), in the set's order: every row when there
    are at most `rows`, else the first `rows` of numpy's default_rng(0) permutation (what datasets'
    `Dataset.shuffle(seed=0)` draws), sorted."""
    if total <= rows:
        return list(range(total))
    import numpy as np

    return sorted(int(i) for i in np.random.default_rng(0).permutation(total)[:rows])
