"""Command line: ``qnn-custom-ops SUBCOMMAND`` and ``generate-op-package``.

Exit codes: 0 success, 2 invalid input (one line per problem on stderr), 1 internal error.
No traceback reaches the user unless QCO_DEBUG=1.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Callable, Sequence

from .opdef import OpDefError, OpDefWarning, OpPackage, load_package

EXIT_OK, EXIT_INTERNAL, EXIT_INVALID = 0, 1, 2


class UsageError(Exception):
    """Bad input that is not an OpDef problem; the message is the one line to print."""


def _load(configs: Sequence[str]) -> OpPackage:
    """Load configs, printing each tolerated oddity as its one-line warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OpDefWarning)
        package = load_package(*configs)
    for warning in caught:
        print(str(warning.message), file=sys.stderr)
    return package


def _cmd_validate(args: argparse.Namespace) -> int:
    package = _load(args.configs)
    ops = ", ".join(package.ops)
    print(f"{package.name}: {len(package.ops)} op(s) valid: {ops}")
    return EXIT_OK


def _cmd_generate(args: argparse.Namespace) -> int:
    from .generator import UnsafeOutputError, generate

    package = _load(args.configs)
    try:
        result = generate(package, args.output, force=args.force, dry_run=args.dry_run)
    except UnsafeOutputError as exc:
        raise UsageError(str(exc)) from exc
    for step in result.steps:
        if args.dry_run or step.action.value != "unchanged":
            print(step)
    print(result.summary())
    return EXIT_OK


def _resolve_op(spec: str) -> tuple[str | None, object]:
    """``MODULE:ns.op[.overload][=QnnType]`` -> (QNN type or None, the torch overload)."""
    import importlib

    import torch

    target, _, qnn_type = spec.partition("=")
    module, sep, op = target.rpartition(":")
    if not sep or not module or not op:
        raise UsageError(f"{spec!r}: expected MODULE:NAMESPACE.OP[.OVERLOAD][=QnnOpType]")
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"{spec!r}: cannot import {module}: {exc}") from exc
    parts = op.replace("::", ".").split(".")
    if len(parts) not in (2, 3):
        raise UsageError(f"{spec!r}: name the op as NAMESPACE.OP or NAMESPACE.OP.OVERLOAD")
    namespace, name, overload = (*parts, "default")[:3]
    try:
        return qnn_type or None, getattr(getattr(getattr(torch.ops, namespace), name), overload)
    except (AttributeError, RuntimeError) as exc:
        raise UsageError(f"{spec!r}: no torch op {namespace}::{name}.{overload} after importing {module}") from exc


def _cmd_opdef_from_torch(args: argparse.Namespace) -> int:
    from .builder.from_torch import opdefs_from_torch, qnn_type_for

    ops = {}
    for spec in args.ops:
        qnn_type, overload = _resolve_op(spec)
        ops[qnn_type or qnn_type_for(overload)] = overload
    enums = {}
    for item in args.enum:
        name, _, values = item.partition("=")
        if not values:
            raise UsageError(f"--enum {item!r}: expected ARG=value1,value2,...")
        enums[name] = values.split(",")
    try:
        xml = opdefs_from_torch(ops, package=args.package, enums=enums)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if args.output:
        from .generator.writer import write_atomic

        write_atomic(Path(args.output), xml.encode())
        print(f"wrote {args.output}: {', '.join(ops)}")
    else:
        sys.stdout.write(xml)
    return EXIT_OK


def _add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("configs", nargs="+", metavar="CONFIG", help="OpDef XML config(s) of one package")
    parser.add_argument("-o", "--output", default=".", metavar="OUT",
                        help="directory that receives <PackageName>/ (default: current directory)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite src/ops/*.cpp and kernels/*.h even if you edited them")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    parser.set_defaults(handler=_cmd_generate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qnn-custom-ops", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    validate = commands.add_parser("validate", help="check OpDef configs; print every problem")
    validate.add_argument("configs", nargs="+", metavar="CONFIG")
    validate.set_defaults(handler=_cmd_validate)
    _add_generate_arguments(commands.add_parser("generate", help="generate the HTP op package"))
    from_torch = commands.add_parser("opdef-from-torch", help="write an OpDef config for existing torch ops")
    from_torch.add_argument("ops", nargs="+", metavar="MODULE:OP[=QnnOpType]",
                            help="module that registers the op, and the op, e.g. my_model.ops:my_ops.mul3.default")
    from_torch.add_argument("--package", required=True, help="PackageName of the config")
    from_torch.add_argument("--enum", action="append", default=[], metavar="ARG=V1,V2",
                            help="allowed values of a str argument (repeatable)")
    from_torch.add_argument("-o", "--output", help="config file to write (default: standard output)")
    from_torch.set_defaults(handler=_cmd_opdef_from_torch)
    return parser


def _run(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return handler(args)
    except OpDefError as exc:
        for diagnostic in exc.diagnostics:
            print(diagnostic, file=sys.stderr)
        return EXIT_INVALID
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the last line of defence: one line, not a traceback
        if os.environ.get("QCO_DEBUG"):
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (rerun with QCO_DEBUG=1 and report it)",
              file=sys.stderr)
        return EXIT_INTERNAL


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _run(args.handler, args)


def generate_op_package_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="generate-op-package",
                                     description="Generate an HTP op package from OpDef XML.")
    _add_generate_arguments(parser)
    args = parser.parse_args(argv)
    return _run(args.handler, args)
