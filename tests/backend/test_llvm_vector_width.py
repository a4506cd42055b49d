"""The llvm backend's SIMD profile (backends/llvm_host.py): the feature -> width table, the
micro-kernel's register blocks, and the host assembly it leads to (vector registers of the
host's width, no stack spills in the matmul's FMA loop).  The host's features are read, never
assumed: an AVX-512 host checks zmm code, an AVX2 host ymm code; the AVX2 code is also checked
on any x86 host by compiling for a Haswell target machine."""

from __future__ import annotations

import re

import numpy as np
import pytest
from kdsl.backends import llvm_host

import kdsl as kd
from kdsl.lowering.dot_cpu import BLOCKS, blocks, choose_block

X86 = "x86_64-unknown-linux-gnu"
AVX2 = "+64bit,+sse2,+sse4.2,+avx,+avx2,+fma,+f16c,-avx512f,-avx512bw,-avx512vl"
AVX512 = ("+64bit,+sse2,+sse4.2,+avx,+avx2,+fma,+f16c,+avx512f,+avx512bw,+avx512dq,+avx512vl,"
          "-prefer-256-bit")
ARM = "+neon,+fp-armv8,+sve,+sve2,-sme"


# --------------------------------------------------------------------------- the table


def test_avx512_prefers_512_bit_with_32_registers():
    p = llvm_host.choose(AVX512, X86)
    assert (p.vector_bits, p.vector_regs, p.prefer, p.rule) == (512, 32, 512, "avx512")
    assert p.fn_attrs() == {"prefer-vector-width": "512"}


def test_avx2_prefers_256_bit_with_16_registers():
    p = llvm_host.choose(AVX2, X86)
    assert (p.vector_bits, p.vector_regs, p.prefer) == (256, 16, 256)
    assert p.fn_attrs() == {"prefer-vector-width": "256"}


def test_avx512_without_evex512_stays_256_bit():
    p = llvm_host.choose(AVX512 + ",-evex512", X86)
    assert (p.vector_bits, p.vector_regs, p.prefer) == (256, 32, 256)


def test_arm_keeps_llvm_default_width():
    for triple in ("aarch64-unknown-linux-gnu", ""):  # from the triple, or the features alone
        p = llvm_host.choose(ARM, triple)
        assert (p.vector_bits, p.vector_regs, p.prefer, p.rule) == (128, 32, None, "neon")
        assert p.fn_attrs() == {}


def test_plain_x86_64_and_unknown_cpus_keep_llvm_default_width():
    assert llvm_host.choose("+64bit,+sse2,-avx", X86).prefer is None
    assert llvm_host.choose("+sse2", X86).vector_bits == 128
    other = llvm_host.choose("+m,+a,+f,+d,+v", "riscv64-unknown-linux-gnu")
    assert (other.prefer, other.rule) == (None, "other")


def test_disabled_features_do_not_count():
    assert llvm_host.choose(AVX2.replace("-avx512f", "+avx512f"), X86).vector_bits == 512
    assert llvm_host.choose(AVX2, X86).vector_bits == 256  # "-avx512f" is not "avx512f"


def test_override_values():
    host = llvm_host.choose(AVX512, X86)
    assert llvm_host.override(host, "auto") == host
    assert llvm_host.override(host, "") == host
    old = llvm_host.override(host, "llvm")
    assert (old.vector_bits, old.prefer, old.fn_attrs()) == (0, None, {})
    forced = llvm_host.override(host, "256")
    assert (forced.vector_bits, forced.vector_regs, forced.prefer) == (256, 32, 256)
    with pytest.raises(ValueError, match=llvm_host.ENV):
        llvm_host.override(host, "1024")


def test_profile_is_part_of_the_backend_hash(monkeypatch):
    from kdsl.backends.llvm import LLVMBackend

    be = LLVMBackend()
    monkeypatch.delenv(llvm_host.ENV, raising=False)
    auto = be.hash()
    assert llvm_host.profile().key() in auto
    monkeypatch.setenv(llvm_host.ENV, "llvm")
    assert be.hash() != auto
    assert be.target(1).vector_bits == 0
    monkeypatch.setenv(llvm_host.ENV, "128")
    assert be.target(1).vector_bits == 128 and be.hash() != auto


# ------------------------------------------------------------------ register blocks


