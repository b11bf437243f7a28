"""Errors the user can fix. The CLI prints them as one line and exits with status 2."""


class ZooError(Exception):
    """Bad input, a bad config or a missing file: a one-line message naming the file, row or key."""

    exit_code = 2
