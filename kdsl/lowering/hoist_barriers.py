"""Loop IR pass: no barrier inside a conditional.

The lowering puts barriers only under program-uniform control flow (the condition of a kdsl
`if`, the bounds of a loop), where OpenCL and CUDA allow them.  Some devices still compile
them wrongly: PoCL 3.1's CPU device, for an `if` that holds a reduction's barriers followed by
stores, makes every work-item run the guarded stores regardless of their masks (its
conditional-barrier handling), which writes outside the arrays.  So a kernel is rewritten
until no `Barrier` is nested in an `If`:

    if c: A; barrier; B   else: C            cv = c
                                      ->     if cv: A   else: C
                                             barrier
                                             if cv: B

Every thread then meets every barrier unconditionally (legal because the condition is the
same in all threads of a program), and the guarded work stays guarded.  A loop holding
barriers inside a conditional runs unconditionally with a trip count of zero when the
condition is false (its bounds computed under the condition); a `while` likewise, with the
condition folded into its test.  Only thread-uniform conditionals can hold barriers, so the
ones this pass splits are always uniform.
"""

from __future__ import annotations

from kdsl.ir.loop import (
    Assign,
    Barrier,
    Binary,
    Const,
    For,
    If,
    Kernel,
    Select,
    Stmt,
    Unary,
    Var,
    While,
)
from kdsl.ir.types import int1


def has_barrier(stmts: list[Stmt]) -> bool:
    for s in stmts:
        if isinstance(s, Barrier):
            return True
        if isinstance(s, If) and (has_barrier(s.then) or has_barrier(s.orelse)):
            return True
        if isinstance(s, For) and has_barrier(s.body):
            return True
        if isinstance(s, While) and (has_barrier(s.cond_body) or has_barrier(s.body)):
            return True
    return False


class _Hoister:
    def __init__(self, kernel: Kernel):
        self.k = kernel
        self.taken = {v.name for v in kernel.variables} | {p.name for p in kernel.params}
        self.n = 0

    def var(self, hint: str, dtype) -> Var:
        while f"{hint}{self.n}" in self.taken:
            self.n += 1
        v = Var(f"{hint}{self.n}", dtype)
        self.taken.add(v.name)
        self.k.variables.append(v)
        return v

    def hoist(self, stmts: list[Stmt]) -> list[Stmt]:
        """`stmts` with no barrier left inside an `If`."""
        out: list[Stmt] = []
        for s in stmts:
            if isinstance(s, If) and (has_barrier(s.then) or has_barrier(s.orelse)):
                cv = self.var("hb_c", int1)
                ev = self.var("hb_e", int1)
                out.append(Assign(cv, s.cond))
                out.append(Assign(ev, Unary("not", cv)))
                out += self.guard(cv, s.then, s.orelse, ev)
            elif isinstance(s, For) and has_barrier(s.body):
                out.append(For(s.var, s.lo, s.hi, s.step, self.hoist(s.body)))
            elif isinstance(s, While) and (has_barrier(s.cond_body) or has_barrier(s.body)):
                out.append(While(self.hoist(s.cond_body), s.cond, self.hoist(s.body)))
            else:
                out.append(s)
        return out

    def guard(self, cv: Var, then: list[Stmt], orelse: list[Stmt] = (),
              ev: Var | None = None) -> list[Stmt]:
        """Statements equal to `if cv: then else: orelse` (`ev` is `not cv`) in which every
        barrier is unconditional: both branches are cut at their barriers and the pieces are
        re-guarded between barriers met by all threads."""
        a, b = self._pieces(then), self._pieces(list(orelse))
        out: list[Stmt] = []
        for i in range(max(len(a), len(b))):
            if i:
                out.append(Barrier())
            pa = a[i] if i < len(a) else []
            pb = b[i] if i < len(b) else []
            out += self._guarded(cv, pa)
            if pb:
                out += self._guarded(ev, pb)
        return out

    @staticmethod
    def _pieces(stmts: list[Stmt]) -> list[list[Stmt]]:
        pieces: list[list[Stmt]] = [[]]
        for s in stmts:
            if isinstance(s, Barrier):
                pieces.append([])
            else:
                pieces[-1].append(s)
        return pieces

    def _guarded(self, cv: Var, stmts: list[Stmt]) -> list[Stmt]:
        """`if cv: stmts` for a piece without top-level barriers (nested ones are lifted)."""
        out: list[Stmt] = []
        run: list[Stmt] = []

        def flush() -> None:
            if run:
                out.append(If(cv, list(run)))
                run.clear()

        for s in stmts:
            if not has_barrier([s]):
                run.append(s)
                continue
            flush()
            if isinstance(s, If):
                # the inner condition is read only where the outer one holds
                tv = self.var("hb_c", int1)
                fv = self.var("hb_e", int1)
                out.append(Assign(tv, Const(False, int1)))
                out.append(If(cv, [Assign(tv, s.cond)]))
                out.append(Assign(fv, Binary("land", cv, Unary("not", tv))))
                out += self.guard(tv, s.then, s.orelse, fv)
            elif isinstance(s, For):
                # zero trips where cv is false; the bounds are computed only where it holds
                lo, hi, step = (self.var("hb_lo", s.lo.dtype), self.var("hb_hi", s.hi.dtype),
                                self.var("hb_st", s.step.dtype))
                zero = Const(0, s.lo.dtype)
                out += [Assign(lo, zero), Assign(hi, zero), Assign(step, Const(1, s.step.dtype))]
                out.append(If(cv, [Assign(lo, s.lo), Assign(hi, s.hi), Assign(step, s.step)]))
                out.append(For(s.var, lo, hi, step, self.hoist(s.body)))
            elif isinstance(s, While):
                # the condition body runs once where cv is false, with its work guarded
                # (a select: the test is read only where cv holds, as C's ?: does)
                out.append(While(self._guarded(cv, s.cond_body),
                                 Select(cv, s.cond, Const(False, int1)), self.hoist(s.body)))
            elif isinstance(s, Barrier):
                # a barrier of a guarded region (a reduction in a hoisted while's condition):
                # every thread reaches it, the work around it stays guarded
                out.append(s)
            else:  # pragma: no cover - only the statements above hold barriers
                raise TypeError(f"cannot lift a barrier out of {type(s).__name__}")
        flush()
        return out


def hoist_barriers(kernel: Kernel) -> Kernel:
    """Rewrite `kernel` in place so that no `Barrier` is nested in an `If`; returns it."""
    if has_barrier(kernel.body):
        kernel.body = _Hoister(kernel).hoist(kernel.body)
    return kernel
