"""Atomics of the C-like dialects: how OpenCL C 1.2 and CUDA C spell each Loop IR `AtomicRMW` /
`AtomicCAS` (kdsl/ir/atomics.py gives the values), and the helper functions where a dialect has
no native form.

- Native forms: OpenCL's `atomic_*` on 32-bit integers (and `atomic_xchg` on float), `atom_*` on
  64-bit integers (`cl_khr_int64_base_atomics`; min/max/and/or/xor need
  `cl_khr_int64_extended_atomics`); CUDA's `atomicAdd` ... `atomicCAS` (`_system` variants for
  scope "sys"; "cta" uses the device-wide ones, which are stronger).  Float compare-and-swap and
  64-bit float exchange go through the integer view of the bits.
- Compare-and-swap loops: float add on OpenCL, and every 16-bit atomic (float16/bfloat16 add,
  16-bit compare-and-swap) as a loop on the aligned 32-bit word holding the element, which
  leaves the other half untouched (a concurrent change of the other half makes the exchange
  fail and retry).  Little-endian (every OpenCL CPU/GPU device and NVIDIA GPUs).  CUDA float16
  add at device scope is the native `atomicAdd(__half*)`.
- Float max/min: Triton's sign trick in one native integer atomic: where the operand's sign bit
  is clear, a signed max (min) of the bits; where it is set, an unsigned min (max).
- Memory semantics: the native atomics are relaxed; "release" puts a fence of the scope before
  the atomic, "acquire" one after it, "acq_rel" both (OpenCL 1.2: `mem_fence(
  CLK_GLOBAL_MEM_FENCE)`; CUDA: `__threadfence_block/__threadfence/__threadfence_system`).

`AtomicSpelling.call(op, pointee, scope, p, v, c)` returns the C expression and the helpers it
needs; the emitter (c_like.py) adds the fences and the mask.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

_INT_OPS = ("add", "max", "min", "and", "or", "xor", "xchg")


@dataclass(frozen=True)
class AtomicCall:
    expr: str                                   # C expression giving the old value
    helpers: tuple[tuple[str, str], ...] = ()   # (name, C definition) in dependency order
    needs: frozenset[str] = frozenset()         # "int64", "int64_ext" (OpenCL pragmas), "bf16"


@dataclass(frozen=True)
class AtomicSpelling:
    """A dialect's atomics: native forms, fences and the vocabulary of its helpers."""

    name: str
    # (op, pointee) -> format with {p} {v} {c} {x} (x: the scope's suffix); ops include "cas"
    native: Mapping[tuple[str, str], str]
    needs: Mapping[tuple[str, str], frozenset[str]]
    fence: Mapping[str, str]                    # scope -> fence statement
    suffix: Mapping[str, str]                   # scope -> suffix of the native names
    vocab: Mapping[str, str] = field(default_factory=dict)  # helper spellings (see _HELPERS)

    def call(self, op: str, pointee: str, scope: str, p: str, v: str, c: str | None = None
             ) -> AtomicCall | None:
        """The C form of `op` ("cas" or an AtomicRMW op) on `pointee`; None if it has none."""
        x = self.suffix.get(scope, "")
        fmt = self.native.get((op, pointee)) or self.native.get((op, pointee, scope))
        if fmt is not None:
            return AtomicCall(fmt.format(p=p, v=v, c=c, x=x),
                              needs=self.needs.get((op, pointee), frozenset()))
        helper = _helper(self, op, pointee, x)
        if helper is None:
            return None
        name, helpers, needs = helper
        args = f"{p}, {c}, {v}" if op == "cas" else f"{p}, {v}"
        return AtomicCall(f"{name}({args})", helpers, needs)


# ------------------------------------------------------------------------------ helpers
# Templates use the dialect's vocabulary: {q} qualifier, {G} pointer qualifier, {u16} {u32}
# {u64} {i32} {i64} types, {uptr} an integer as wide as a pointer, {load32} a relaxed read of
# a word, {cas32}/{cas64} compare-and-swap formats, bit casts {f2u} {u2f} {d2u} {u2d} {f2i}
# {d2i}, 16-bit conversions {h2f} {f2h} {b2f} {f2b}, and min/max formats.

# Fetch-op on the 16-bit element of an aligned 32-bit word: `NEW` computes the new 16 bits
# (a {u32} expression) from the old ones `h`.
_WORD16 = """\
{q} {u16} {name}({G}{u16}* p{params}) {{
    {G}{u32}* w = ({G}{u32}*)(({uptr})p & ~({uptr})3);
    {u32} sh = ({u32})(({uptr})p & 2) * 8u, seen = {load_w}, prev;
    do {{
        {u32} h = (seen >> sh) & 0xffffu;
{early}        prev = seen;
        seen = {cas32w};
    }} while (seen != prev);
    return ({u16})((prev >> sh) & 0xffffu);
}}"""


