"""`kd.dot_scaled` in the frontend: it decomposes into ordinary Tile IR ops (one `dot` of
bfloat16 or float16 tiles), and every bad format, dtype, shape or option is a CompilationError
at the kernel's line."""
from __future__ import annotations

import inspect

import pytest

import kdsl as kd
from kdsl.errors import CompilationError
from kdsl.frontend import build_function
from kdsl.ir.parser import parse_function
from kdsl.ir.tile import print_function, verify
from kdsl.ir.types import PointerType, TileType, bfloat16, float32, uint8


def P(d):
    return TileType((), PointerType(d))


def line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def fp4_fp8(a_ptr, b_ptr, s_ptr, c_ptr):
    a = kd.load(a_ptr + kd.arange(0, 16)[:, None] * 32 + kd.arange(0, 32)[None, :])
    b = kd.load(b_ptr + kd.arange(0, 64)[:, None] * 16 + kd.arange(0, 16)[None, :])
    s = kd.load(s_ptr + kd.arange(0, 16)[:, None] * 2 + kd.arange(0, 2)[None, :])
    c = kd.dot_scaled(a, s, "e2m1", b, s, "e4m3")
    kd.store(c_ptr + kd.arange(0, 16)[:, None] * 16 + kd.arange(0, 16)[None, :], c)


def test_decomposes_into_one_bf16_dot():
    f = build_function(fp4_fp8, {"a_ptr": P(uint8), "b_ptr": P(uint8), "s_ptr": P(uint8),
                                      "c_ptr": P(float32)}, {})
    verify(f)
    text = print_function(f)
    assert print_function(parse_function(text)) == text
    dots = [op for op in f.walk() if op.kind == "dot"]
    assert len(dots) == 1
    a, b, acc = dots[0].operands
    assert a.type == TileType((16, 64), bfloat16) and b.type == TileType((64, 16), bfloat16)
    assert acc.type == TileType((16, 16), float32)
    assert all(op.loc.line == line_of(fp4_fp8, "kd.dot_scaled") for op in f.walk()
               if op.kind in ("dot", "bitcast", "where"))


def bad(a_ptr, h_ptr, s_ptr, CASE: kd.constexpr):
    a8 = kd.load(a_ptr + kd.arange(0, 16)[:, None] * 64 + kd.arange(0, 64)[None, :])
    b8 = kd.load(a_ptr + kd.arange(0, 64)[:, None] * 16 + kd.arange(0, 16)[None, :])
    h = kd.load(h_ptr + kd.arange(0, 16)[:, None] * 64 + kd.arange(0, 64)[None, :])
    s = kd.load(s_ptr + kd.arange(0, 16)[:, None] * 2 + kd.arange(0, 2)[None, :])
    if CASE == "format":
        kd.dot_scaled(a8, None, "e3m2", b8, None, "e4m3")  # format
    if CASE == "dtype":
        kd.dot_scaled(h, None, "e4m3", b8, None, "e4m3")  # dtype
    if CASE == "fp4_dtype":
        kd.dot_scaled(a8, None, "e4m3", h, None, "e2m1")  # fp4_dtype
    if CASE == "k":
        kd.dot_scaled(a8, None, "e2m1", b8, None, "e4m3")  # k
    if CASE == "k_pack":
        kd.dot_scaled(a8, None, "e4m3", b8, None, "e4m3", lhs_k_pack=False)  # k_pack
    if CASE == "scale_shape":
        kd.dot_scaled(a8, None, "e4m3", b8, kd.trans(s), "e4m3")  # scale_shape
    if CASE == "scale_dtype":
        kd.dot_scaled(a8, s.to(kd.int32), "e4m3", b8, None, "e4m3")  # scale_dtype
    if CASE == "acc":
        kd.dot_scaled(a8, None, "e4m3", b8, None, "e4m3", kd.zeros((16, 16), kd.float16))  # acc
    if CASE == "out_dtype":
        kd.dot_scaled(a8, None, "e4m3", b8, None, "e4m3", out_dtype=kd.float16)  # out_dtype
    if CASE == "runtime_format":
        kd.dot_scaled(a8, None, s_ptr, b8, None, "e4m3")  # runtime_format
    if CASE == "rank":
        kd.dot_scaled(a8.reshape(2, 8, 64), None, "e4m3", b8, None, "e4m3")  # rank


@pytest.mark.parametrize("case,msg", [
    ("format", "lhs_format must be one of 'e2m1', 'e4m3', 'e5m2', 'bf16', 'fp16', got 'e3m2'"),
    ("dtype", "lhs in format 'e4m3' must be float8e4nv or uint8, got uint16"),
    ("fp4_dtype", "rhs in format 'e2m1' must be uint8"),
    ("k", r"hold different K \(128 and 64 elements\)"),
    ("k_pack", "lhs_k_pack=False needs format 'e2m1'"),
    ("scale_shape", (r"rhs_scale must have shape \[16, 2\] \(\[N, K // 32\], not "
                    r"transposed\), got \[2, 16\]")),
    ("scale_dtype", "lhs_scale must be a uint8 .e8m0. or float8e4nv tile, or None, got int32"),
    ("acc", "acc must be a float32 tile of shape"),
    ("out_dtype", "out_dtype must be float32"),
    ("runtime_format", "lhs_format must be a compile-time str"),
    ("rank", "lhs must be a 2-D tile"),
])
def test_errors_name_the_line(case, msg):
    types = {"a_ptr": P(uint8), "h_ptr": P(kd.uint16), "s_ptr": P(uint8)}
    with pytest.raises(CompilationError, match=msg) as e:
        build_function(bad, types, {"CASE": case})
    assert e.value.loc.line == line_of(bad, f"# {case}")
