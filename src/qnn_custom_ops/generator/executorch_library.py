"""The ExecuTorch host library's C++: a package's kernels registered as ExecuTorch kernels
``<ns>::<op>.out`` (and ``qco_quantized::<ns>__<op>.out`` on quantized tensors with their
encodings), rendered from the binding. Python decides every type and conversion; the
templates only place them. ``runtime.host_library`` builds what this renders.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ReportedError
from ..opdef import Datatype, OpPackage
from ..opdef.datatypes import kernel_rows
from ..torch_bridge import ArgBinding, ArgKind, OpBinding, OpPackageBinding
from ..torch_bridge.define import has_out_variant
from ..torch_bridge.op_name import OperatorName
from ..torch_bridge.quantized import ENCODING_ARGUMENTS, quantized_name
from ..torch_bridge.quantized import NAMESPACE as QUANTIZED_NAMESPACE
from .abi import KERNEL_LIST_MARKER
from .context import cpp_string
from .render import template_environment


class UnsupportedHostKernelError(ReportedError, ValueError):
    """A bound op the host library cannot adapt (no ``.out`` variant, a parameter datatype it
    cannot pass): refused before anything is built."""


# QNN datatype of a parameter -> (C++ storage type, qco::DType name), for every plain datatype.
_PARAM_STORAGE = {
    r.datatype: (r.c_type, r.kernel_tag)
    for r in kernel_rows()
    if r.c_type is not None and not r.datatype.is_fixed_point
}
# ExecuTorch ScalarType -> qco::DType, for tensors.
_SCALAR_TYPES = [(r.scalar_type[0], r.kernel) for r in kernel_rows() if r.scalar_type is not None]
# Schema kind -> ExecuTorch C++ argument type.
_CPP_TYPES = {
    ArgKind.TENSOR: "Tensor",
    ArgKind.INT: "int64_t",
    ArgKind.FLOAT: "double",
    ArgKind.BOOL: "bool",
    ArgKind.STR: "std::string_view",
    ArgKind.INT_LIST: "ArrayRef<int64_t>",
    ArgKind.FLOAT_LIST: "ArrayRef<double>",
}


@dataclass(frozen=True)
class Conversion:
    expression: str  # C++ bool expression filling a holder
    message: str  # C++ string literal said when it is false


@dataclass(frozen=True)
class EnumTable:
    variable: str
    values: list[str]  # C++ string literals


@dataclass(frozen=True)
class KernelContext:
    qnn_type: str
    registered_name: str
    function: str
    signature: list[str]
    holders: list[str]
    conversions: list[Conversion]
    c_abi: str  # the package's C ABI function of the op, which runs its kernel
    output_views: list[str]
    input_views: list[str]
    param_views: list[str]
    enums: list[EnumTable]
    unboxing: list[str]  # C++ expressions taking each argument off the runtime's stack
    write_backs: list[str]  # holders of outputs converted from their storage, to copy back


def _check_out_variant(binding: OpBinding) -> None:
    name = OperatorName.of(binding.overload)
    if not has_out_variant(binding.overload):
        raise UnsupportedHostKernelError(
            f"{name.out} is not defined: to_executorch needs the out variant "
            f"(add it with qnn_custom_ops.register_out_variant({name.python}))"
        )


def _param_storage(binding: OpBinding, arg: ArgBinding) -> tuple[str, str]:
    datatype = Datatype.UINT_32 if arg.kind is ArgKind.STR else binding.opdef.datatypes(arg.tensor, "HTP")[0]
    if datatype not in _PARAM_STORAGE:
        raise UnsupportedHostKernelError(
            f"{binding.qnn_op_type}: param '{arg.tensor.name}' is {datatype.short_name}, which the host "
            "kernel adapter cannot pass (use an integer, FLOAT_32/64 or BOOL_8 datatype)"
        )
    return _PARAM_STORAGE[datatype]


def _variable(arg: ArgBinding) -> str:
    """The C++ name of a schema argument: prefixed, so no argument name (``ctx``, ``status``,
    ``int64_t``, ``NULL``...) can collide with ours or with C++."""
    return f"a_{arg.schema_name}"


def kernel_contexts(binding: OpBinding) -> list[KernelContext]:
    """The op's two ExecuTorch kernels: ``<ns>::<op>.out`` on float (or unquantized) tensors,
    and ``qco_quantized::<ns>__<op>.out`` on quantized tensors with their encodings."""
    _check_out_variant(binding)
    return [_kernel_context(binding, quantized=False), _kernel_context(binding, quantized=True)]


def _kernel_context(binding: OpBinding, quantized: bool) -> KernelContext:
    """Every C++ decision for one ExecuTorch kernel of one op."""
    registered, function = _kernel_names(binding, quantized)
    outputs = [f"qco_out{i}" for i in range(len(binding.opdef.outputs))]
    signature, unboxing = _signature(binding, outputs, quantized)
    param_conversions, enums = _param_conversions(binding, function)
    inputs = [_variable(a) for a in binding.inputs]
    return KernelContext(
        qnn_type=binding.qnn_op_type,
        registered_name=registered,
        function=function,
        signature=signature,
        holders=[f"h_{v}" for v in outputs + inputs + [_variable(a) for a in binding.params]],
        conversions=_tensor_conversions(binding, outputs, quantized) + param_conversions,
        c_abi=f"qco_{binding.package_name}_{binding.qnn_op_type}",
        output_views=[f"h_{out}.view" for out in outputs],
        input_views=[f"h_{v}.view" for v in inputs],
        param_views=[f"h_{_variable(a)}.view" for a in binding.params],
        enums=enums,
        unboxing=unboxing,
        write_backs=[f"h_{out}" for out in outputs] if quantized else [],
    )


def _kernel_names(binding: OpBinding, quantized: bool) -> tuple[str, str]:
    """(the name the kernel registers as, its C++ function)."""
    if quantized:
        name = quantized_name(binding)
        return f"{QUANTIZED_NAMESPACE}::{name}.out", f"qco_{QUANTIZED_NAMESPACE}_{name}_out"
    operator = OperatorName.of(binding.overload)
    return operator.out, f"qco_{operator.namespace}_{operator.name}_out"


def _signature(binding: OpBinding, outputs: list[str], quantized: bool) -> tuple[list[str], list[str]]:
    """The kernel's C++ parameters and how each is taken off the runtime's stack: the encoding
    lists (quantized), the schema's arguments in order, then the outputs."""
    encodings = ENCODING_ARGUMENTS if quantized else ()
    signature = [f"{_CPP_TYPES[a.kind]} {a.name}" for a in encodings]
    unboxing = [f"stack[{i}]->to<{_CPP_TYPES[a.kind]}>()" for i, a in enumerate(encodings)]
    by_index = {arg.schema_index: arg for arg in binding.inputs + binding.params}
    for index in range(len(binding.overload._schema.arguments)):
        arg = by_index[index]
        cpp = f"std::optional<{_CPP_TYPES[arg.kind]}>" if arg.optional else _CPP_TYPES[arg.kind]
        by_reference = arg.kind is ArgKind.TENSOR or arg.optional
        signature.append(f"const {cpp}& {_variable(arg)}" if by_reference else f"{cpp} {_variable(arg)}")
        stack = f"stack[{len(unboxing)}]"
        unboxing.append(f"{stack}->toTensor()" if cpp == "Tensor" else f"{stack}->to<{cpp}>()")
    signature += [f"Tensor& {out}" for out in outputs]
    unboxing += [f"stack[{len(unboxing) + i}]->toTensor()" for i in range(len(outputs))]
    return signature, unboxing


