"""A DSL kernel as a `torch.library.custom_op`, usable in eager code and inside `torch.compile` graphs.

    vadd_op = torch_op("ptxforge::vadd", vadd, inputs=["a", "b"],
                       outputs={"c": lambda a, b: torch.empty_like(a)},
                       scalars={"n": lambda a, b: a.numel()},
                       grid=lambda a, b: ((a.numel() + 255) // 256,), block=(256,))
    c = vadd_op(x, y)                     # CPU tensors run on the emulator, CUDA tensors on their GPU
    torch.compile(lambda x, y: vadd_op(x, y) * 2)(x, y)

`inputs` names the kernel's pointer parameters that take the op's tensor arguments, in order; `outputs` maps
each output pointer parameter to a function of the inputs that makes an empty tensor of the output's shape
and dtype (it is also the op's fake implementation, so `torch.compile` sees shapes without running the
kernel); `scalars` gives the scalar parameters from the inputs; `grid`/`block` are shapes or functions of the
inputs. Every kernel parameter must be named exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ptxforge import _optional
from ptxforge.dsl.errors import DSLError

if TYPE_CHECKING:
    from torch._library.custom_ops import CustomOpDef

    from ptxforge.dsl.kernel import Kernel


def torch_op(name: str, kernel: Kernel, *, inputs: Sequence[str], outputs: Mapping[str, Callable],
             scalars: Mapping[str, Callable] | None = None, grid: Sequence[int] | Callable = (1,),
             block: Sequence[int] | Callable = (1,)) -> CustomOpDef:
    """Register `kernel` (a DSL `@kernel`) as the torch custom op `name` ("namespace::op"); returns the op."""
    torch = _optional.torch()
    scalars = dict(scalars or {})
    params = [n for n, _ in kernel.params]
    named = [*inputs, *outputs, *scalars]
    missing = [p for p in params if p not in named]
    extra = [n for n in named if n not in params]
    twice = sorted({n for n in named if named.count(n) > 1})
    if missing or extra or twice:
        raise DSLError(f"torch_op {name}: every parameter of {kernel.name} ({', '.join(params)}) must be named "
                       f"once in inputs, outputs or scalars" + (f"; missing {', '.join(missing)}" if missing else "")
                       + (f"; unknown {', '.join(extra)}" if extra else "")
                       + (f"; named twice {', '.join(twice)}" if twice else ""))
    if not outputs:
        raise DSLError(f"torch_op {name}: give at least one output parameter")
    result = "Tensor" if len(outputs) == 1 else "(" + ", ".join("Tensor" for _ in outputs) + ")"
    schema = "(" + ", ".join(f"Tensor {n}" for n in inputs) + f") -> {result}"

    def _shape(spec, tensors):
        return spec(*tensors) if callable(spec) else spec

    def fake(*tensors):
        made = [make(*tensors) for make in outputs.values()]
        return made[0] if len(made) == 1 else tuple(made)

    def impl(*tensors):
        made = {n: make(*tensors) for n, make in outputs.items()}
        given = dict(zip(inputs, tensors, strict=True))
        args = []
        for p in params:
            if p in given:
                args.append(given[p].contiguous())
            elif p in made:
                args.append(made[p])
            else:
                args.append(scalars[p](*tensors))
        on = sorted({str(t.device) for t in (*tensors, *made.values())})
        device = on[0] if len(on) == 1 and on[0].startswith("cuda") else "emu"  # CUDA tensors on one GPU: there
        if device == "cuda":  # torch's "cuda" is the current device
            device = f"cuda:{torch.cuda.current_device()}"
        kernel.launch(grid=_shape(grid, tensors), block=_shape(block, tensors), args=args, device=device)
        out = list(made.values())
        return out[0] if len(out) == 1 else tuple(out)

    op = torch.library.custom_op(name, impl, mutates_args=(), schema=schema)
    op.register_fake(fake)
    return op