@pytest.mark.parametrize("bits,regs,first", [(512, 32, (8, 32)), (256, 32, (8, 16)),
                                              (256, 16, (8, 8)), (128, 32, (8, 8)),
                                              (128, 16, (8, 4))])
def test_blocks_fit_the_register_file(bits, regs, first):
    shapes = blocks(bits, regs)
    assert shapes[0] == first
    W = bits // 32
    for mr, nr in shapes:
        v = -(-nr // W)  # vectors per row of the block
        assert mr * v + v + 1 <= regs, (mr, nr)
    assert shapes[-1] == (1, 1)  # every tile has a block


@pytest.mark.parametrize("bits,regs,M,N,want", [
    (256, 16, 128, 128, (6, 16, 2)),   # AVX2: 12 accumulators, the 2 rows left in 2 x 16
    (256, 16, 64, 64, (6, 16, 4)),
    (256, 16, 96, 64, (6, 16, None)),  # 6 divides: no tail
    (256, 16, 8, 8, (8, 8, None)),     # too narrow for 6 x 16: the dividing shape
    (512, 32, 128, 128, (6, 64, 2)),   # AVX-512: 24 accumulators against 8 x 32's 16
    (512, 32, 256, 64, (6, 64, 4)),
    (512, 32, 128, 32, (8, 32, None)),  # 6 x 32 would hold 12: the dividing 8 x 32
    (512, 32, 4, 64, (4, 64, None)),   # under 6 rows
    (128, 32, 128, 128, (6, 16, 2)),   # NEON: 24 against 8 x 8's 16
])
def test_choose_block_takes_a_row_tail_only_for_more_accumulators(bits, regs, M, N, want):
    assert choose_block(M, N, bits, regs) == want
    mr, nr, tail = want
    W = bits // 32
    first = next((r, c) for r, c in blocks(bits, regs) if M % r == 0 and N % c == 0)
    if tail is not None or (mr, nr) != first:
        assert mr * nr > first[0] * first[1]  # more accumulators than the dividing shape
        assert mr * (nr // W) + nr // W + 1 <= regs  # and still no spill
    if tail is not None:
        assert (M % mr) % tail == 0 and (tail, nr) in blocks(bits, regs)


@kd.jit
def _dense(a_ptr, b_ptr, c_ptr, M: kd.constexpr, N: kd.constexpr, K: kd.constexpr):
    rm, rn, rk = kd.arange(0, M), kd.arange(0, N), kd.arange(0, K)
    a = kd.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = kd.load(b_ptr + rk[:, None] * N + rn[None, :])
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], kd.dot(a, b))


