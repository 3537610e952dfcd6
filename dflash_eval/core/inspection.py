"""What `inspect` shows, as values: a target as validation knows it (`TargetInfo`, read from its config), one
validation result (`Check`), and the whole inspection of a drafter (`Inspection`, commands/inspect.py fills it,
render/terminal_inspect.py shows it). Pure data, so the renderers read it without reaching up a layer."""

from __future__ import annotations

from dataclasses import dataclass, field

from .spec import DrafterSpec


@dataclass(frozen=True)
class TargetInfo:
    """What validation needs to know about a target, read from its config (no weights loaded)."""

    name: str
    num_layers: int
    hidden_size: int
    vocab_size: int


@dataclass(frozen=True)
class Check:
    """One validation result, shown by `inspect` and enforced at load."""

    name: str
    ok: bool
    detail: str
    # "error": the checkpoint cannot be evaluated as it is (loading refuses it); "warning": it can, and what the
    # check names changes how some engine serves it (formats/defect_checks.py, model/probe_checks.py)
    severity: str = "error"


@dataclass
class Inspection:
    spec: DrafterSpec
    checks: list[Check]
    target: TargetInfo | None
    target_note: str  # where the target came from, or why there is none
    mask_token_text: str | None
    parameters: dict[str, int]  # body / embedding / lm_head parameter counts
    snapshot: dict[str, str] | None = None  # {"repo", "revision"} when read from the HF cache (core/snapshots.py)
    target_snapshot: dict[str, str] | None = None
    # the checks engines added after their own bugs (formats/defect_checks.py, model/probe_checks.py): warnings
    defects: list[Check] = field(default_factory=list)
    engines: dict | None = None  # `inspect --engines` (core/engine_readings.py)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok and c.severity == "error"]

    @property
    def warned(self) -> list[Check]:
        return [c for c in (*self.checks, *self.defects) if not c.ok and c.severity == "warning"]
