"""Which names may reach C++ and file paths, and how tolerated names are made safe."""

from __future__ import annotations

import re

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

CPP_KEYWORDS = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
    char16_t char32_t class compl concept const consteval constexpr constinit const_cast
    continue co_await co_return co_yield decltype default delete do double dynamic_cast
    else enum explicit export extern false float for friend goto if inline int long mutable
    namespace new noexcept not not_eq nullptr operator or or_eq private protected public
    register reinterpret_cast requires return short signed sizeof static static_assert
    static_cast struct switch template this thread_local throw true try typedef typeid
    typename union unsigned using virtual void volatile wchar_t while xor xor_eq""".split()
)

# Standard C/C++ macros and the reserved forms (_X): as a name they would expand or clash.
C_MACROS = frozenset(
    """NULL EOF NAN INFINITY HUGE_VAL HUGE_VALF BUFSIZ FILENAME_MAX errno assert offsetof
    stdin stdout stderr EXIT_SUCCESS EXIT_FAILURE RAND_MAX CHAR_BIT MB_LEN_MAX""".split()
)
_LIMIT_MACRO = re.compile(
    r"U?INT(8|16|32|64|MAX|PTR)_(MIN|MAX|C)\Z|SIZE_MAX\Z|(CHAR|SCHAR|UCHAR|SHRT|USHRT|INT|UINT|"
    r"LONG|ULONG|LLONG|ULLONG|FLT|DBL|LDBL)_(MIN|MAX|EPSILON|TRUE_MIN)\Z"
)
# Names the generated C++ itself uses in the scope of an op's arguments.
GENERATED_NAMES = frozenset({"Tensor", "TensorType", "GraphStatus", "Op", "qco", "std", "op"})

# Generated code names its own helpers with this prefix; user names may not use it.
RESERVED_PREFIX = "qco_"

MAX_NAME_LENGTH = 128


def identifier_problem(name: str) -> str | None:
    """Why ``name`` cannot be used verbatim as a C++ identifier and a file name, or None."""
    if not _IDENTIFIER.match(name):
        return "use letters, digits and '_' only, not starting with a digit"
    if name in CPP_KEYWORDS:
        return "it is a C++ keyword"
    if name in C_MACROS or _LIMIT_MACRO.match(name):
        return "it is a standard C macro, which would expand inside the generated code"
    if re.match(r"_[A-Z]|__", name):
        return "names starting with '__' or '_' and a capital letter are reserved for the compiler"
    if name.startswith(RESERVED_PREFIX):
        return f"names starting with {RESERVED_PREFIX} are the generated code's own"
    if len(name) > MAX_NAME_LENGTH:
        return f"it is longer than {MAX_NAME_LENGTH} characters"
    return None


def scope_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name something beside the generated code's own names (an argument,
    or a package, which becomes a C++ namespace), or None."""
    if name in GENERATED_NAMES:
        return f"the generated code uses '{name}' itself"
    return identifier_problem(name)


def is_argument_name(name: str) -> bool:
    """True if ``name`` can name a function argument beside the generated code's own names."""
    return scope_name_problem(name) is None


def sanitize_identifier(name: str) -> str:
    """Map a tolerated tensor name such as ``in[0]`` to a safe identifier (``in_0``)."""
    cleaned = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "arg"
    cleaned = re.sub(r"_+", "_", cleaned)
    if cleaned[0].isdigit() or cleaned.startswith(RESERVED_PREFIX):
        cleaned = "t_" + cleaned
    if not is_argument_name(cleaned):
        cleaned += "_"
    return cleaned[:MAX_NAME_LENGTH]