def test_row_tail_gives_the_same_bits(monkeypatch):
    # 6-row blocks and a 4-row tail (an AVX2 register file) against the width-agnostic
    # table: every output element sees the same FMAs in the same k order
    rng = np.random.default_rng(3)
    M, N, K = 64, 32, 40
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    outs = []
    for prof in (llvm_host.SimdProfile(256, 16, 256, "avx2"),
                 llvm_host.SimdProfile(0, 0, None, "llvm-default")):
        monkeypatch.setattr(llvm_host, "profile", lambda p=prof: p)
        c = np.zeros((M, N), np.float32)
        fn = kd.jit(_dense.fn)  # a fresh compile
        fn[(1,)](a, b, c, M=M, N=N, K=K, backend="llvm")
        loop_ir = fn.compile(a, b, c, M=M, N=N, K=K, backend="llvm").ir["loop"]
        outs.append((c, loop_ir))
    (c6, ir6), (c0, _) = outs
    assert "range(0:int32, 60:int32, 6:int32)" in ir6
    assert "range(60:int32, 64:int32, 4:int32)" in ir6
    np.testing.assert_array_equal(c6, c0)
    np.testing.assert_allclose(c6, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_width_agnostic_blocks_are_the_old_table():
    assert blocks(0, 0) == BLOCKS


def test_llvm_tiles_hold_the_best_block_of_every_profile():
    # the kernel library's llvm tiles are multiples of each CPU's first-choice block, so no
    # vector width falls back to a narrower micro-kernel on the library's own shapes
    from kdsl.kernels import configs

    firsts = {blocks(p.vector_bits, p.vector_regs)[0] for *_, p in llvm_host.RULES}
    assert (8, 32) in firsts
    for table in (configs.MATMUL, configs.MLP, configs.QUANT, configs.ATTENTION):
        for _, meta in table["cpu"]:
            for mr, nr in firsts:
                assert meta["BLOCK_M"] % mr == 0 and meta["BLOCK_N"] % nr == 0, (meta, mr, nr)


# --------------------------------------------------------------------------- assembly

llvm_backend = pytest.importorskip("kdsl.backends.llvm")
if not llvm_backend.LLVMBackend().is_available():  # pragma: no cover
    pytest.skip("llvmlite cannot initialise the native target", allow_module_level=True)


def host_features() -> frozenset[str]:
    import llvmlite.binding as llvm

    llvm_backend._llvm()
    return llvm_host.parse_features(llvm.get_host_cpu_features().flatten())


def host_arch() -> str:
    import llvmlite.binding as llvm

    llvm_backend._llvm()
    return llvm_host.arch_of(llvm.get_process_triple())


# Per architecture: a vector FMA, and a stack slot addressed without an index register (a
# spill or reload; the packed operands are stack arrays too, but indexed by the loop).
ASM = {
    "x86": (re.compile(r"\bvfmadd\w*ps\b"), re.compile(r"-?(0x)?[0-9a-f]*\(%(rsp|rbp)\)")),
    "arm": (re.compile(r"\bfmla\b"), re.compile(r"\[sp(, #-?\d+)?\]")),
}


def fma_loops(asm: str, arch: str) -> list[list[str]]:
    """The innermost loops (a label up to the last branch back to it) holding a vector FMA."""
    fma = ASM[arch][0]
    lines = asm.splitlines()
    labels = {m.group(1): i for i, ln in enumerate(lines) if (m := re.match(r"(\.?\w+):", ln))}
    loops = []
    for j, ln in enumerate(lines):
        m = re.match(r"\s+[a-z.]+\s+(\.?\w+)\s*$", ln)
        if m and m.group(1) in labels and labels[m.group(1)] < j:
            body = lines[labels[m.group(1)] + 1:j + 1]
            if any(fma.search(b) for b in body):
                loops.append(body)
    return [b for b in loops if not any(len(o) < len(b) and all(x in b for x in o)
                                        for o in loops)]


def spills(loop: list[str], arch: str) -> list[str]:
    return [ln for ln in loop if ASM[arch][1].search(ln)]


@kd.jit
def _softmax(out_ptr, in_ptr, n_cols, BLOCK: kd.constexpr):
    row = kd.program_id(0)
    cols = kd.arange(0, BLOCK)
    mask = cols < n_cols
    x = kd.load(in_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    num = kd.exp(x - kd.max(x, axis=0))
    kd.store(out_ptr + row * n_cols + cols, num / kd.sum(num, axis=0), mask=mask)


@kd.jit
def _matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: kd.constexpr, BN: kd.constexpr,
            BK: kd.constexpr):
    rm = kd.program_id(0) * BM + kd.arange(0, BM)
    rn = kd.program_id(1) * BN + kd.arange(0, BN)
    rk = kd.arange(0, BK)
    acc = kd.zeros((BM, BN), dtype=kd.float32)
    for k0 in range(0, K, BK):
        a = kd.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = kd.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :],
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = kd.dot(a, b, acc)
    kd.store(c_ptr + rm[:, None] * N + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _compile(kernel, *args, **meta):
    """A fresh copy of `kernel` compiled for the llvm backend (the in-memory cache does not
    key on the SIMD profile)."""
    return kd.jit(kernel.fn).compile(*args, backend="llvm", **meta)


def _matmul_ir(bm=32, bn=64, bk=32):
    a = np.zeros((64, 64), np.float32)
    return _compile(_matmul, a, a, a, 64, 64, 64, BM=bm, BN=bn, BK=bk).ir


def test_host_profile_follows_the_host_features():
    feats, prof = host_features(), llvm_host.profile()
    arch = host_arch()
    if arch == "x86" and "avx512f" in feats:
        assert prof.vector_bits == 512 and prof.prefer == 512
    elif arch == "x86" and "avx2" in feats:
        assert prof.vector_bits == 256 and prof.prefer == 256 and prof.vector_regs == 16
    elif arch == "arm":
        assert prof.prefer is None
    x = np.zeros((4, 1024), np.float32)
    ir = _compile(_softmax, x, x, 1024, BLOCK=1024).ir
    for stage in ("llvm", "llvm.opt"):
        if prof.prefer is None:
            assert "prefer-vector-width" not in ir[stage]
        else:
            assert f'"prefer-vector-width"="{prof.prefer}"' in ir[stage]


def test_scalef_comes_with_avx512f_only():
    assert llvm_host.choose(AVX512, X86).scalef
    assert llvm_host.choose(AVX512 + ",-evex512", X86).scalef
    assert not llvm_host.choose(AVX2, X86).scalef
    assert not llvm_host.choose(ARM, "aarch64-unknown-linux-gnu").scalef
    assert llvm_host.override(llvm_host.choose(AVX512, X86), "256").scalef  # width only
    assert llvm_host.choose(AVX512, X86).key() != llvm_host.choose(AVX512, X86).key().replace(
        ",scalef", "")


@kd.jit
def _exp2_of(x_ptr, y_ptr, z_ptr, n, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    x = kd.load(x_ptr + offs, mask=offs < n)
    kd.store(y_ptr + offs, kd.exp(x), mask=offs < n)
    kd.store(z_ptr + offs, kd.exp2(x), mask=offs < n)


def test_exp_with_and_without_scalef_agree_bit_for_bit(monkeypatch):
    """`llvm.ldexp` (one `vscalefps` on AVX-512) and the two exact-range factors round the
    same product once: equal results, denormal outputs included."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-160, 130, 4000), [-87.5, -100.0, -103.9, -149.5, -150.0,
                        88.8, 128.5, np.inf, -np.inf, np.nan, 0.0]]).astype(np.float32)
    outs = {}
    base = llvm_host.profile()
    for scalef in (True, False):
        prof = llvm_host.SimdProfile(base.vector_bits, base.vector_regs, base.prefer,
                                     base.rule, scalef)
        monkeypatch.setattr(llvm_host, "profile", lambda p=prof: p)
        y, z = np.empty_like(x), np.empty_like(x)
        k = kd.jit(_exp2_of.fn)
        k[(kd.cdiv(x.size, 256),)](x, y, z, x.size, BLOCK=256, backend="llvm")
        ir = k.compile(x, y, z, x.size, BLOCK=256, backend="llvm").ir
        assert ("llvm.ldexp" in ir["llvm"]) == scalef
        if scalef and host_arch() == "x86" and "avx512f" in host_features():
            assert "vscalefps" in ir["asm"]
        outs[scalef] = (y, z)
    for a, b in zip(outs[True], outs[False]):
        np.testing.assert_array_equal(a.view(np.int32), b.view(np.int32))
    # (accuracy against float64: tests/backend/test_llvm_backend.py test_float32_math_ulps)


@pytest.mark.skipif(host_arch() != "x86", reason="x86 vector registers")
def test_softmax_and_matmul_use_the_host_vector_width():
    x = np.zeros((4, 1024), np.float32)
    kernels = {"softmax": _compile(_softmax, x, x, 1024, BLOCK=1024).ir["asm"],
               "matmul": _matmul_ir()["asm"]}
    for name, asm in kernels.items():
        if "avx512f" in host_features():
            assert "%zmm" in asm, f"{name}: no 512-bit vectors on an AVX-512 host"
        elif "avx2" in host_features():
            assert "%ymm" in asm and "%zmm" not in asm, name
    if "avx512f" in host_features():
        loops = fma_loops(kernels["matmul"], "x86")
        assert loops and all(any("%zmm" in ln for ln in b if "vfmadd" in ln) for b in loops)


@pytest.mark.skipif(host_arch() not in ASM, reason="x86 and AArch64 assembly only")
def test_matmul_fma_loop_does_not_spill():
    arch = host_arch()
    for shape in ((32, 64, 32), (64, 64, 64)):
        loops = fma_loops(_matmul_ir(*shape)["asm"], arch)
        assert loops, "no FMA loop found in the matmul's assembly"
        for body in loops:
            assert not spills(body, arch), f"{shape}: stack traffic in the FMA loop:\n" + \
                "\n".join(spills(body, arch))


@kd.jit
def _sparse(v_ptr, m_ptr, x_ptr, c_ptr, K2, BN: kd.constexpr, BM: kd.constexpr,
            BK: kd.constexpr):
    # the library's 2:4 panel kernel in small: values/meta [K2, BN], x^T [2 * K2, BM]
    rj, rk = kd.arange(0, BK // 2), kd.arange(0, BK)
    rn, rm = kd.arange(0, BN), kd.arange(0, BM)
    acc = kd.zeros((BN, BM), dtype=kd.float32)
    for j0 in range(0, K2, BK // 2):
        w = (j0 + rj)[:, None] * BN + rn[None, :]
        ok = (j0 + rj)[:, None] < K2
        v = kd.load(v_ptr + w, mask=ok, other=0.0)
        e = kd.load(m_ptr + w, mask=ok, other=0)
        x = kd.load(x_ptr + (2 * j0 + rk)[:, None] * BM + rm[None, :])
        acc = kd.sparse_dot(kd.trans(v), kd.trans(e), x, acc)
    kd.store(c_ptr + rm[:, None] * BN + rn[None, :], kd.trans(acc))


@pytest.mark.skipif(host_arch() not in ASM, reason="x86 and AArch64 assembly only")
def test_sparse_dot_fma_loop_does_not_spill_or_decode():
    # accumulators in registers, b read as the FMAs' memory operands, and each row's offset
    # into b one load (decoded before the loop: no mask or shift of meta inside it)
    arch = host_arch()
    v, m = np.zeros(64, np.float32), np.zeros(64, np.int8)
    for bn, bm in ((64, 128), (16, 64)):
        asm = _compile(_sparse, v, m, v, v, 64, BN=bn, BM=bm, BK=32).ir["asm"]
        loops = fma_loops(asm, arch)
        assert loops, "no FMA loop found in the sparse_dot's assembly"
        for body in loops:
            assert not spills(body, arch), f"{bn}x{bm}: stack traffic in the FMA loop:\n" + \
                "\n".join(spills(body, arch))
            if arch == "x86":
                decode = [ln for ln in body if re.match(r"\s+(and|shl|or)[lq]?\s", ln)]
                assert not decode, "\n".join(decode)
                if "avx512f" in host_features():
                    assert all("%zmm" in ln for ln in body if "vfmadd" in ln)


def _haswell_asm(source: str) -> str:
    """`source` (unoptimised LLVM IR) optimised and compiled for an AVX2-only Haswell."""
    import llvmlite.binding as llvm

    with llvm_backend._COMPILE:
        tm = llvm.Target.from_triple(X86).create_target_machine(cpu="haswell", opt=3)
        mod = llvm.parse_assembly(source)
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = pto.slp_vectorization = True
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        return tm.emit_assembly(mod)


@pytest.mark.skipif(host_arch() != "x86", reason="compiles for an x86 target machine")
def test_avx2_profile_gives_spill_free_ymm_micro_kernel(monkeypatch):
    haswell = llvm_host.choose(AVX2, X86)
    monkeypatch.setattr(llvm_host, "profile", lambda: haswell)
    asm = _haswell_asm(_matmul_ir()["llvm"])
    loops = fma_loops(asm, "x86")
    assert loops and "%zmm" not in asm
    for body in loops:
        assert any("%ymm" in ln for ln in body if "vfmadd" in ln)
        assert not spills(body, "x86"), "\n".join(spills(body, "x86"))
    # the check can fail: the width-agnostic 8 x 32 blocks need 32 ymm accumulators of 16
    monkeypatch.setattr(llvm_host, "profile", lambda: llvm_host.SimdProfile(0, 0, 256, "t"))
    old = fma_loops(_haswell_asm(_matmul_ir()["llvm"]), "x86")
    assert any(spills(body, "x86") for body in old)


@pytest.mark.parametrize("M,N,K", [(48, 40, 24), (64, 64, 96)])
def test_results_do_not_depend_on_the_profile(monkeypatch, M, N, K):
    rng = np.random.default_rng(M)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    outs = []
    for env in ("auto", "llvm", "256"):
        monkeypatch.setenv(llvm_host.ENV, env)
        c = np.empty((M, N), np.float32)
        k = kd.jit(_matmul.fn)
        k[(kd.cdiv(M, 32), kd.cdiv(N, 32))](a, b, c, M, N, K, BM=32, BN=32, BK=32,
                                            backend="llvm")
        outs.append(c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-5 * np.sqrt(K))
    for c in outs[1:]:  # same FMAs in the same k order, whatever the blocks
        np.testing.assert_array_equal(c, outs[0])