def _word16(sp: AtomicSpelling, name: str, params: str, new: str, early: str = "",
            x: str = "") -> str:
    voc = sp.vocab
    want = f"(prev & ~(0xffffu << sh)) | ((({voc['u32']})({new}) & 0xffffu) << sh)"
    return _WORD16.format(
        name=name, params=params, early=early, load_w=voc["load32"].format(p="w"),
        cas32w=voc["cas32"].format(p="w", c="prev", v=want, x=x), **voc)


# Fetch-add on a 32/64-bit float through the compare-and-swap of its integer view.
_FLOAT_ADD = """\
{q} {F} {name}({G}{F}* p, {F} v) {{
    {U} seen = {load}, prev;
    do {{
        prev = seen;
        seen = {cas};
    }} while (seen != prev);
    return {tofloat};
}}"""

# Float max/min by the sign trick: one native integer atomic.
_FLOAT_MINMAX = """\
{q} {F} {name}({G}{F}* p, {F} v) {{
    {S} b = {tosigned};
    return b >= 0 ? {fromsigned} : {fromunsigned};
}}"""


def _helper(sp: AtomicSpelling, op: str, pointee: str, x: str
            ) -> tuple[str, tuple[tuple[str, str], ...], frozenset[str]] | None:
    voc = sp.vocab
    name = f"kd_atomic_{op}_{pointee}{x}"
    q, G = voc["q"], voc["G"]
    if pointee in ("int16", "uint16", "float16", "bfloat16") and op in ("add", "cas"):
        if op == "add" and pointee in ("int16", "uint16"):
            return None
        base = f"kd_cas16{x}"
        defs: list[tuple[str, str]] = []
        needs = frozenset({"bf16"}) if pointee == "bfloat16" else frozenset()
        to_f, from_f = ((voc["h2f"], voc["f2h"]) if pointee == "float16"
                        else (voc["b2f"], voc["f2b"]))
        mem = voc["f16_mem"] if pointee == "float16" else voc["u16"]
        if pointee == "float16" and voc.get("f16_defs"):
            defs.append(("kd_f16bits", voc["f16_defs"]))
        if op == "cas":
            early = "        if (h != c) return (" + voc["u16"] + ")h;\n"
            defs.append((base, _word16(sp, base, f", {voc['u16']} c, {voc['u16']} v", "v",
                                       early, x)))
            if pointee in ("int16", "uint16"):
                T = voc[pointee]
                body = (f"{q} {T} {name}({G}{T}* p, {T} c, {T} v) {{\n    return ({T}){base}("
                        f"({G}{voc['u16']}*)p, ({voc['u16']})c, ({voc['u16']})v);\n}}")
            else:
                conv = (f"{q} float {name}({G}{mem}* p, float c, float v) {{\n    return "
                        + to_f.format(x=f"{base}(({G}{voc['u16']}*)p, {from_f.format(x='c')}, "
                                        f"{from_f.format(x='v')})") + ";\n}")
                body = conv
            defs.append((name, body))
            return name, tuple(defs), needs
        # float16/bfloat16 add: the rounded float32 sum of the old value and v
        inner = f"kd_add16_{pointee}{x}"
        new = from_f.format(x=to_f.format(x=f"({voc['u16']})h") + " + v")
        defs.append((inner, _word16(sp, inner, ", float v", new, x=x)))
        defs.append((name, f"{q} float {name}({G}{mem}* p, float v) {{\n    return "
                     + to_f.format(x=f"{inner}(({G}{voc['u16']}*)p, v)") + ";\n}"))
        return name, tuple(defs), needs
    if pointee in ("float32", "float64") and op == "add":
        w = "32" if pointee == "float32" else "64"
        F, U = voc[f"f{w}"], voc[f"u{w}"]
        up = f"({G}{U}*)p"
        cas = voc[f"cas{w}"].format(p=up, c="prev", v=voc[f"f2u{w}"].format(
            x=voc[f"u2f{w}"].format(x="prev") + " + v"), x=x)
        text = _FLOAT_ADD.format(q=q, G=G, F=F, U=U, name=name, cas=cas,
                                 load=voc[f"load{w}"].format(p=up),
                                 tofloat=voc[f"u2f{w}"].format(x="prev"))
        return name, ((name, text),), frozenset({"int64"}) if w == "64" else frozenset()
    if pointee in ("float32", "float64") and op in ("max", "min"):
        w = "32" if pointee == "float32" else "64"
        F, S, U = voc[f"f{w}"], voc[f"i{w}"], voc[f"u{w}"]
        signed_op, unsigned_op = ("max", "min") if op == "max" else ("min", "max")
        sp_ = voc[f"{signed_op}_s{w}"].format(p=f"({G}{S}*)p", v="b", x=x)
        up_ = voc[f"{unsigned_op}_u{w}"].format(p=f"({G}{U}*)p", v=f"({U})b", x=x)
        text = _FLOAT_MINMAX.format(
            q=q, G=G, F=F, S=S, name=name, tosigned=voc[f"f2i{w}"].format(x="v"),
            fromsigned=voc[f"i2f{w}"].format(x=sp_), fromunsigned=voc[f"u2f{w}"].format(x=up_))
        needs = frozenset({"int64", "int64_ext"}) if w == "64" else frozenset()
        return name, ((name, text),), needs
    return None


