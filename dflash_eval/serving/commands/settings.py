"""served's own section (core/settings/sections.py): what to read beside the server's counters and what to do
with a file of responses. Apart from serving/commands/served.py so that the CLI builds its flags without importing the
readers; its one `check()` holds the rules between them (which flags pair with --per-request)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ...core.errors import InputError
from ...core.settings.sections import Section, setting

SERVED = "Served numbers"


@dataclass(frozen=True)
class ServedSettings(Section):
    """The served model to read (--model), the offline run shown beside it (--run), and with a file of server
    responses (--per-request) the non-speculative responses that judge losslessness (--non-speculative) and
    the target's logit gap at each first differing token (--logit-gap: loads the run's target)."""

    model: Optional[str] = None
    run: Optional[str] = None
    per_request: Optional[Path] = None
    non_speculative: Optional[Path] = None
    logit_gap: bool = False

    FLAGS = (
        setting("model", "--model", Optional[str], None, "The served model (model_name label) to read, when the "
                "server serves several.", SERVED),
        setting("run", "--run", Optional[str], None, "RUN_DIR or RUN_DIR:DRAFTER: an offline run of the same drafter, "
                "shown beside the served numbers.", SERVED),
        setting("per_request", "--per-request", Optional[Path], None, "A JSONL of server responses, one request a line "
                "(vLLM metrics.speculative_decoding, CompletionOutput dumps, SGLang meta_info), reconciled prompt by "
                "prompt with --run.", SERVED),
        setting("non_speculative", "--non-speculative", Optional[Path], None, "With --per-request: the same server's "
                "greedy responses to the same prompts with speculative decoding off (a JSONL as --per-request's); each "
                "speculative text is judged lossless or changed against it.", SERVED),
        setting("logit_gap", "--logit-gap", bool, False, "With --per-request: load the run's target (CPU, the run's "
                "dtype) and give its logit gap at each served text's first token that differs from the offline greedy "
                "text: a near-tie or a clear argmax the server did not take.", SERVED),
    )

    def check(self) -> None:
        """--non-speculative and --logit-gap judge the requests of --per-request, which needs the run it
        reconciles with."""
        if self.per_request is None:
            if self.logit_gap:
                raise InputError(None, "--logit-gap pairs with --per-request FILE --run RUN: it measures the target "
                                       "at each request's first differing token")
            if self.non_speculative is not None:
                raise InputError(None, "--non-speculative pairs with --per-request FILE --run RUN: it judges each "
                                       "speculative request")
        elif self.run is None:
            raise InputError(None, "--per-request needs --run RUN: the offline run of the same prompts and target")
