"""``validate``, ``generate`` (and ``generate-op-package``) and ``opdef-from-torch``: the commands
that read and write OpDef configs and generate packages."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .inputs import import_user_module, load_configs, torch_overload
from .process import EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    package = load_configs(args.configs)
    ops = ", ".join(package.ops)
    print(f"{package.name}: {len(package.ops)} op(s) valid: {ops}")
    return EXIT_OK


def _cmd_generate(args: argparse.Namespace) -> int:
    from ..generator import generate

    package = load_configs(args.configs)
    result = generate(package, args.output, force=args.force, dry_run=args.dry_run, api=args.api)
    for step in result.steps:
        if args.dry_run or step.action.value != "unchanged":
            print(step)
    print(result.summary())
    return EXIT_OK


def _resolve_op(spec: str) -> tuple[str | None, Any]:
    """``MODULE:ns.op[.overload][=QnnType]`` -> (QNN type or None, the torch overload)."""
    target, _, qnn_type = spec.partition("=")
    module, sep, op = target.rpartition(":")
    if not sep or not module or not op:
        raise UsageError(f"{spec!r}: expected MODULE:NAMESPACE.OP[.OVERLOAD][=QnnOpType]")
    import_user_module(module, repr(spec))
    return qnn_type or None, torch_overload(op, repr(spec), f"after importing {module}")


def _cmd_opdef_from_torch(args: argparse.Namespace) -> int:
    from ..torch_bridge.from_torch import opdefs_from_torch, qnn_type_for, tensor_choices

    ops: dict[str, Any] = {}
    for spec in args.ops:
        qnn_type, overload = _resolve_op(spec)
        qnn_type = qnn_type or qnn_type_for(overload)
        if qnn_type in ops:
            raise UsageError(
                f"{spec!r}: QNN op type {qnn_type} is already {ops[qnn_type]}'s: "
                f"give one of them another with ={qnn_type}2"
            )
        ops[qnn_type] = overload
    enums = {}
    for item in args.enum:
        name, _, values = item.partition("=")
        if not values:
            raise UsageError(f"--enum {item!r}: expected ARG=value1,value2,...")
        enums[name] = values.split(",")
    tensors = tensor_choices(args.dtype, args.static, args.activations)
    xml = opdefs_from_torch(ops, package=args.package, enums=enums, tensors=tensors)
    if args.output:
        from ..atomic_files import write_atomic

        write_atomic(Path(args.output), xml.encode())
        print(f"wrote {args.output}: {', '.join(ops)}")
    else:
        sys.stdout.write(xml)
    return EXIT_OK


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("configs", nargs="+", metavar="CONFIG", help="OpDef XML config(s) of one package")
    parser.add_argument(
        "-o",
        "--output",
        default=".",
        metavar="OUT",
        help="directory that receives <PackageName>/ (default: current directory)",
    )
    parser.add_argument(
        "--force", action="store_true", help="overwrite src/ops/*.cpp and kernels/*.h even if you edited them"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    parser.add_argument(
        "--api",
        choices=("classic", "qhpi"),
        default="classic",
        help="the op package interface: classic (the HTP's C++ one, built against one QNN SDK's headers) or "
        "qhpi (QAIRT's C plugin interface: no SDK header, one x86 build for every QAIRT with QHPI)",
    )
    parser.set_defaults(handler=_cmd_generate)


def add_commands(commands: Any) -> None:
    """``validate``, ``generate`` and ``opdef-from-torch`` under the CLI's subcommands."""
    validate = commands.add_parser("validate", help="check OpDef configs; print every problem")
    validate.add_argument("configs", nargs="+", metavar="CONFIG")
    validate.set_defaults(handler=_cmd_validate)
    add_generate_arguments(commands.add_parser("generate", help="generate the HTP op package"))
    from_torch = commands.add_parser("opdef-from-torch", help="write an OpDef config for existing torch ops")
    from_torch.add_argument(
        "ops",
        nargs="+",
        metavar="MODULE:OP[=QnnOpType]",
        help="module that registers the op, and the op, e.g. my_model.ops:my_ops.mul3.default",
    )
    from_torch.add_argument("--package", required=True, help="PackageName of the config")
    from_torch.add_argument(
        "--enum", action="append", default=[], metavar="ARG=V1,V2", help="allowed values of a str argument (repeatable)"
    )
    from_torch.add_argument(
        "--dtype",
        action="append",
        default=[],
        metavar="ARG=DT[,DT]",
        help="datatypes of a tensor argument or output, e.g. indices=INT_32 (repeatable)",
    )
    from_torch.add_argument(
        "--static",
        action="append",
        default=[],
        metavar="ARG",
        help="a weight input: IsStaticTensor, with each quant_dtype's weight datatypes",
    )
    from_torch.add_argument(
        "--activations",
        default="8",
        metavar="8,16",
        help="fixed-point widths of the other tensors besides FLOAT_32 (default 8)",
    )
    from_torch.add_argument("-o", "--output", help="config file to write (default: standard output)")
    from_torch.set_defaults(handler=_cmd_opdef_from_torch)