# ------------------------------------------------------------------------------- OpenCL

def _opencl_native() -> tuple[dict, dict]:
    native: dict = {}
    needs: dict = {}
    for t in ("int32", "uint32"):
        for op in _INT_OPS:
            native[(op, t)] = f"atomic_{op}({{p}}, {{v}})"
        native[("cas", t)] = "atomic_cmpxchg({p}, {c}, {v})"
    for t in ("int64", "uint64"):
        for op in _INT_OPS:
            native[(op, t)] = f"atom_{op}({{p}}, {{v}})"
            needs[(op, t)] = frozenset({"int64"} | ({"int64_ext"} if op in (
                "max", "min", "and", "or", "xor") else set()))
        native[("cas", t)] = "atom_cmpxchg({p}, {c}, {v})"
        needs[("cas", t)] = frozenset({"int64"})
    native[("xchg", "float32")] = "atomic_xchg({p}, {v})"
    native[("cas", "float32")] = ("as_float(atomic_cmpxchg((volatile __global uint*){p}, "
                                  "as_uint({c}), as_uint({v})))")
    native[("xchg", "float64")] = ("as_double(atom_xchg((volatile __global ulong*){p}, "
                                   "as_ulong({v})))")
    native[("cas", "float64")] = ("as_double(atom_cmpxchg((volatile __global ulong*){p}, "
                                  "as_ulong({c}), as_ulong({v})))")
    needs[("xchg", "float64")] = needs[("cas", "float64")] = frozenset({"int64"})
    return native, needs


_OCL_NATIVE, _OCL_NEEDS = _opencl_native()
_OCL_F16_BITS = """\
/* float16 bit patterns <-> float32 through a private ushort (`half` exists only behind
   pointers without cl_khr_fp16); float32 -> float16 rounds to nearest even */
static inline float kd_f16bits_to_f32(uint h) {
    ushort b = (ushort)h;
    return vload_half(0, (const half*)&b);
}
static inline ushort kd_f32_to_f16bits(float f) {
    ushort b;
    vstore_half_rte(f, 0, (half*)&b);
    return b;
}"""

OPENCL_ATOMICS = AtomicSpelling(
    name="opencl", native=_OCL_NATIVE, needs=_OCL_NEEDS,
    fence={s: "mem_fence(CLK_GLOBAL_MEM_FENCE);" for s in ("cta", "gpu", "sys")},
    suffix={},
    vocab={
        "q": "static inline", "G": "volatile __global ", "u16": "ushort", "u32": "uint",
        "u64": "ulong", "i32": "int", "i64": "long", "f32": "float", "f64": "double",
        "int16": "short", "uint16": "ushort", "uptr": "size_t", "f16_mem": "half",
        "load32": "*({p})", "load64": "*({p})",
        "cas32": "atomic_cmpxchg({p}, {c}, {v})", "cas64": "atom_cmpxchg({p}, {c}, {v})",
        "f2u32": "as_uint({x})", "u2f32": "as_float({x})", "f2i32": "as_int({x})",
        "i2f32": "as_float({x})", "f2u64": "as_ulong({x})", "u2f64": "as_double({x})",
        "f2i64": "as_long({x})", "i2f64": "as_double({x})",
        "max_s32": "atomic_max({p}, {v})", "min_s32": "atomic_min({p}, {v})",
        "max_u32": "atomic_max({p}, {v})", "min_u32": "atomic_min({p}, {v})",
        "max_s64": "atom_max({p}, {v})", "min_s64": "atom_min({p}, {v})",
        "max_u64": "atom_max({p}, {v})", "min_u64": "atom_min({p}, {v})",
        # 16-bit floats: through a private ushort (`half` exists only behind pointers without
        # cl_khr_fp16); bfloat16 with the shared bf16 helpers
        "h2f": "kd_f16bits_to_f32({x})", "f2h": "kd_f32_to_f16bits({x})",
        "b2f": "kd_bf16_to_f32({x})", "f2b": "kd_f32_to_bf16({x})",
        "f16_defs": _OCL_F16_BITS,
    },
)

