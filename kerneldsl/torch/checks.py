"""``kd.torch.opcheck`` and the sample inputs it runs on, made from the declaration.

``torch.library.opcheck`` checks what registration promised: the schema against what the
kernel reads and writes, the fake kernel against the real one (shapes, dtypes, strides),
autograd registration, and that tracing works (``aot_dispatch_dynamic``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..dtypes import is_dtype_name
from ..jit.signature import ArrayParam, Expr, ScalarParam
from ..jit.signature.spelling import NO_DEFAULT
from .operator import TorchOp
from .tensors import torch_dtype

_FIRST_EXTENT = 3  # symbols get 3, 4, 5, ...: distinct extents catch a swapped axis


def sample_inputs(
    op: TorchOp,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    dtypes: Mapping[str, torch.dtype] | None = None,
    sizes: Mapping[str, int] | None = None,
    requires_grad: bool = False,
    seed: int = 0,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments for one call of ``op``: a random tensor for each array it reads (dtype variables
    take ``dtypes[name]``, else ``dtype``; symbols ``sizes[name]``, else distinct small extents),
    a number of each scalar's type, each constant's default (else 1), and the keyword sizes and
    dtypes outputs need. ``requires_grad``: floating-point tensors require grad. ``device``: where
    the tensors live (``"cpu"`` runs the op on the CPU device). ``seed``: the tensors' values, the
    same for the same seed."""
    decl = op.declaration
    generator = torch.Generator().manual_seed(seed)
    symbols = {s: _FIRST_EXTENT + i for i, s in enumerate(decl.signature.symbols)}
    symbols.update(sizes or {})
    types = {v: (dtypes or {}).get(v, dtype) for v in decl.signature.dtype_vars}
    # a computed extent (kd.cdiv(n, 4)) is the value the declaration computes from the symbols
    names = {**{c.name: c.default if c.has_default else 1 for c in decl.consts}, **symbols}
    args: list[Any] = []
    for p in decl.positional:
        if isinstance(p, ArrayParam):
            shape = tuple(
                d if isinstance(d, int) else d.evaluate(names) if isinstance(d, Expr) else symbols[d] for d in p.shape
            )
            t = _random(shape, _dtype_of(p.dtype, types), generator).to(device)
            args.append(t.requires_grad_() if requires_grad and (t.is_floating_point() or t.is_complex()) else t)
        else:
            args.append(_number(p, types))
    kwargs: dict[str, Any] = {s: symbols[s] for s in decl.sizes}
    kwargs.update({v: types[v] for v in decl.dtype_args})
    for c in decl.consts:
        if not c.has_default:
            kwargs[c.name] = c.type(1)
    return tuple(args), kwargs


def opcheck(
    op: TorchOp,
    *args: Any,
    test_utils: str | Sequence[str] | None = None,
    **kwargs: Any,
) -> dict[str, str]:
    """``torch.library.opcheck`` of ``op`` on ``args`` / ``kwargs`` (none given: ``sample_inputs(op)``);
    raises on the first failed check, else returns each check's result. ``test_utils``: the checks
    to run, by ``torch.library.opcheck``'s names (all of them by default)."""
    if not args and not kwargs:
        args, kwargs = sample_inputs(op)
    options = {} if test_utils is None else {"test_utils": test_utils}
    results: dict[str, str] = torch.library.opcheck(op.overload, args, kwargs, **options)
    return results


def _dtype_of(declared: str, types: Mapping[str, torch.dtype]) -> torch.dtype:
    return torch_dtype(declared) if is_dtype_name(declared) else types[declared]


def _random(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=generator, dtype=dtype)
    low = 0 if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64) else -5
    return torch.randint(low, 6, shape, generator=generator, dtype=torch.int64).to(dtype)


def _number(p: ScalarParam, types: Mapping[str, torch.dtype]) -> Any:
    if p.default is not NO_DEFAULT:
        return p.default
    dtype = _dtype_of(p.dtype, types)
    if dtype == torch.bool:
        return True
    if dtype.is_complex:
        return 1.5 - 0.5j
    return 1.5 if dtype.is_floating_point else 2
