"""What a run adds to this process's resident memory (``RssGrowth``): the figure that says whether a run holds its
data or only its batches. ``loop.peak_rss_mb`` is the process's peak since it started, which hides that wherever
the process once held more than the run adds (its imports, an earlier run in the same process, CI's 1,808 MB)."""
from __future__ import annotations

import ctypes
import os
import threading


def current_rss_mb() -> float | None:
    """This process's resident memory now (MB); None where neither /proc nor psutil tells."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    return psutil.Process().memory_info().rss / 2**20


def release_free_heap() -> None:
    """Hand the C heap's free pages back to the OS (glibc's malloc_trim; elsewhere nothing), so that what a run
    allocates into memory freed before it, resident but free, counts as its growth too."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


class RssGrowth:
    """``with RssGrowth() as rss:`` around a stretch of work; ``rss.growth_mb()``: the most resident memory seen
    while it ran, sampled every ``interval`` s on a daemon thread, less the resident memory when it began.

    Sampled rather than read off the kernel's high-water mark, which cannot be moved without harm: resetting it
    (Linux's /proc/self/clear_refs) would also lower the peak that wait4 and /usr/bin/time report for the whole
    process. A spike shorter than ``interval`` can be missed; data a run holds stays resident while it trains."""

    def __init__(self, interval: float = 0.01):
        self.interval = interval
        self.start: float | None = None
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RssGrowth:
        release_free_heap()
        self.start = current_rss_mb()
        if self.start is not None:
            self.peak = self.start
            self._thread = threading.Thread(target=self._sample, name="zoo-rss-growth", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._see()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._see()

    def _see(self) -> None:
        now = current_rss_mb() if self.start is not None else None
        if now is not None and now > self.peak:
            self.peak = now

    def growth_mb(self) -> float | None:
        """MB the work added at its peak; None where resident memory cannot be read here."""
        if self.start is None:
            return None
        if not self._stop.is_set():  # still running: the peak so far
            self._see()
        return max(0.0, self.peak - self.start)