# ---------------------------------------------------------------------------------- CUDA

_ULL = "unsigned long long"


def _cuda_native() -> dict:
    n = {"add": "atomicAdd", "max": "atomicMax", "min": "atomicMin", "and": "atomicAnd",
         "or": "atomicOr", "xor": "atomicXor", "xchg": "atomicExch"}
    native: dict = {}
    for t in ("int32", "uint32", "uint64"):
        for op, f in n.items():
            native[(op, t)] = f"{f}{{x}}({{p}}, {{v}})"
        native[("cas", t)] = "atomicCAS{x}({p}, {c}, {v})"
    for op, f in n.items():  # long long: max/min exist, the rest through unsigned long long
        native[(op, "int64")] = (f"{f}{{x}}({{p}}, {{v}})" if op in ("max", "min") else
                                 f"(long long){f}{{x}}(({_ULL}*){{p}}, ({_ULL})({{v}}))")
    native[("cas", "int64")] = (f"(long long)atomicCAS{{x}}(({_ULL}*){{p}}, ({_ULL})({{c}}), "
                                f"({_ULL})({{v}}))")
    native[("add", "float32")] = "atomicAdd{x}({p}, {v})"
    native[("xchg", "float32")] = "atomicExch{x}({p}, {v})"
    native[("cas", "float32")] = ("__int_as_float(atomicCAS{x}((int*){p}, __float_as_int({c}), "
                                  "__float_as_int({v})))")
    native[("add", "float64")] = "atomicAdd{x}({p}, {v})"
    v_bits, c_bits = (f"({_ULL})__double_as_longlong({{{w}}})" for w in ("v", "c"))
    native[("xchg", "float64")] = ("__longlong_as_double((long long)atomicExch{x}"
                                   f"(({_ULL}*){{p}}, {v_bits}))")
    native[("cas", "float64")] = ("__longlong_as_double((long long)atomicCAS{x}"
                                  f"(({_ULL}*){{p}}, {c_bits}, {v_bits}))")
    # device (and block) scope: the native half-precision add
    for scope in ("gpu", "cta"):
        native[("add", "float16", scope)] = "__half2float(atomicAdd({p}, __float2half_rn({v})))"
    return native


CUDA_ATOMICS = AtomicSpelling(
    name="cuda", native=_cuda_native(), needs={},
    fence={"cta": "__threadfence_block();", "gpu": "__threadfence();",
           "sys": "__threadfence_system();"},
    suffix={"sys": "_system"},
    vocab={
        "q": "static __device__ __forceinline__", "G": "", "u16": "unsigned short",
        "u32": "unsigned int", "u64": _ULL, "i32": "int", "i64": "long long", "f32": "float",
        "f64": "double", "int16": "short", "uint16": "unsigned short", "uptr": _ULL,
        "f16_mem": "__half",
        "load32": "*(volatile unsigned int*)({p})", "load64": f"*(volatile {_ULL}*)({{p}})",
        "cas32": "atomicCAS{x}({p}, {c}, {v})", "cas64": "atomicCAS{x}({p}, {c}, {v})",
        "f2u32": "__float_as_uint({x})", "u2f32": "__uint_as_float({x})",
        "f2i32": "__float_as_int({x})", "i2f32": "__int_as_float({x})",
        "f2u64": f"({_ULL})__double_as_longlong({{x}})",
        "u2f64": "__longlong_as_double((long long)({x}))",
        "f2i64": "__double_as_longlong({x})", "i2f64": "__longlong_as_double({x})",
        "max_s32": "atomicMax{x}({p}, {v})", "min_s32": "atomicMin{x}({p}, {v})",
        "max_u32": "atomicMax{x}({p}, {v})", "min_u32": "atomicMin{x}({p}, {v})",
        "max_s64": "atomicMax{x}({p}, {v})", "min_s64": "atomicMin{x}({p}, {v})",
        "max_u64": "atomicMax{x}({p}, {v})", "min_u64": "atomicMin{x}({p}, {v})",
        "h2f": "__half2float(__ushort_as_half((unsigned short)({x})))",
        "f2h": "__half_as_ushort(__float2half_rn({x}))", "b2f": "kd_bf16_to_f32({x})",
        "f2b": "kd_f32_to_bf16({x})",
    },
)

__all__ = ["CUDA_ATOMICS", "OPENCL_ATOMICS", "AtomicCall", "AtomicSpelling"]
