"""A torch operator's name, parsed once (torchgen's ``OperatorName``): every place that needs
``ns::op``, ``ns.op.overload``, the ``.out`` overload or the ``torch.ops`` path reads it here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class OperatorName:
    namespace: str
    name: str
    overload: str  # "default" for the unnamed overload, as torch.ops spells it

    @classmethod
    def of(cls, overload: torch._ops.OpOverload) -> OperatorName:
        namespace, name = overload._schema.name.split("::")
        return cls(namespace, name, overload._overloadname)

    @property
    def qualified(self) -> str:
        """``ns::op``: the schema's name."""
        return f"{self.namespace}::{self.name}"

    @property
    def dotted(self) -> str:
        """``ns.op.overload``: how QNN's custom_op_name and our messages name it."""
        return f"{self.namespace}.{self.name}.{self.overload}"

    @property
    def python(self) -> str:
        """``torch.ops.ns.op.overload``: what a user types."""
        return f"torch.ops.{self.dotted}"

    @property
    def out(self) -> str:
        """``ns::op.out``: the variant ``to_executorch`` calls."""
        return f"{self.qualified}.out"

    def packet(self) -> Any:
        """``torch.ops.ns.op``, holding every overload of the op."""
        return getattr(getattr(torch.ops, self.namespace), self.name)
