"""`[[alerts.inhibit]]`: Alertmanager's inhibit rules over the labels of the watchdog's alerts.

While an alert matching a rule's `source_matchers` fires, the alerts matching its
`target_matchers` whose `equal` labels have the same values are held: they change state, and
announce nothing until the source alert stops firing (docs/alerts.md#inhibition). The labels
are the ones every receiver sends: `alertname` (the check id), `severity`, `source`, `kind`.
A matcher is written as in Alertmanager: `alertname = "telemetry_freshness"`, `!=`, `=~` and
`!~` (an anchored regular expression).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import field_validator

from watchdog.core.settings.receivers import as_tuple
from watchdog.core.settings.values import ConfigModel
from watchdog.core.vocabulary import FRESHNESS_CHECK_ID

__all__ = ["DEFAULT_INHIBIT", "LABELS", "InhibitRule", "Matcher"]

# The labels an alert has (alerts.facts, the receivers' labels).
LABELS = ("alertname", "severity", "source", "kind")

_MATCHER = re.compile(
    r"\s*(?P<label>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<op>=~|!~|!=|=)\s*"
    r'(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s"]*))\s*'
)
_FORM = 'label = "value" (or !=, =~, !~), label one of ' + ", ".join(LABELS)


@dataclass(frozen=True)
class Matcher:
    """One label matcher, as Alertmanager writes it."""

    label: str
    op: str  # =, !=, =~, !~
    value: str

    @classmethod
    def parse(cls, text: str) -> Matcher:
        """`alertname = "x"`, or a ValueError naming the accepted form."""
        found = _MATCHER.fullmatch(text)
        if found is None:
            raise ValueError(f"{text!r} is not a matcher ({_FORM})")
        label, op = found["label"], found["op"]
        if label not in LABELS:
            raise ValueError(f"{text!r}: unknown label {label!r} (labels: {', '.join(LABELS)})")
        quoted = found["quoted"]
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else found["bare"]
        if op in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"{text!r}: not a regular expression ({exc})") from None
        return cls(label, op, value)

    def matches(self, labels: Mapping[str, str]) -> bool:
        found = labels.get(self.label, "")
        if self.op == "=":
            return found == self.value
        if self.op == "!=":
            return found != self.value
        hit = re.fullmatch(self.value, found) is not None
        return hit if self.op == "=~" else not hit

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"')
        return f'{self.label}{self.op}"{escaped}"'


class InhibitRule(ConfigModel):
    """One `[[alerts.inhibit]]` table: while a source alert fires, its targets are held."""

    source_matchers: tuple[str, ...]
    target_matchers: tuple[str, ...]
    equal: tuple[str, ...] = ()

    @field_validator("source_matchers", "target_matchers", "equal", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return as_tuple(value)

    @field_validator("source_matchers", "target_matchers")
    @classmethod
    def _matchers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError(f"must list at least one matcher ({_FORM})")
        return tuple(str(Matcher.parse(text)) for text in value)

    @field_validator("equal")
    @classmethod
    def _labels(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for label in value:
            if label not in LABELS:
                raise ValueError(f"unknown label {label!r} (labels: {', '.join(LABELS)})")
        return value

    def is_source(self, labels: Mapping[str, str]) -> bool:
        return all(Matcher.parse(m).matches(labels) for m in self.source_matchers)

    def is_target(self, labels: Mapping[str, str]) -> bool:
        return all(Matcher.parse(m).matches(labels) for m in self.target_matchers)

    def inhibits(self, source: Mapping[str, str], target: Mapping[str, str]) -> bool:
        """Whether a firing alert labelled `source` holds one labelled `target`.

        As in Alertmanager, an alert matching both sides of the rule is held only by a
        source alert that does not (so no alert holds itself).
        """
        if not (self.is_source(source) and self.is_target(target)):
            return False
        if self.is_source(target) and self.is_target(source):
            return False
        return all(source.get(label, "") == target.get(label, "") for label in self.equal)


# By default, a breached telemetry_freshness holds the other checks of its source: they judge
# telemetry that stopped (the watchdog's own `store` and `run` alerts are not held).
DEFAULT_INHIBIT = (
    InhibitRule(
        source_matchers=(f'alertname="{FRESHNESS_CHECK_ID}"',),
        target_matchers=(f'alertname!~"{FRESHNESS_CHECK_ID}|store|run"',),
        equal=("source",),
    ),
)
