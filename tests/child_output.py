"""A child process's output read with a deadline: ``for line in proc.stdout`` waits forever on a child that hangs
(and pytest-timeout, stopping the test, leaves the child running)."""
import os
import queue
import signal
import subprocess
import threading
import time
import weakref
from collections import deque

import pytest

_READERS: "weakref.WeakKeyDictionary[subprocess.Popen, _LineQueue]" = weakref.WeakKeyDictionary()


class _LineQueue:
    """A thread that reads a child's stdout into a queue (None at its end), so a reader can wait with a deadline."""

    def __init__(self, stream):
        self.lines: queue.Queue = queue.Queue()
        self.tail: deque = deque(maxlen=20)
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream):
        try:
            for line in stream:
                self.lines.put(line)
        finally:
            self.lines.put(None)


def stdout_lines(proc: subprocess.Popen, timeout: float):
    """The lines of ``proc``'s stdout (a text pipe) as ``for line in proc.stdout`` gives them, but with a deadline:
    if the stream has not ended ``timeout`` seconds after this call (the child hangs, or never prints what the
    caller waits for), the child (its process group, when it leads one) is killed and the test fails with its last
    lines. Later calls continue where an earlier one stopped; read the child's stdout only through this function
    (``"".join(stdout_lines(proc, 60))``: the rest of it)."""
    reader = _READERS.get(proc)
    if reader is None:
        reader = _READERS[proc] = _LineQueue(proc.stdout)
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = reader.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            _kill(proc)
            tail = "".join(reader.tail)
            pytest.fail(f"{' '.join(map(str, proc.args))}: its output did not end within {timeout:g} s; killed. Last "
                        f"lines:\n{tail}", pytrace=False)
        if line is None:
            reader.lines.put(None)  # the end stays the end for a later call
            return
        reader.tail.append(line)
        yield line


def _kill(proc: subprocess.Popen) -> None:
    try:
        if os.getpgid(proc.pid) == proc.pid:  # started with start_new_session: torchrun and its workers too
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)
