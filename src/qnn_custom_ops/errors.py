"""The base of errors whose message already says what is wrong and how to fix it."""


class ReportedError(Exception):
    """Raised for bad input or a missing prerequisite; the CLI prints the message as is (exit 2)."""
