"""Command line: ``qnn-custom-ops SUBCOMMAND`` and ``generate-op-package``.

Exit codes: 0 success, 2 invalid input (one line per problem on stderr), 1 internal error,
3 outputs outside the tolerance (``run``).
No traceback reaches the user unless QCO_DEBUG=1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..quiet import quiet_third_party
from . import kernel_commands, llm_commands, opdef_commands, run_command
from .opdef_commands import add_generate_arguments
from .process import OneLineParser, run_handler, signals_end_the_command


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="qnn-custom-ops", description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="show third-party log lines and warnings too")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (opdef_commands, run_command, kernel_commands, llm_commands):
        group.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # a command run again in another environment
    quiet_third_party(args.verbose)
    with signals_end_the_command():
        return run_handler(args.handler, args)


def generate_op_package_main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="generate-op-package", description="Generate an HTP op package from OpDef XML.")
    add_generate_arguments(parser)
    args = parser.parse_args(argv)
    return run_handler(args.handler, args)
