"""``qnn-custom-ops llm``: a Hugging Face checkpoint to the phone, one module per command
(``families``, ``export``, ``generate``, ``analyze``, ``evaluate``: ``llm eval``) registering its own
parser, beside what they share (``common``). Thin layers over the ``llm`` package.

Progress goes to stderr, one line per step, when stderr is a terminal or with ``--progress``
(``--quiet`` silences it); generated text goes to stdout as it grows.
"""

from __future__ import annotations

from . import analyze, evaluate, export, families, generate


def add_commands(commands) -> None:
    """``llm`` and its actions under the CLI's subcommands (building the parser imports nothing
    heavy: ``export_checkpoint`` checks ``--quant`` and ``--target``)."""
    llm = commands.add_parser(
        "llm", help="a Hugging Face checkpoint to the phone: list the families, export, generate, evaluate"
    )
    actions = llm.add_subparsers(dest="llm_command", required=True, metavar="ACTION")
    for command in (families, export, generate, analyze, evaluate):
        command.add_command(actions)
