"""What a side sets on its models: the attention implementation and the draft length, one explicit hook each.

Pure Python (no torch, no transformers): the driver builds these, the worker (in any side's interpreter, 4.31 to 5.x)
receives them as JSON on its command line and applies them, `attention` when it builds the models and `draft` before
every call (`benchkit.worker.set_draft_length`).
"""

import json
from dataclasses import asdict, dataclass, field

# 4.31's fixed start (`assistant_model.max_assistant_tokens`), and 4.35/4.36's default `num_assistant_tokens`.
INITIAL_DRAFT_LENGTH = 5


@dataclass(frozen=True)
class DraftLength:
    """How many candidates the assistant drafts per round, set to the same state before every call.

    `schedule`: "heuristic" (+2 after a round that kept every candidate, -1 otherwise), "constant", or any schedule the
    side's transformers knows (`generation_config.num_assistant_tokens_schedule`); `start`: the first round's number of
    candidates; `confidence`: `assistant_confidence_threshold` (drafting stops at a candidate whose probability is
    below it; 0: off). None keeps the side's own default, so `DraftLength.defaults()` runs a release as it ships.
    Versions without `generation_config.num_assistant_tokens` (4.31: stock, and the patched fork until it gains it)
    only have the heuristic, from `assistant_model.max_assistant_tokens`; they refuse anything else.
    """

    schedule: str | None = "heuristic"
    start: int | None = INITIAL_DRAFT_LENGTH
    confidence: float | None = None

    @classmethod
    def defaults(cls):
        return cls(schedule=None, start=None, confidence=None)

    @classmethod
    def heuristic(cls, start=INITIAL_DRAFT_LENGTH):
        return cls(schedule="heuristic", start=start)

    @classmethod
    def constant(cls, length):
        """Exactly `length` candidates every round (the confidence stop off)."""
        return cls(schedule="constant", start=length, confidence=0.0)

    @classmethod
    def parse(cls, text):
        """'defaults', 'heuristic', 'heuristic:5', 'constant:3', or 'SCHEDULE[:START]'."""
        name, _, start = text.strip().partition(":")
        if not name:
            raise ValueError(
                f"a draft length is 'defaults', 'heuristic[:N]', 'constant:N' or 'SCHEDULE[:N]', not {text!r}"
            )
        if name == "defaults" and not start:
            return cls.defaults()
        try:
            number = int(start) if start else None
        except ValueError:
            raise ValueError(f"the start of a draft length is a number of candidates, not {start!r}") from None
        if number is not None and number < 1:
            raise ValueError(f"a draft length starts from at least one candidate, not {number}")
        if name == "constant":
            if number is None:
                raise ValueError("a constant draft length needs its number of candidates: 'constant:N'")
            return cls.constant(number)
        if name == "heuristic":
            return cls.heuristic(INITIAL_DRAFT_LENGTH if number is None else number)
        return cls(schedule=name, start=number)

    def is_defaults(self):
        return self == DraftLength.defaults()

    def label(self):
        if self.is_defaults():
            return "defaults"
        text = self.schedule or "default schedule"
        if self.start is not None:
            text += f" {self.start}" if self.schedule == "constant" else f" from {self.start}"
        if self.confidence is not None and self.schedule != "constant":
            text += f", confidence {self.confidence:g}"
        return text


@dataclass(frozen=True)
class Settings:
    """A side's settings: `attention` (None: the version's default; 4.31 has no choice) and its draft length."""

    attention: str | None = None
    draft: DraftLength = field(default_factory=DraftLength)

    def to_json(self):
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text):
        if not text:
            return cls()
        values = json.loads(text) if isinstance(text, str) else dict(text)
        return cls(attention=values.get("attention"), draft=DraftLength(**values.get("draft", {})))
