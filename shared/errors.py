"""Errors the user can fix. The CLI prints them as one line and exits with the error's status."""


class ZooError(Exception):
    """Bad input, a bad config or a missing file: a one-line message naming the file, row or key (exit 2)."""

    exit_code = 2


class ResourceError(ZooError):
    """The machine ran out of memory or disk, or a path cannot be written: one line with the fixes, exit 1."""

    exit_code = 1
