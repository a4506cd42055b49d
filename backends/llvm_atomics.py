"""Loop IR atomics in the LLVM backend: `atomicrmw` and `cmpxchg` (kdsl/ir/atomics.py gives the
values).  Program instances run on several CPU threads, so every atomic is a real one.

- add: `atomicrmw add` / `fadd` (float16 on `half`, which LLVM expands into a compare-exchange
  loop); bfloat16 has no LLVM type here: a compare-exchange loop on the 16-bit pattern.
- max/min: `max`/`min` (signed) or `umax`/`umin`; float32/float64 by Triton's sign trick: one
  integer `atomicrmw` on the bits, chosen by the operand's sign bit.
- and/or/xor/xchg on the integer bits; compare-and-swap is `cmpxchg` on the bits.
- `sem` maps to the ordering (relaxed -> monotonic, acquire, release, acq_rel; a failed
  `cmpxchg` orders as acquire or monotonic); every scope is LLVM's default (system) scope,
  at least as strong as "cta" and "gpu".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir

from kdsl.ir import loop as L
from kdsl.ir.types import DType

from .llvm_types import reg_type

if TYPE_CHECKING:
    from .llvm import _FnEmitter

ORDERING = {"relaxed": "monotonic", "acquire": "acquire", "release": "release",
            "acq_rel": "acq_rel"}
FAIL_ORDERING = {"relaxed": "monotonic", "acquire": "acquire", "release": "monotonic",
                 "acq_rel": "acquire"}
_I16, _I32 = ir.IntType(16), ir.IntType(32)
_F16, _F32 = ir.HalfType(), ir.FloatType()


def _int_type(t: DType) -> ir.IntType:
    return ir.IntType(t.bits)


def to_bits(em: _FnEmitter, x: ir.Value, t: DType) -> ir.Value:
    """The memory bit pattern (an integer of t's width) of a register value of `t`."""
    b = em.b
    if t.name == "bfloat16":
        return em._to_mem(x, t)
    if t.name == "float16":
        return b.bitcast(b.fptrunc(x, _F16), _I16)
    if t.is_float:
        return b.bitcast(x, _int_type(t))
    return x


def from_bits(em: _FnEmitter, x: ir.Value, t: DType) -> ir.Value:
    """The register value of `t` whose memory bit pattern is `x`."""
    b = em.b
    if t.name == "bfloat16":
        return b.bitcast(b.shl(b.zext(x, _I32), ir.Constant(_I32, 16)), _F32)
    if t.name == "float16":
        return b.fpext(b.bitcast(x, _F16), _F32)
    if t.is_float:
        return b.bitcast(x, em_reg(t))
    return x


def em_reg(t: DType) -> ir.Type:
    return reg_type(t)


def _cas_loop(em: _FnEmitter, ptr: ir.Value, t: DType, new: Any, sem: str) -> ir.Value:
    """Fetch-op as a compare-exchange loop on the bits: `new(old register value)` gives the
    register value to write; returns the old register value."""
    b = em.b
    ity = _int_type(t)
    start = b.load(ptr, typ=ity, align=t.itemsize)
    pre = b.block
    loop = b.append_basic_block("atomic.cas")
    done = b.append_basic_block("atomic.done")
    b.branch(loop)
    b.position_at_end(loop)
    cur = b.phi(ity)
    cur.add_incoming(start, pre)
    old = from_bits(em, cur, t)
    pair = b.cmpxchg(ptr, cur, to_bits(em, new(old), t), ORDERING[sem], FAIL_ORDERING[sem])
    cur.add_incoming(b.extract_value(pair, 0), b.block)
    b.cbranch(b.extract_value(pair, 1), done, loop)
    b.position_at_end(done)
    return old


def _float_minmax(em: _FnEmitter, op: str, ptr: ir.Value, v: ir.Value, t: DType,
                  sem: str) -> ir.Value:
    """Triton's sign trick: a signed max (min) of the bits where v's sign bit is clear, an
    unsigned min (max) where it is set."""
    b = em.b
    bits = to_bits(em, v, t)
    neg = b.icmp_signed("<", bits, ir.Constant(bits.type, 0))
    signed_op, unsigned_op = ("max", "umin") if op == "max" else ("min", "umax")
    with b.if_else(neg) as (then, otherwise):
        with then:
            on_neg = b.atomic_rmw(unsigned_op, ptr, bits, ORDERING[sem])
            neg_block = b.block
        with otherwise:
            on_pos = b.atomic_rmw(signed_op, ptr, bits, ORDERING[sem])
            pos_block = b.block
    old = b.phi(bits.type)
    old.add_incoming(on_neg, neg_block)
    old.add_incoming(on_pos, pos_block)
    return from_bits(em, old, t)


def emit_rmw(em: _FnEmitter, s: L.AtomicRMW) -> None:
    t = s.ptr.dtype.pointee
    b = em.b
    with em._masked(s.mask):
        ptr, v = em.expr(s.ptr), em.expr(s.value)
        order = ORDERING[s.sem]
        if s.op == "add" and t.name == "bfloat16":
            # the float32 sum, rounded to bfloat16 by `to_bits`
            old = _cas_loop(em, ptr, t, lambda o: b.fadd(o, v), s.sem)
        elif s.op in ("max", "min") and t.is_float:
            old = _float_minmax(em, s.op, ptr, v, t, s.sem)
        elif s.op == "add":
            old = em._from_mem_value(
                b.atomic_rmw("fadd" if t.is_float else "add", ptr, em._to_mem(v, t), order), t)
        else:
            llop = {"max": "max", "min": "min"}.get(s.op, s.op)
            if s.op in ("max", "min") and not t.is_signed:
                llop = "u" + llop
            old = from_bits(em, b.atomic_rmw(llop, ptr, to_bits(em, v, t), order), t)
        if s.result is not None:
            b.store(old, em._var_slot(s.result))


def emit_cas(em: _FnEmitter, s: L.AtomicCAS) -> None:
    t = s.ptr.dtype.pointee
    b = em.b
    with em._masked(s.mask):
        ptr = em.expr(s.ptr)
        cmp, val = to_bits(em, em.expr(s.cmp), t), to_bits(em, em.expr(s.value), t)
        pair = b.cmpxchg(ptr, cmp, val, ORDERING[s.sem], FAIL_ORDERING[s.sem])
        if s.result is not None:
            b.store(from_bits(em, b.extract_value(pair, 0), t), em._var_slot(s.result))


__all__ = ["emit_cas", "emit_rmw", "from_bits", "to_bits"]
