"""``llm families``: the model families exported, their runner versions, RoPE types and windows, and
what is refused, as text, Markdown tables or JSON."""

from __future__ import annotations

import argparse
import json
import sys

from .common import EXIT_OK, llm_module


def _cmd_families(args: argparse.Namespace) -> int:
    table = llm_module("family_table")
    if args.json:
        print(json.dumps(table.as_json(), indent=2))
    else:
        sys.stdout.write(table.render("markdown" if args.markdown else "text"))
    return EXIT_OK


def add_command(actions) -> None:
    """``llm families``."""
    families = actions.add_parser(
        "families", help="the model families exported, their runner versions, RoPE types, windows, what is refused"
    )
    form = families.add_mutually_exclusive_group()
    form.add_argument("--markdown", action="store_true", help="as Markdown tables (docs/llm-commands.md holds them)")
    form.add_argument("--json", action="store_true", help="as JSON")
    families.set_defaults(handler=_cmd_families)