def _tensor_conversions(binding: OpBinding, outputs: list[str], quantized: bool) -> list[Conversion]:
    """Each output and input tensor into a view: as it is, or (quantized) with its encoding from
    the lists, whose lengths are checked first."""
    # (variable, as shown, index in the encoding lists: the inputs' encodings, then the outputs')
    first_output = len(binding.inputs)
    tensors = [
        (out, f"output {t.name}", first_output + i) for i, (out, t) in enumerate(zip(outputs, binding.opdef.outputs))
    ]
    tensors += [(_variable(a), f"input {a.tensor.name}", i) for i, a in enumerate(binding.inputs)]
    if not quantized:
        return [
            Conversion(
                f"qco::et::tensor_view({v}, h_{v})", cpp_string(f"{shown} has a dtype the kernel adapter cannot pass")
            )
            for v, shown, _ in tensors
        ]
    count = len(binding.inputs) + len(outputs)
    checks = [
        Conversion(
            " && ".join(f"{a.name}.size() == {count}" for a in ENCODING_ARGUMENTS),
            cpp_string(f"expected {count} encodings (inputs, then outputs)"),
        )
    ]
    return checks + [
        Conversion(
            f"qco::et::encoded_view({v}, {_encoding_at(index)}, h_{v})",
            cpp_string(f"{shown}: its storage does not hold its encoding's dtype"),
        )
        for v, shown, index in tensors
    ]


