"""The lowering's internal interface: what a helper module (reduce.py, scan.py, dot*.py,
gather.py, control.py, debug.py, vector.py) may use of the driver (`lowerer.Lowerer`).

A helper is a function `(L: LoweringContext, op: tile.Op) -> None` that emits the Loop IR of one
op.  `LoweringContext` lists every field and method it may touch, with types; nothing else of
the driver is part of the interface (tests/unit/test_lowering_interface.py checks both that the
helpers stay within it and that `Lowerer` provides it).  docs/ir.md "The lowering's interface"
describes the rules a helper follows: the layout, groups, epochs of shared memory, views.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kdsl.ir import tile
from kdsl.ir.loop import Array, Expr, Stmt, Type, Var
from kdsl.target import Target

if TYPE_CHECKING:
    from .vector import VecGroup, Vectorizer

#: element `coords` of a value -> the coordinates of the same element in its view's base
CoordMap = Callable[[list[Expr]], list[Expr]]


@dataclass
class Group:
    """The open element loop: numel `n`, slots `s`, slot variable `k`, flat index `e`.

    A helper appends the statements computing one element to `body` (they run for every slot
    `k` of every thread, with `e` the element's flat index), adds the id of its op to `ops`
    and makes its result the group's value with `LoweringContext.bind`."""

    n: int
    s: int
    k: Var
    e: Expr
    body: list[Stmt] = field(default_factory=list)
    ops: set[int] = field(default_factory=set)  # id() of member ops
    values: list[tile.Value] = field(default_factory=list)
    effects: bool = False
    # Register arrays read at other slots than k (gathers, reductions and dot operands of a
    # target whose registers are addressable): a yield may not write them in place.
    addressed: set[str] = field(default_factory=set)
    width: int = 1  # V of the layout for this numel (vector.py)
    vec: VecGroup | None = None  # vector accesses of the group, if any
    # Nested loops (a target with `tile_loops`, several dims): the dims and their variables.
    dims: tuple[int, ...] = ()
    loops: tuple[Var, ...] = ()
    # Step of the innermost element loop (a prefetch group visits one element per cache line)
    step: int = 1


class LoweringContext(Protocol):
    """The driver as its helpers see it.  Values are Tile IR values; their Loop IR forms are
    scalar expressions (`scalars`), register arrays of `slots(numel)` elements (`regs`), or
    expressions inside the open group (`read`)."""

    # ---------------------------------------------------------------- where it runs
    target: Target
    #: the function being lowered (`fn.options`: the compile's options)
    fn: tile.Function
    #: threads per program instance (`target.threads`), for layout arithmetic only
    T: int
    #: this thread's index in its program (the constant 0 with one thread per program)
    tid: Expr
    #: the op being lowered (its location names errors; a custom reduce's combine region)
    op: tile.Op | None

    # ---------------------------------------------------------------- what is known
    #: canonical value id -> the ops that use it (alias ops excluded)
    users: dict[int, list[tile.Op]]
    #: scalar value id -> its expression (a Var, Const or Special)
    scalars: dict[int, Expr]
    #: tile value id -> its register array (S slots per thread, slot k = element tid + k*T)
    regs: dict[int, Array]
    #: the open element loop, or None
    group: Group | None
    #: id(dot op) -> its accumulator kept in mma fragments across the enclosing loop
    #: (dot_mma.py: set by `enter_resident`, used by the dot, cleared by `leave_resident`)
    resident: dict[int, Any]
    #: vector layout and accesses (vector.py)
    vector: Vectorizer

    # ---------------------------------------------------------------- declarations
    def var(self, hint: str, dtype: Type) -> Var:
        """A fresh variable (declared at function scope)."""

    def array(self, hint: str, dtype: Type, size: int, space: str = "reg") -> Array:
        """A fresh array; a shared one counts against `target.shared_bytes`."""

    def shared(self, hint: str, dtype: Type, size: int) -> Array:
        """A shared array for the current epoch (reusing a dead one of the same type)."""

    def shared_left(self) -> int:
        """Bytes of shared memory not yet declared."""

    def slots(self, n: int) -> int:
        """Register slots per thread of a tile of n elements."""

    # ---------------------------------------------------------------- emission
    def emit(self, *stmts: Stmt) -> None:
        """Append statements after the open group's loop (close it first to order them)."""

    def barrier(self) -> None:
        """A barrier where the target needs one (never two in a row)."""

    def once(self, stmt: Stmt) -> Stmt:
        """`stmt` guarded to run once per program (by thread 0)."""

    def open_group(self, n: int, shape: tuple[int, ...] | None = None) -> Group:
        """The open group of numel n (closing another first)."""

    def close(self) -> None:
        """Emit the open group's loop, storing the values needed outside it."""

    def bind(self, v: tile.Value, expr: Expr, g: Group) -> None:
        """Make `expr` the value of tile `v` in group `g`."""

    def result_var(self, v: tile.Value, expr: Expr) -> None:
        """Make `expr` the value of scalar `v` (a variable unless trivially cheap)."""

    # ---------------------------------------------------------------- reading values
    def canon(self, v: tile.Value) -> tile.Value:
        """The value `v` aliases (reshape, hint), or `v`."""

    def scalar(self, v: tile.Value) -> Expr:
        """The expression of scalar `v`."""

    def read(self, v: tile.Value) -> Expr:
        """Tile `v` at the open group's current element."""

    def eval_at(self, v: tile.Value, idx: Expr) -> Expr:
        """A rematerialisable tile at flat index `idx` (recomputed from its operands)."""

    def remat_ok(self, v: tile.Value) -> bool:
        """Whether `v` is cheap index math recomputed wherever it is read (never stored)."""

    def in_group(self, v: tile.Value) -> bool:
        """Whether `v` is computed in the open group (readable there without storage)."""

    def view(self, v: tile.Value) -> tuple[tile.Value, CoordMap]:
        """(base, coordinate map) looking through aliases and gathers of stored values."""

    def at(self, v: tile.Value, coords: list[Expr]) -> tuple[tile.Value, Expr]:
        """(base, flat index in base) of element `coords` of `v`."""

    def addressable(self, *values: tile.Value) -> list[Array]:
        """Arrays holding each value by flat element index (shared copies when registers are
        not addressable, staged together between one pair of barriers)."""

    def stage(self, values: list[tile.Value], positions: list[Callable[[Expr], Expr]],
              dtypes: list[Type], sizes: list[int], reader: tile.Op | None = None,
              rows: list[int] | None = None) -> list[Array]:
        """Shared copies of tiles in layouts of their own (element e of values[i] at
        positions[i](e)), written in a new epoch between one pair of barriers (by the open
        group itself where it computes them all; `reader` then joins the group, and 16-byte
        vector loads whose positions run on for rows[i] elements become async copies)."""

    def note_addressed(self, arrays: list[Array]) -> None:
        """Record that the open group reads `arrays` at other slots than its own."""

    def note_staged(self, v: tile.Value, array: Array) -> None:
        """Record that shared `array` holds `v` by flat index in the current epoch."""

    # ---------------------------------------------------------------- control flow
    def storage(self, v: tile.Value, hint: str) -> Var | Array:
        """Fresh mutable storage for values of v's type."""

    def bind_storage(self, v: tile.Value, st: Var | Array) -> None:
        """Make `st` the storage of `v`."""

    def copy(self, dsts: list[Var | Array], srcs: list[tile.Value]) -> None:
        """dst_i = src_i for all i at once (swaps work)."""

    def yield_to(self, dsts: list[Var | Array], srcs: list[tile.Value]) -> None:
        """Copy yielded values to their destinations (in place where unobservable)."""

    def lower_region(self, block: tile.Block, args: list[Var | Array],
                     finish: Callable[[tile.Op | None], None] | None = None,
                     loop: bool = False, block_args: list[tile.Value] | None = None
                     ) -> tuple[list[Stmt], tile.Op | None]:
        """Lower a region with its block arguments (or `block_args`) bound to `args`; returns
        its statements and its terminator; `finish(terminator)` runs before its last group
        closes."""


#: A helper: the lowering of one op kind.
Lowering = Callable[[LoweringContext, tile.Op], None]

__all__ = ["CoordMap", "Group", "Lowering", "LoweringContext"]
