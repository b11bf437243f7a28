"""Progress of long data work (decoding, tokenizing, featurising, embedding): a line every few seconds with the
count, the rate and the time left, and nothing at all for work that ends sooner."""
from __future__ import annotations

import time
from collections.abc import Callable


class Progress:
    """``update(n)`` after each piece of work; ``done()`` at the end prints the total when any line was printed
    (or the work took longer than ``every``)."""

    def __init__(self, total: int | None, what: str, log: Callable[[str], None], unit: str = "items",
                 every: float = 5.0):
        self.total, self.what, self.log, self.unit, self.every = total, what, log, unit, every
        self.count = 0
        self.started = self.last = time.monotonic()
        self.printed = False

    def update(self, n: int = 1) -> None:
        self.count += n
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last, self.printed = now, True
            self.log(self._line(now))

    def _line(self, now: float) -> str:
        rate = self.count / max(now - self.started, 1e-9)
        if self.total:
            left = (self.total - self.count) / rate if rate > 0 else float("inf")
            return (f"{self.what}: {self.count:,}/{self.total:,} {self.unit} ({100 * self.count / self.total:.0f}%), "
                    f"{rate:,.0f}/s, ~{left:.0f}s left")
        return f"{self.what}: {self.count:,} {self.unit}, {rate:,.0f}/s"

    def done(self) -> None:
        now = time.monotonic()
        if self.printed or now - self.started >= self.every:
            rate = self.count / max(now - self.started, 1e-9)
            self.log(f"{self.what}: {self.count:,} {self.unit} in {now - self.started:.1f}s ({rate:,.0f}/s)")
