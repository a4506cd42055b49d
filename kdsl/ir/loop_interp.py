"""A Python simulator of the Loop IR, for tests of the lowering.

`run_kernel(kernel, grid, args)` executes every program instance of `grid` in turn.  The
`kernel.threads` threads of a program run as Python generators that yield at each `Barrier`; they
advance in lock-step from barrier to barrier (a thread that finishes while another waits at a
barrier is an error: barriers must be reached uniformly).  An `Intrinsic` runs through
the kernel's `intrinsics` (recorded by the lowering that emits it); a warp intrinsic is a rendezvous of the
32 lanes of a warp, which must all reach the same statement.  Register arrays and variables are
per thread, shared arrays per program; array arguments are NumPy arrays updated in place.

Values are NumPy scalars of their Loop IR type (so integers wrap); a pointer is a tuple
(argument index, byte offset), or (RAW, address) when made from an integer (process memory,
`rawmem.py`).  The semantics are those stated in kdsl/ir/loop.py: Round to
float16 via `np.float16`, to bfloat16 by rounding the float32 bits (nearest even); C integer
division and remainder with x / 0 == x % 0 == 0; a masked `Load` reads no memory where its mask
is false.  Every memory access is bounds-checked (IndexError), which makes the simulator a
checker of the lowering's masking too.  It is slow: keep tiles small.

Shared-memory races (`races=True`, the default): within one barrier interval (from a barrier
release to the next, or the end of the program), an access of a shared array element that
conflicts with another thread's access of it (at least one of them a write) raises
`SharedMemoryRace`, naming both threads, the array, the index and the interval.  The threads
run one after the other from barrier to barrier, so without this check a missing barrier
between a write and another thread's read goes unseen when the writer happens to run first;
the check sees every interleaving of one interval.  Warp intrinsics take register operands and
are not shared accesses (the rendezvous of their lanes is no barrier: it ends no interval).
An `AsyncCopy` writes its destination at some moment between its issue and the `AsyncWait`
that lands it: the check counts it as a write in every interval of that span (a copy into a
ring slot another thread still reads is a race even when the wait comes later).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator
from itertools import product
from typing import Any

import numpy as np

from . import atomics
from . import loop as L
from . import mathops, rawmem
from .loop_verify import verify
from .types import DType, PointerType, bfloat16, float16, uint8

RAW = -1  # argument index of a pointer made from an integer: its offset is an address


_NP_TYPES: dict[str, type] = {}  # dtype name -> NumPy scalar type of its register values


def _np(t: DType) -> type:
    nt = _NP_TYPES.get(t.name)
    if nt is None:
        nt = _NP_TYPES[t.name] = (np.float32 if t in (float16, bfloat16) or t.is_fp8
                                  else t.np.type)
    return nt


def _mem_np(t: DType) -> np.dtype:
    """NumPy dtype of a `t` in memory (bfloat16: uint16 bits, 8-bit floats: their codes)."""
    return np.dtype(t.np)


def _typed(v: Any, t) -> Any:
    if isinstance(t, PointerType):
        return v
    nt = _np(t)
    if type(v) is nt:  # already a value of the type (most results of typed operands)
        return v
    with np.errstate(all="ignore"):
        return np.array(v).astype(nt)[()]


def round_bf16(x: float) -> np.float32:
    """Nearest-even rounding of a float32 to bfloat16, returned as float32."""
    u = int(np.array(x, dtype=np.float32).view(np.uint32))
    if (u & 0x7FFFFFFF) > 0x7F800000:  # NaN: keep it quiet
        u = (u | 0x400000) & 0xFFFF0000
    else:
        u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000) & 0xFFFFFFFF
    return np.array(u, dtype=np.uint32).view(np.float32)[()]


def _tile_dot(s: L.TileDot, out: np.ndarray, a: np.ndarray, b: np.ndarray, o_at: int,
              a_at: int, b_at: int) -> None:
    """Loop IR `TileDot` (its meaning in kdsl/ir/loop.py): the float sum exact, rounded once
    (the unit's own order is unspecified; tests compare with tolerances), integers exact."""
    _, g, _ = L.TILE_DOT_KINDS[s.kind]

    def block(arr, at, stride, nrows, width, name):
        idx = at + np.arange(nrows)[:, None] * stride + np.arange(width)[None, :]
        if idx.min() < 0 or idx.max() >= arr.size:
            raise IndexError(f"tile dot reads {name}[{at}::{stride}] out of bounds "
                             f"(size {arr.size})")
        return idx

    def parts(x: np.ndarray) -> np.ndarray:  # uint32 words -> their g parts, lowest first
        x = np.ascontiguousarray(x, dtype=np.uint32)
        return x.view(np.uint16 if g == 2 else np.int8).reshape(*x.shape[:-1], -1)

    words_a, words_b = s.a.dtype.name == "uint32", s.b.dtype.name == "uint32"
    ai = block(a, a_at, s.a_stride, s.rows, s.depth // g if words_a else s.depth, s.a.name)
    bi = block(b, b_at, s.b_stride, s.depth // g, s.cols if words_b else s.cols * g, s.b.name)
    oi = block(out, o_at, s.out_stride, s.rows, s.cols, s.out.name)
    B = parts(b[bi]) if words_b else b[bi]  # depth/g x (cols * g), g values of k per column
    B = B.reshape(s.depth // g, s.cols, g).transpose(0, 2, 1).reshape(s.depth, s.cols)
    A = parts(a[ai]) if words_a else a[ai]
    if g == 2:  # bfloat16 bit patterns
        A, B = ((x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
                for x in (A, B))
        acc = np.zeros(oi.shape) if s.zero else out[oi].astype(np.float64)
        out[oi] = (acc + A @ B).astype(np.float32)
    else:
        acc = np.zeros(oi.shape, np.int64) if s.zero else out[oi].astype(np.int64)
        total = acc + A.astype(np.int64) @ B.astype(np.int64)
        out[oi] = (total & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def _idiv(a, b, t):
    if b == 0:
        return _typed(0, t)
    q = abs(int(a)) // abs(int(b))
    return _typed(q if (a < 0) == (b < 0) else -q, t)


def _imod(a, b, t):
    if b == 0:
        return _typed(0, t)
    return _typed(int(a) - int(_idiv(a, b, t)) * int(b), t)


def _pow(a, b, t):
    if t.is_float:
        return np.power(a, b)
    b = int(b)
    if b < 0:
        return _typed(1 if a == 1 else (((-1) ** (-b)) if a == -1 else 0), t)
    return _typed(pow(int(a), b, 1 << 64), t)


def _shift(f):
    def g(a, b, t):
        return f(a, _typed(b, t))
    return g


_BINARY: dict[str, Callable] = {
    "add": lambda a, b, t: a + b,
    "sub": lambda a, b, t: a - b,
    "mul": lambda a, b, t: a * b,
    "div": lambda a, b, t: a / b if t.is_float else _idiv(a, b, t),
    "mod": lambda a, b, t: np.fmod(a, b) if t.is_float else _imod(a, b, t),
    "pow": _pow,
    "and": lambda a, b, t: np.bitwise_and(a, b),
    "or": lambda a, b, t: np.bitwise_or(a, b),
    "xor": lambda a, b, t: np.bitwise_xor(a, b),
    "shl": _shift(np.left_shift),
    "shr": _shift(np.right_shift),
    "maximum": lambda a, b, t: np.maximum(a, b),
    "minimum": lambda a, b, t: np.minimum(a, b),
    "eq": lambda a, b, t: a == b,
    "ne": lambda a, b, t: a != b,
    "lt": lambda a, b, t: a < b,
    "le": lambda a, b, t: a <= b,
    "gt": lambda a, b, t: a > b,
    "ge": lambda a, b, t: a >= b,
    "land": lambda a, b, t: bool(a) and bool(b),
    "lor": lambda a, b, t: bool(a) or bool(b),
    **{k: mathops.scalar(mathops.ignore_type(f)) for k, f in mathops.BINARY.items()},
}

_UNARY: dict[str, Callable] = {
    "neg": np.negative,
    "not": lambda x: not x if isinstance(x, (bool, np.bool_)) else np.invert(x),
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "abs": np.abs, "sin": np.sin, "cos": np.cos,
    "tanh": np.tanh, "erf": lambda x: math.erf(x),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "floor": np.floor, "ceil": np.ceil,
    "isnan": np.isnan,
    **{k: mathops.scalar(f) for k, f in mathops.UNARY.items()},
}


def _cast(x, src, dst, prog=None):
    if isinstance(src, PointerType) and isinstance(dst, PointerType):
        return x
    if isinstance(dst, PointerType):  # an address
        return (RAW, int(np.array(x).astype(np.int64)))
    if isinstance(src, PointerType):
        buf, off = x
        addr = off if buf == RAW else prog.buffers[buf].__array_interface__["data"][0] + off
        return _typed(np.array(addr, dtype=np.int64).astype(_np(dst)), dst)
    if dst.is_bool:
        return np.bool_(x != 0)
    if dst.is_int and not src.is_bool and src.is_float:
        if not np.isfinite(x):
            return _typed(0, dst)
        return _typed(int(x), dst)  # truncation toward zero, wrapping
    if dst.is_int:
        return _typed(int(x), dst)
    return _typed(x, dst)


def _py_number(x: Any) -> int | float:
    return float(x) if isinstance(x, np.floating) else int(x)


class SharedMemoryRace(RuntimeError):
    """Two threads of a program access one shared array element in the same barrier interval
    and at least one of them writes it (a barrier is missing, or the layout is wrong)."""


class _SharedAccesses:
    """The accesses of each shared array element in the current barrier interval: element ->
    (writer thread or None, reader threads).  Same-thread accesses never conflict."""

    __slots__ = ("elements", "interval", "pid")

    def __init__(self, pid):
        self.pid = pid
        self.interval = 0
        self.elements: dict[tuple[str, int], tuple[int | None, set[int]]] = {}

    def next_interval(self) -> None:
        self.elements.clear()
        self.interval += 1

    def _race(self, array: str, idx: int, tid: int, what: str, other: int, theirs: str
              ) -> SharedMemoryRace:
        after = f"after barrier {self.interval}" if self.interval else "before the first barrier"
        return SharedMemoryRace(
            f"program {self.pid}: shared-memory race on {array}[{idx}] {after}: thread {tid} "
            f"{what} it and thread {other} {theirs} it with no barrier between")

    def write(self, array: str, idx: int, tid: int) -> None:
        writer, readers = self.elements.get((array, idx), (None, set()))
        if writer is not None and writer != tid:
            raise self._race(array, idx, tid, "writes", writer, "writes")
        other = next((r for r in sorted(readers) if r != tid), None)
        if other is not None:
            raise self._race(array, idx, tid, "writes", other, "reads")
        self.elements[(array, idx)] = (tid, readers)

    def read(self, array: str, idx: int, tid: int) -> None:
        writer, readers = self.elements.get((array, idx), (None, set()))
        if writer is not None and writer != tid:
            raise self._race(array, idx, tid, "reads", writer, "writes")
        readers.add(tid)
        self.elements[(array, idx)] = (writer, readers)


class _Thread:
    __slots__ = ("groups", "pending", "regs", "tid", "vars")

    def __init__(self, tid: int):
        self.tid = tid
        self.vars: dict[str, Any] = {}
        self.regs: dict[str, np.ndarray] = {}
        # `AsyncCopy`s issued and not yet waited for: (array, first index, values), those not
        # yet committed in `pending`, each committed group (oldest first) in `groups`
        self.pending: list[tuple[L.Array, int, list]] = []
        self.groups: list[list[tuple[L.Array, int, list]]] = []

    def in_flight(self) -> Iterator[tuple[L.Array, int, list]]:
        for g in self.groups:
            yield from g
        yield from self.pending


class _Program:
    """One program instance: its id, the launch's buffers, shared arrays, the kernel."""

    def __init__(self, kernel: L.Kernel, pid, grid, buffers, params, races: bool = True):
        self.kernel = kernel
        # with one thread nothing can race (and the CPU lowering uses no barrier)
        self.races = _SharedAccesses(pid) if races and kernel.threads > 1 else None
        self.threads: list[_Thread] = []
        self.pid = pid
        self.grid = grid
        self.buffers = buffers
        self.params = params
        self.shared = {a.name: _new_array(a) for a in kernel.arrays if a.space == "shared"}
        self.consts: dict[int, Any] = {}  # id of a Const -> its value
        self.types: dict[int, tuple] = {}  # id of a Binary -> (operand type, result type)

    # ---------------------------------------------------------------------- expressions

    def ev(self, e: L.Expr, th: _Thread) -> Any:
        return _EVAL[type(e)](self, e, th)

    def array(self, a: L.Array, th: _Thread) -> np.ndarray:
        return self.shared[a.name] if a.space == "shared" else th.regs[a.name]

    def mem(self, ptr, pointee: DType) -> tuple[np.ndarray, int]:
        """(array viewed as the pointee's storage, element index) of an access."""
        buf, off = ptr
        dt = _mem_np(pointee)
        arr = self.buffers[buf]
        if arr.dtype != dt:
            raw = arr.view(np.uint8)
            arr = raw[: raw.size - raw.size % dt.itemsize].view(dt)
        idx, rem = divmod(off, dt.itemsize)
        if rem or not 0 <= idx < arr.size:
            raise IndexError(f"access at byte offset {off} of argument {buf} (size {arr.size} "
                             f"x {dt.itemsize} bytes)")
        return arr, idx

    def load(self, ptr, pointee: DType):
        if ptr[0] == RAW:
            v = rawmem.read(np.array([ptr[1]]), _mem_np(pointee))[0]
        else:
            arr, idx = self.mem(ptr, pointee)
            v = arr[idx]
        if pointee == bfloat16:
            return np.array(int(v) << 16, dtype=np.uint32).view(np.float32)[()]
        return _typed(v, uint8 if pointee.is_fp8 else pointee)

    def store(self, ptr, pointee: DType, v) -> None:
        if pointee == bfloat16:
            v = int(np.array(round_bf16(v), dtype=np.float32).view(np.uint32)) >> 16
        if ptr[0] == RAW:
            rawmem.write(np.array([ptr[1]]), np.array([v]), _mem_np(pointee))
            return
        arr, idx = self.mem(ptr, pointee)
        arr[idx] = v

    @staticmethod
    def aligned(ptr, n: int, pointee: DType):
        """A vector access of n elements must be aligned to its size, or to 16 bytes when it
        is wider (backends emit it as 16-byte pieces); buffers themselves are taken as
        aligned, as device allocations are."""
        if ptr[1] % min(n * _mem_np(pointee).itemsize, 16):
            raise ValueError(f"vector access of {n} elements at byte offset {ptr[1]} of "
                             f"argument {ptr[0]} is not aligned")
        return ptr

    # ----------------------------------------------------------------------- statements

    def run(self, stmts: list[L.Stmt], th: _Thread) -> Iterator[None]:
        for s in stmts:
            match s:
                case L.Assign(var=v, value=x):
                    th.vars[v.name] = _typed(self.ev(x, th), v.dtype)
                case L.ArrayStore(array=a, index=i, value=x):
                    arr, idx = self.array(a, th), int(self.ev(i, th))
                    if not 0 <= idx < a.size:
                        raise IndexError(f"{a.name}[{idx}] out of bounds (size {a.size})")
                    value = self.ev(x, th)  # evaluated first: it may read the same element
                    if self.races is not None and a.space == "shared":
                        self.races.write(a.name, idx, th.tid)
                    if a.dtype in (float16, bfloat16):  # a 16-bit shared array converts
                        value = _to_half(value, a.dtype)
                    arr[idx] = value
                case L.Store(ptr=p, value=x, mask=m):
                    if m is None or self.ev(m, th):
                        self.store(self.ev(p, th), p.dtype.pointee, self.ev(x, th))
                case L.AtomicRMW() | L.AtomicCAS():
                    if s.mask is None or self.ev(s.mask, th):
                        ptr, pointee = self.ev(s.ptr, th), s.ptr.dtype.pointee
                        old = self.load(ptr, pointee)
                        val = np.asarray(self.ev(s.value, th))
                        if isinstance(s, L.AtomicCAS):
                            new = atomics.cas(pointee, old, np.asarray(self.ev(s.cmp, th)), val)
                        else:
                            new = atomics.rmw(s.op, pointee, np.asarray(old), val)
                        self.store(ptr, pointee, _typed(new, pointee))
                        if s.result is not None:
                            th.vars[s.result.name] = old
                case L.Print(fmt=f, args=a):
                    print(f.format(*(_py_number(self.ev(x, th)) for x in a)))
                case L.For(var=v, lo=lo, hi=hi, step=st, body=b):
                    i, end, step = (int(self.ev(x, th)) for x in (lo, hi, st))
                    while (i < end) if step > 0 else (i > end):
                        th.vars[v.name] = _typed(i, v.dtype)
                        yield from self.run(b, th)
                        i += step
                case L.While(cond_body=cb, cond=c, body=b):
                    while True:
                        yield from self.run(cb, th)
                        if not self.ev(c, th):
                            break
                        yield from self.run(b, th)
                case L.If(cond=c, then=t, orelse=o):
                    yield from self.run(t if self.ev(c, th) else o, th)
                case L.Barrier():
                    yield
                case L.Comment():
                    pass
                case L.VecLoad(ptr=p, dst=a, mask=m):
                    if m is None or self.ev(m, th):
                        pointee = p.dtype.pointee
                        ptr = self.aligned(self.ev(p, th), a.size, pointee)
                        arr = self.array(a, th)
                        step = _mem_np(pointee).itemsize
                        for j in range(a.size):
                            arr[j] = self.load((ptr[0], ptr[1] + j * step), pointee)
                case L.VecStore(ptr=p, src=a, mask=m):
                    if m is None or self.ev(m, th):
                        pointee = p.dtype.pointee
                        ptr = self.aligned(self.ev(p, th), a.size, pointee)
                        arr = self.array(a, th)
                        step = _mem_np(pointee).itemsize
                        for j in range(a.size):
                            self.store((ptr[0], ptr[1] + j * step), pointee,
                                       _typed(arr[j], a.dtype))
                case L.AsyncCopy(dst=a, index=i, ptr=p, n=n, mask=m):
                    idx = int(self.ev(i, th))
                    if not 0 <= idx <= a.size - n:
                        raise IndexError(f"async copy into {a.name}[{idx}:{idx + n}] out of "
                                         f"bounds (size {a.size})")
                    if m is None or self.ev(m, th):
                        pointee = p.dtype.pointee
                        ptr = self.aligned(self.ev(p, th), n, pointee)
                        step = _mem_np(pointee).itemsize
                        vals = [self.load((ptr[0], ptr[1] + j * step), pointee)
                                for j in range(n)]
                    else:
                        vals = [0] * n
                    th.pending.append((a, idx, vals))  # lands at an AsyncWait
                    self.copy_in_flight(a, idx, n, th)
                case L.Prefetch():
                    pass  # a hint: no value, no memory access
                case L.Transpose(dst=d, src=a, n=n):
                    src, dst = self.array(a, th), self.array(d, th)
                    s_at, d_at = int(self.ev(s.src_at, th)), int(self.ev(s.dst_at, th))
                    rows = [s_at + i * s.src_stride for i in range(n)]
                    cols = [d_at + j * s.dst_stride for j in range(n)]
                    if min(rows[0], cols[0]) < 0 or rows[-1] + n > a.size \
                            or cols[-1] + n > d.size:
                        raise IndexError(f"transpose {a.name}[{s_at}::{s.src_stride}] -> "
                                         f"{d.name}[{d_at}::{s.dst_stride}] out of bounds")
                    block = np.array([src[r:r + n] for r in rows])
                    for j, c in enumerate(cols):
                        dst[c:c + n] = block[:, j]
                case L.TileDot():
                    _tile_dot(s, *(self.array(x, th) for x in (s.out, s.a, s.b)),
                              *(int(self.ev(x, th)) for x in (s.out_at, s.a_at, s.b_at)))
                case L.AsyncCommit():
                    th.groups.append(th.pending)
                    th.pending = []
                case L.AsyncWait(pending=keep):
                    if keep:  # the `keep` newest groups stay in flight, uncommitted copies too
                        n_land = max(0, len(th.groups) - keep)
                        land, th.groups = th.groups[:n_land], th.groups[n_land:]
                    else:
                        land = th.groups + [th.pending]
                        th.groups, th.pending = [], []
                    for a, idx, vals in (c for g in land for c in g):
                        arr = self.array(a, th)
                        for j, v in enumerate(vals):
                            if self.races is not None:
                                self.races.write(a.name, idx + j, th.tid)
                            arr[idx + j] = v
                case L.Intrinsic(name=n, args=a, results=r):
                    sim = self.intrinsic(n)
                    vals = [self.ev(x, th) for x in a]
                    # A warp intrinsic waits for its warp's other lanes (see `execute`).
                    outs = (yield (s, vals)) if sim.warp else sim.fn(vals)
                    for v, x in zip(r, outs):
                        th.vars[v.name] = _typed(x, v.dtype)
                case _:
                    raise TypeError(f"unknown statement {s!r}")

    def copy_in_flight(self, a: L.Array, idx: int, n: int, th: _Thread) -> None:
        """Count an issued `AsyncCopy` as a write of the current interval (see the module
        docstring)."""
        if self.races is not None:
            for j in range(n):
                self.races.write(a.name, idx + j, th.tid)

    def intrinsic(self, name: str) -> L.IntrinsicSim:
        sim = self.kernel.intrinsics.get(name)
        if sim is None:
            raise RuntimeError(f"intrinsic {name}: the kernel records no simulation of it "
                               "(`Kernel.intrinsics`)")
        return sim

    def execute(self) -> None:
        """Run the threads from one synchronisation point to the next: a `Barrier` releases
        when every thread waits at one, a warp intrinsic when every lane of its warp waits at
        that same statement (their arguments in, each lane's results out)."""
        k = self.kernel
        threads = []
        self.threads = []
        for t in range(k.threads):
            th = _Thread(t)
            th.vars.update(self.params)
            th.regs = {a.name: _new_array(a) for a in k.arrays if a.space == "reg"}
            self.threads.append(th)
            threads.append(self.run(k.body, th))
        n = len(threads)
        width = min(n, k.warp_size)
        state: list[Any] = ["run"] * n   # "run" | "done" | None (barrier) | (stmt, args)
        reply: list[Any] = [None] * n
        barriers = 0
        while True:
            for i, g in enumerate(threads):
                if state[i] == "run":
                    try:
                        state[i] = g.send(reply[i])
                    except StopIteration:
                        state[i] = "done"
                    reply[i] = None
            progressed = False
            for w in range(0, n, width):
                lanes = state[w:w + width]
                if all(isinstance(x, tuple) and x[0] is lanes[0][0] for x in lanes):
                    stmt = lanes[0][0]
                    outs = self.intrinsic(stmt.name).fn([x[1] for x in lanes])
                    for i, out in enumerate(outs, w):
                        state[i], reply[i] = "run", out
                    progressed = True
            if progressed:
                continue
            if all(x == "done" for x in state):
                return
            if all(x is None for x in state):
                state = ["run"] * n
                barriers += 1
                if self.races is not None:
                    self.races.next_interval()
                    for th in self.threads:  # copies in flight may land in this interval
                        for a, idx, vals in th.in_flight():
                            self.copy_in_flight(a, idx, len(vals), th)
                continue
            if any(x == "done" for x in state) and not any(isinstance(x, tuple) for x in state):
                raise RuntimeError(f"barrier {barriers} not reached by every thread of "
                                   f"program {self.pid}")
            raise RuntimeError(f"program {self.pid}: a warp intrinsic is not reached by every "
                               f"lane of its warp (after barrier {barriers})")


IntrinsicSim = L.IntrinsicSim  # (defined with the IR: the lowering records one per name)


def _new_array(a: L.Array) -> np.ndarray:
    if isinstance(a.dtype, PointerType):
        return np.empty(a.size, dtype=object)
    return np.zeros(a.size, dtype=_np(a.dtype))


# (floating-point errors are ignored for the whole run: `run_kernel`'s errstate)
def _ev_binary(p, e, th):
    a, b = p.ev(e.a, th), p.ev(e.b, th)
    ts = p.types.get(id(e))
    if ts is None:  # (a Binary's type is its first operand's: found once, not per element)
        ts = p.types[id(e)] = (e.a.dtype, e.dtype)
    return _typed(_BINARY[e.op](a, b, ts[0]), ts[1])


def _ev_unary(p, e, th):
    return _typed(_UNARY[e.op](p.ev(e.x, th)), e.dtype)


def _ev_fma(p, e, th):
    a, b, c = (p.ev(x, th) for x in (e.a, e.b, e.c))
    if e.dtype.name == "float32":
        return fma_f32(a, b, c)
    if e.dtype.is_float:
        return _typed(mathops.fma(a, b, c)[()], e.dtype)
    return _typed(a * b + c, e.dtype)


_PACK_D, _PACK_Q = struct.Struct("<d"), struct.Struct("<Q")


def fma_f32(a, b, c) -> np.float32:
    """`mathops.fma` of three float32 scalars, in Python floats (the simulator's hot path; the
    same steps: an exact float64 product, TwoSum, and rounding to odd when inexact)."""
    p = float(a) * float(b)
    c64 = float(c)
    s = p + c64
    if not math.isfinite(s):
        return np.float32(s)
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)
    if err == 0:
        return np.float32(s)
    t = math.nextafter(s, 0.0) if (err < 0) != (s < 0) else s
    return np.float32(_PACK_D.unpack(_PACK_Q.pack(_PACK_Q.unpack(_PACK_D.pack(t))[0] | 1))[0])


def _ev_const(p, e, th):
    v = p.consts.get(id(e))
    if v is None:
        v = p.consts[id(e)] = _typed(e.value, e.dtype)
    return v


def _ev_round(p, e, th):
    x = np.float32(p.ev(e.x, th))
    return np.float32(np.float16(x)) if e.fmt == "float16" else round_bf16(x)


def _ev_load(p, e, th):
    if e.mask is not None and not p.ev(e.mask, th):
        return p.ev(e.other, th) if e.other is not None else _typed(0, e.dtype)
    return p.load(p.ev(e.ptr, th), e.ptr.dtype.pointee)


def _ev_index(p, e, th):
    i = int(p.ev(e.index, th))
    if not 0 <= i < e.array.size:
        raise IndexError(f"{e.array.name}[{i}] out of bounds (size {e.array.size})")
    if p.races is not None and e.array.space == "shared":
        p.races.read(e.array.name, i, th.tid)
    return p.array(e.array, th)[i]


def _to_half(x, t: DType) -> np.float32:
    """A float32 stored into a 16-bit array: rounded to nearest even, kept as float32."""
    if t == float16:
        with np.errstate(all="ignore"):
            return np.float32(np.float16(x))
    return round_bf16(x)


def _half_bits(x, t: DType) -> int:
    if t == float16:
        return int(np.array(np.float16(x)).view(np.uint16))
    return int(np.array(x, dtype=np.float32).view(np.uint32)) >> 16


def _ev_pair_bits(p, e, th):
    i = int(p.ev(e.index, th))
    a = e.array
    if i % 2 or not 0 <= i < a.size - 1:
        raise IndexError(f"pair_bits({a.name}[{i}]): not an even index of a pair (size {a.size})")
    arr = p.array(a, th)
    if a.space == "reg":  # a uint16 array of bit patterns (one thread's: no race)
        return np.uint32(int(arr[i]) | int(arr[i + 1]) << 16)
    if p.races is not None:
        p.races.read(a.name, i, th.tid)
        p.races.read(a.name, i + 1, th.tid)
    return np.uint32(_half_bits(arr[i], a.dtype) | _half_bits(arr[i + 1], a.dtype) << 16)


def _ev_shared_row(p, e, th):
    """The eight 16-bit codes of the row a lane gives a matrix load (`SharedRow`)."""
    i = int(p.ev(e.index, th))
    a = e.array
    if i % 8 or not 0 <= i <= a.size - 8:
        raise IndexError(f"row({a.name}[{i}]): not a 16-byte aligned row of 8 elements "
                         f"(size {a.size})")
    if p.races is not None:
        for j in range(8):
            p.races.read(a.name, i + j, th.tid)
    arr = p.array(a, th)
    return tuple(_half_bits(arr[i + j], a.dtype) for j in range(8))


def _ev_special(p, e, th):
    if e.kind == "tid":
        return np.int32(th.tid)
    return np.int32((p.pid if e.kind == "pid" else p.grid)[e.axis])


def _ev_ptradd(p, e, th):
    buf, off = p.ev(e.ptr, th)
    return (buf, off + int(p.ev(e.offset, th)) * _mem_np(e.ptr.dtype.pointee).itemsize)


def _ev_ptrdiff(p, e, th):
    (_, off), (_, base) = p.ev(e.ptr, th), p.ev(e.base, th)
    return np.int64((off - base) // _mem_np(e.ptr.dtype.pointee).itemsize)


def _ev_bitcast(p, e, th):
    x = p.ev(e.x, th)
    if isinstance(e.dtype, PointerType):
        return x  # the same address
    return np.array(x, dtype=_np(e.x.dtype)).view(_np(e.dtype))[()]


_EVAL: dict[type, Callable] = {
    L.Const: _ev_const,
    L.Var: lambda p, e, th: th.vars[e.name],
    L.Special: _ev_special,
    L.Index: _ev_index,
    L.Unary: _ev_unary,
    L.Binary: _ev_binary,
    L.Select: lambda p, e, th: p.ev(e.a, th) if p.ev(e.cond, th) else p.ev(e.b, th),
    L.Cast: lambda p, e, th: _cast(p.ev(e.x, th), e.x.dtype, e.dtype, p),
    L.Bitcast: _ev_bitcast,
    L.Round: _ev_round,
    L.Fma: _ev_fma,
    L.PtrAdd: _ev_ptradd,
    L.PtrDiff: _ev_ptrdiff,
    L.Load: _ev_load,
    L.PairBits: _ev_pair_bits,
    L.SharedRow: _ev_shared_row,
}


def run_kernel(kernel: L.Kernel, grid: tuple[int, ...], args: list, races: bool = True) -> None:
    """Run `kernel` on `grid` (1 to 3 ints); array arguments are updated in place.  With
    `races`, a shared-memory race between threads of a program raises `SharedMemoryRace`."""
    verify(kernel)  # a malformed kernel is an error naming its node, not a wrong result
    grid = tuple(grid) + (1,) * (3 - len(grid))
    buffers: list[np.ndarray] = []
    params: dict[str, Any] = {}
    for i, (p, a) in enumerate(zip(kernel.params, args)):
        if isinstance(p.dtype, PointerType):
            arr = np.asarray(a)
            if not arr.flags.c_contiguous:
                raise ValueError(f"argument {p.name} must be C-contiguous")
            buffers.append(arr.reshape(-1))
            params[p.name] = (len(buffers) - 1, 0)
        else:
            params[p.name] = _typed(a, p.dtype)
    with np.errstate(all="ignore"):  # IEEE results (inf, NaN), as every backend gives
        for pid in product(*(range(n) for n in reversed(grid))):
            _Program(kernel, tuple(reversed(pid)), grid, buffers, params, races).execute()


__all__ = ["IntrinsicSim", "SharedMemoryRace", "round_bf16", "run_kernel"]