def _encoding_at(index: int) -> str:
    """The arguments of ``encoded_view`` for the ``index``-th encoding: dtype, scale, offset."""
    return ", ".join(f"{a.name}[{index}]" for a in ENCODING_ARGUMENTS)


def _param_conversions(binding: OpBinding, function: str) -> tuple[list[Conversion], list[EnumTable]]:
    """Each parameter into a rank-0 or rank-1 view of its OpDef datatype; a string through the
    table of its enum's values."""
    conversions, enums = [], []
    for arg in binding.params:
        storage, dtype = _param_storage(binding, arg)
        holder = f"h_{_variable(arg)}"
        if arg.kind is ArgKind.STR:
            table = EnumTable(f"{function}_{arg.schema_name}_values", [cpp_string(v) for v in arg.tensor.enum_values])
            enums.append(table)
            expression = f"qco::et::enum_view({_variable(arg)}, {table.variable}, qco::DType::k{dtype}, {holder})"
            message = f"param {arg.tensor.name} is not one of {', '.join(arg.tensor.enum_values)}"
        else:
            helper = "list_view" if arg.kind in (ArgKind.INT_LIST, ArgKind.FLOAT_LIST) else "scalar_view"
            expression = f"qco::et::{helper}<{storage}>({_variable(arg)}, qco::DType::k{dtype}, {holder})"
            message = f"param {arg.tensor.name} does not fit {storage}"
        conversions.append(Conversion(expression, cpp_string(message)))
    return conversions, enums


def _integer_storage() -> list[tuple[str, str]]:
    """(kernel dtype, C type) of every integer-like kernel dtype, for storage conversions."""
    return [
        (r.kernel_tag, "uint8_t" if r.c_type == "bool" else r.c_type)
        for r in kernel_rows()
        if r.c_type is not None and not r.datatype.is_float
    ]


def c_abi_sources(package_dir: Path, package: OpPackage) -> list[Path]:
    """The package's generated C ABI: its own unit and one per op (``host/src/ops/<Op>CApi.cpp``)."""
    return [
        package_dir / "host/src" / f"{package.name}CApi.cpp",
        *(package_dir / "host/src/ops" / f"{op}CApi.cpp" for op in package.ops),
    ]


def render_executorch_library(
    package_dir: Path, binding: OpPackageBinding, executorch_include: Path, executorch_library: Path
) -> dict[str, str]:
    """The CMake project of the host library, file name -> text, against the given ExecuTorch
    headers and ``libexecutorch.so``."""
    name = binding.package.name
    kernels = [kernel for op in binding.ops.values() for kernel in kernel_contexts(op)]
    env = template_environment()
    sources = ["executorch_kernels.cpp", *c_abi_sources(package_dir, binding.package)]
    return {
        "CMakeLists.txt": env.get_template("executorch/CMakeLists.txt.j2").render(
            package=name,
            target=f"qco_{name}_executorch",
            sources=sources,
            kernels_dir=package_dir / "kernels",
            executorch_include=executorch_include,
            executorch_library=executorch_library,
            executorch_library_dir=executorch_library.parent,
        ),
        "qco/executorch_adapter.h": env.get_template("executorch/executorch_adapter.h.j2").render(
            scalar_types=_SCALAR_TYPES, integer_storage=_integer_storage()
        ),
        "executorch_kernels.cpp": env.get_template("executorch/executorch_kernels.cpp.j2").render(
            package=name, kernels=kernels, c_abi=sorted({k.c_abi for k in kernels}), kernel_marker=KERNEL_LIST_MARKER
        ),
    }
