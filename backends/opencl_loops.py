"""A Loop IR rewrite for OpenCL: a loop whose body runs a barrier and, after its last one,
an `if` (a group guarded by `e < N`) ends with one more barrier.  A `while` whose condition
runs a barrier (a reduction in the condition) counts that barrier as the body's first.

PoCL 3.1 (the CPU device) miscompiles such loops: its work-item loop formation drops the
private arrays written under the trailing `if`, even those written before the loop (a top-k
of 16 elements on 32 work-items read back zeros).  With the body ending in a barrier, the
parallel regions close before the loop's back edge and the kernel is correct.  The extra
barrier changes nothing else: loops have uniform trip counts, so every work-item reaches it.
"""

from __future__ import annotations

from dataclasses import replace

from kdsl.ir import loop


def _contains(s: loop.Stmt, kind: type) -> bool:
    if isinstance(s, kind):
        return True
    return any(_contains(c, kind) for attr in ("body", "then", "orelse", "cond_body")
               for c in (getattr(s, attr, None) or []))


def _body(stmts: list[loop.Stmt], barrier_before: bool = False) -> list[loop.Stmt]:
    """`barrier_before`: the loop runs a barrier before this body on every iteration (in a
    `while`'s condition); found by the differential fuzzer (docs/fuzzing.md, "Findings")."""
    stmts = close_loop_tails(stmts)
    last = max((i for i, s in enumerate(stmts) if _contains(s, loop.Barrier)),
               default=-1 if barrier_before else None)
    if last is not None and any(_contains(s, loop.If) for s in stmts[last + 1:]):
        stmts = [*stmts, loop.Barrier()]
    return stmts


def close_loop_tails(stmts: list[loop.Stmt]) -> list[loop.Stmt]:
    """`stmts` with every loop body fixed as the module docstring says (a new list; the
    statements that change are copies)."""
    out = []
    for s in stmts:
        if isinstance(s, loop.For):
            s = replace(s, body=_body(s.body))
        elif isinstance(s, loop.While):
            in_cond = any(_contains(c, loop.Barrier) for c in s.cond_body)
            s = replace(s, cond_body=close_loop_tails(s.cond_body),
                        body=_body(s.body, barrier_before=in_cond))
        elif isinstance(s, loop.If):
            s = replace(s, then=close_loop_tails(s.then), orelse=close_loop_tails(s.orelse))
        out.append(s)
    return out


def pocl_safe(kernel: loop.Kernel) -> loop.Kernel:
    """The kernel with its loop tails closed (unchanged without barriers)."""
    if kernel.threads <= 1:
        return kernel
    return replace(kernel, body=close_loop_tails(kernel.body))
