"""Known reports and histories for the page tests, and a small HTML tree parser.

The page is parsed, not string-matched: `parse` builds a tree of elements
with html.parser, and `find` selects by tag, class and attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from html.parser import HTMLParser

from checks.base import CheckResult, DeviationCount, Report, Status, Window
from checks.breakdown import Dimension, FailingSession, Group, Triage
from checks.builtin import configured_checks
from checks.evidence import Evidence
from tests.builder import T0, H
from watchdog.core.settings import Settings
from watchdog.report.charts import Point
from watchdog.report.history import History
from watchdog.runner.plugins import default_settings

AT = T0 + 4 * H
HOSTILE_SESSION = '<script>alert("session")</script>'
HOSTILE_SOURCE = '"><img src=x onerror=alert(1)>'
HOSTILE_AGENTE = "<b>po</b>"

# (status, value, sample size) per check; every check id of docs/spec.md section 5.
KNOWN: dict[str, tuple[Status, float | None, int]] = {
    "recall_coverage": (Status.BREACHED, 3, 40),
    "observe_coverage": (Status.OK, 0, 38),
    "observe_failure_rate": (Status.BREACHED, 0.125, 64),
    "recall_failure_rate": (Status.OK, 0.01, 100),
    "recall_latency_p95": (Status.INSUFFICIENT_DATA, 900, 12),
    "circuit_breaker": (Status.OK, 1, 164),
    "telemetry_freshness": (Status.OK, 30, 5000),
    "recall_injection": (Status.NO_DATA, None, 0),
    "write_gate_drift": (Status.DISABLED, None, 0),
    "agent_deviation_contract": (Status.ERROR, None, 0),
    "recall_before_response": (Status.OK, 0, 57),
    "agent_deviation_evidence": (Status.OK, 0, 4),
}

EVIDENCE = {
    "recall_coverage": Evidence(sessions=("s-1", HOSTILE_SESSION, "s-3")),
    "observe_failure_rate": Evidence(completed=56, failed=5, lost=3, events=("ev-9", "ev-11")),
}

TRIAGE = {
    "recall_coverage": Triage(
        items=3,
        noun="sessions",
        dimensions=(Dimension("source", (Group("interactive", 3, 1.0),)),),
        sessions=(
            FailingSession(
                session_id=HOSTILE_SESSION,
                first_seen=T0 + H,
                last_seen=T0 + H + timedelta(minutes=30),
                events=12,
                missed=("start recall",),
            ),
        ),
    ),
    "observe_failure_rate": Triage(
        items=8,
        noun="events",
        dimensions=(
            Dimension("outcome", (Group("failed", 5, 0.625), Group("lost", 3, 0.375))),
            Dimension("error", (Group("store timeout after <n> for id <n>", 5, 0.625),)),
        ),
    ),
}


def known_report(settings: Settings | None = None) -> Report:
    """A report with every status, hostile ids and a deviation table."""
    specs = {s.id: s for s in configured_checks(settings or default_settings())}
    checks = {}
    for check_id, (status, value, n) in KNOWN.items():
        spec = specs[check_id]
        checks[check_id] = CheckResult(
            id=check_id,
            status=status,
            value=value,
            target=spec.target,
            severity=spec.severity,
            sample_size=n,
            summary=f"summary of {check_id} <i>not markup</i>",
            evidence=EVIDENCE.get(check_id, Evidence()),
            comparison=spec.comparison,
            unit=spec.unit,
            description=spec.description,
        )
    return Report(
        window=Window(at=AT, length=timedelta(hours=4), lookback=timedelta(hours=24)),
        source=HOSTILE_SOURCE,
        checks=checks,
        deviations=(
            DeviationCount(HOSTILE_AGENTE, "laco", 3),
            DeviationCount("dev", "reparo_pelo_usuario", 1),
        ),
        triage=TRIAGE,
    )


def known_history(n: int = 6, check_id: str = "observe_failure_rate") -> History:
    """`n` earlier windows of one check: value k/100, every third one breached."""
    points = [
        Point(
            AT - (n - k) * timedelta(hours=4),
            k / 100,
            Status.BREACHED if k % 3 == 0 else Status.OK,
        )
        for k in range(n)
    ]
    return History(points={check_id: points}, windows=max(n + 1, 42))


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    content: list[Element | str] = field(default_factory=list)

    @property
    def children(self) -> list[Element]:
        return [c for c in self.content if isinstance(c, Element)]

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def all_text(self) -> str:
        """The text of the element and its descendants, in document order."""
        return "".join(c if isinstance(c, str) else c.all_text() for c in self.content)

    def walk(self) -> list[Element]:
        out = [self]
        for child in self.children:
            out += child.walk()
        return out

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Element]:
        """Descendants by tag, class and exact attribute values (`data_check` = `data-check`)."""
        wanted = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [
            e
            for e in self.walk()[1:]
            if (tag is None or e.tag == tag)
            and (cls is None or cls in e.classes)
            and all(e.attrs.get(k) == v for k, v in wanted.items())
        ]


VOID = {"meta", "link", "br", "hr", "img", "input", "col", "area", "base", "wbr", "source"}


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].content.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].content.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].content.append(data)


def parse(page: str) -> Element:
    """The page as a tree of elements."""
    builder = _TreeBuilder()
    builder.feed(page)
    builder.close()
    return builder.root


def page_of(history: History | None = None, settings: Settings | None = None) -> str:
    """The page of the known report, with `history`."""
    from watchdog.report.page import render_page

    return render_page(known_report(settings), history, settings=settings)
