"""The family of errors whose message already says what is wrong and how to fix it.

Every user-facing error of the package derives from ``ReportedError``; the CLI prints its
message as one line and exits 2.
"""


class ReportedError(Exception):
    """Raised for bad input or a missing prerequisite; the CLI prints the message as is (exit 2)."""


class UsageError(ReportedError, ValueError):
    """A call or command line that cannot work as given (an unknown option value, a missing file)."""
