"""The stdout receiver: each message as plain text on a stream, or appended to a file.

Under `check` the stream is stderr, since the report owns stdout (docs/alerts.md#configure-slack).
"""

from __future__ import annotations

import sys
from typing import ClassVar, TextIO

from alerts.base import Deadline, DeliveryError, Message, Receiver, ReceiverContext
from watchdog.core.quiet import QuietHours
from watchdog.core.settings.receivers import ReceiverModel


class StdoutSettings(ReceiverModel):
    """`[alerts.stdout]`: the same message as plain text, for cron mail and debugging.

    Under `check` the report owns stdout, so the text goes to stderr there;
    with `file` it is appended to that file instead, wherever it runs.
    """

    kind: ClassVar[str] = "stdout"
    named: ClassVar[bool] = False
    title: ClassVar[str] = "plain text"

    enabled: bool = True
    file: str | None = None

    def sends(self) -> bool:
        return self.enabled


class StdoutNotifier:
    """The message as plain text on a stream (stdout by default) or appended to a file.

    For cron mail and debugging. Commands whose stdout is a report (`check`)
    hand in stderr, so the report stays clean.
    """

    per_alert: ClassVar[bool] = False

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        file: str | None = None,
        quiet_hours: QuietHours | None = None,
        name: str = "stdout",
    ) -> None:
        self.name = name
        self.stream = stream
        self.file = file
        self.quiet_hours = quiet_hours

    @classmethod
    def from_settings(
        cls,
        settings: StdoutSettings,
        *,
        name: str = "stdout",
        context: ReceiverContext | None = None,
    ) -> StdoutNotifier:
        stream = context.text_stream if context is not None else None
        return cls(stream, file=settings.file, quiet_hours=settings.quiet_hours, name=name)

    def describe(self) -> str:
        if self.file:
            return f"{self.name} (plain text appended to {self.file})"
        where = "standard error" if self.stream is sys.stderr else "standard output"
        return f"{self.name} (plain text on {where})"

    def send(self, message: Message, deadline: Deadline) -> None:
        text = message.plain.rstrip("\n") + "\n"
        try:
            if self.file:
                with open(self.file, "a", encoding="utf-8") as out:
                    out.write(text)
                return
            stream = self.stream or sys.stdout
            stream.write(text)
            stream.flush()
        except OSError as exc:
            raise DeliveryError(self.name, f"cannot write: {exc.strerror}") from None


RECEIVER = Receiver(model=StdoutSettings, notifier=StdoutNotifier)
