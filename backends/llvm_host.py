"""The SIMD shape the llvm backend tunes its code for: the vector width LLVM is asked to prefer
and the number of vector registers the CPU `dot` micro-kernel may fill.

LLVM's own choice is not the widest the CPU has: on Intel cores with AVX-512 (Skylake-X up to
Emerald Rapids) its tuning flag `prefer-256-bit` makes the loop vectoriser emit 256-bit `ymm`
code, a rule made for the frequency drop of early AVX-512 parts.  For kdsl's loops that halves
the work per instruction and, worse, a micro-kernel sized for 16 `zmm` accumulators then needs
32 `ymm` ones and spills them inside its FMA loop (measured on an Emerald Rapids core: matmul
2.1x, attention 1.4x, softmax 1.3x faster with 512-bit vectors, identical results).  So every
function of a module gets the attribute `"prefer-vector-width"` (what clang's
`-mprefer-vector-width` sets) from the table below.  `min-legal-vector-width` is left unset:
absent, it puts no limit on the legal vector types, which is what a 512-bit choice needs.

`choose(features, triple)` maps any CPU through `RULES` (first matching row wins); a row names
the LLVM features it needs and the profile they give.  Rationale of the rows:

- x86 with AVX-512F (and EVEX-512 not switched off, as on AVX10/256 parts): 512-bit vectors,
  32 registers (zmm0-31).
- x86 with AVX-512F but `-evex512`: 256-bit vectors, still 32 registers (ymm0-31 via EVEX).
- x86 with AVX2 or AVX: 256-bit, 16 registers (ymm0-15).
- x86 otherwise (SSE2 is baseline x86-64): 128-bit, 16 registers; LLVM's default width.
- AArch64 (NEON, also with SVE): LLVM's default width (no attribute; fixed 128-bit NEON or
  scalable SVE vectors are its call); blocks sized for 128-bit, 32 registers (v0-v31 / z0-z31).
- anything else: LLVM's default width; blocks for 128-bit, 16 registers.

`KDSL_LLVM_VECTOR_WIDTH` overrides the host's row: `auto` (default), `128`/`256`/`512`
(that preferred width, the host's register count), or `llvm` (no attribute and the
width-agnostic block table of kdsl/lowering/dot_cpu.py: LLVM's own choice, which is how
kdsl compiled before this table existed; handy for side-by-side measurements).
The chosen profile is part of the backend's `hash()`, so the disk cache never reuses code built
for another CPU or width.

Matrix units (`MATRIX_UNITS`, `matrix_unit`, `matrix_caps`): where LLVM's host features
include AMX (`amx-tile` with `amx-bf16` / `amx-int8`, Intel Sapphire Rapids and later) and
Linux grants the process the tile state (AMX's 8 KiB of tile registers are handed out per
process, on request: `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, Linux 5.16+), the
backend offers the lowering the capabilities "tile_dot", "tile_dot_bf16" and "tile_dot_int8":
bfloat16 and int8 dots as Loop IR `TileDot` blocks (kdsl/lowering/dot_tile.py) run on the tile
registers; without AMX but with AVX512-BF16 (Cooper Lake, Zen 4 and 5), "tile_dot" and
"tile_dot_bf16", run as `vdpbf16ps` register blocks (backends/llvm_tile_dot.py).
`KDSL_LLVM_MATRIX` chooses: `auto` (default: the best the host has), `none` (every dot on the
float32 micro-kernel, whose float sums are sequential fused multiply-adds), `amx` or
`avx512bf16` (that unit; an error where the CPU lacks it).  The unit is part of the backend's
`hash()` too.
"""

from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass
from functools import lru_cache

from llvmlite import ir

ENV = "KDSL_LLVM_VECTOR_WIDTH"


@dataclass(frozen=True)
class SimdProfile:
    """vector_bits: the width code is tuned for (float32 lanes = vector_bits // 32; 0: not
    chosen, the lowering's width-agnostic defaults); vector_regs: architectural vector
    registers (0: unknown); prefer: the `prefer-vector-width` given to LLVM (None: LLVM's
    default); rule: the name of the RULES row (or override) it came from; scalef: vectors
    are scaled by powers of two in one instruction (AVX-512's `vscalefps`), so float32
    `exp`/`exp2` end in `llvm.ldexp` rather than in integer exponent arithmetic
    (backends/llvm_math.py)."""

    vector_bits: int
    vector_regs: int
    prefer: int | None
    rule: str
    scalef: bool = False

    def fn_attrs(self) -> dict[str, str]:
        """String attributes for every function LLVM compiles under this profile."""
        return {} if self.prefer is None else {"prefer-vector-width": str(self.prefer)}

    def key(self) -> str:
        """Identifies the profile in cache keys."""
        return (f"simd={self.vector_bits}x{self.vector_regs},prefer={self.prefer},{self.rule}"
                + (",scalef" if self.scalef else ""))


# (name, architecture, features that must be on, features that must be off, profile)
# architecture: "x86", "arm" or "" (any); see the module docstring for the reasons.
RULES: tuple[tuple[str, str, frozenset[str], frozenset[str], SimdProfile], ...] = tuple(
    (name, arch, frozenset(on), frozenset(off),
     SimdProfile(bits, regs, prefer, name, "avx512f" in on))
    for name, arch, on, off, bits, regs, prefer in (
        ("avx512", "x86", {"avx512f"}, {"evex512-off"}, 512, 32, 512),
        ("avx512-256", "x86", {"avx512f", "evex512-off"}, (), 256, 32, 256),
        ("avx2", "x86", {"avx2"}, (), 256, 16, 256),
        ("avx", "x86", {"avx"}, (), 256, 16, 256),
        ("sse", "x86", (), (), 128, 16, None),
        ("neon", "arm", (), (), 128, 32, None),
        ("other", "", (), (), 128, 16, None),
    ))

_ARCH = {"x86_64": "x86", "i686": "x86", "i386": "x86", "amd64": "x86", "aarch64": "arm",
         "arm64": "arm"}


def parse_features(features: str) -> frozenset[str]:
    """The enabled names of an LLVM feature string ("+avx2,-avx512f,..."); an explicit
    "-evex512" shows up as "evex512-off" (EVEX-512 is on by default where AVX-512F is)."""
    on = set()
    for f in features.split(","):
        f = f.strip()
        if f.startswith("+"):
            on.add(f[1:])
        elif f == "-evex512":
            on.add("evex512-off")
    return frozenset(on)


def arch_of(triple: str, features: frozenset[str] = frozenset()) -> str:
    """ "x86", "arm" or "" from a target triple (or, without one, from the feature names)."""
    head = triple.split("-", 1)[0].lower()
    if head in _ARCH:
        return _ARCH[head]
    if head:
        return ""
    if features & {"sse2", "avx", "avx2", "avx512f"}:
        return "x86"
    if features & {"neon", "sve", "fp-armv8"}:
        return "arm"
    return ""


def choose(features: str, triple: str = "") -> SimdProfile:
    """The profile of a CPU with LLVM feature string `features` and target `triple`."""
    on = parse_features(features)
    arch = arch_of(triple, on)
    for _, row_arch, need, avoid, profile in RULES:
        if row_arch in ("", arch) and need <= on and not avoid & on:
            return profile
    raise AssertionError("RULES ends with a row that matches every CPU")


def override(profile: SimdProfile, value: str) -> SimdProfile:
    """`profile` changed by a KDSL_LLVM_VECTOR_WIDTH value (see the module docstring)."""
    value = value.strip().lower()
    if value in ("", "auto"):
        return profile
    if value == "llvm":
        return SimdProfile(0, 0, None, "llvm-default", profile.scalef)
    if value in ("128", "256", "512"):
        return SimdProfile(int(value), profile.vector_regs, int(value), f"forced-{value}",
                           profile.scalef)
    raise ValueError(f"{ENV}={value!r}: expected auto, llvm, 128, 256 or 512")


@lru_cache(maxsize=1)
def _host() -> SimdProfile:
    import llvmlite.binding as llvm

    return choose(llvm.get_host_cpu_features().flatten(), llvm.get_process_triple())


@lru_cache(maxsize=8)
def _profile(env: str) -> SimdProfile:
    return override(_host(), env)


def profile() -> SimdProfile:
    """The profile the llvm backend compiles for now: the host's row, or the override."""
    return _profile(os.environ.get(ENV, ""))


MATRIX_ENV = "KDSL_LLVM_MATRIX"


@dataclass(frozen=True)
class MatrixUnit:
    """A way to run Loop IR `TileDot` blocks: `name` (what KDSL_LLVM_MATRIX calls it),
    `kinds` -> the LLVM host features each kind needs (all of them), `grant`: the process must
    first be given the unit's state by the OS (AMX's tile registers); `auto_cpus`: prefixes of
    the LLVM CPU names `auto` picks the unit on (empty: every CPU with the features), where it
    is faster than the float32 micro-kernel."""

    name: str
    kinds: tuple[tuple[str, frozenset[str]], ...]
    grant: bool = False
    auto_cpus: tuple[str, ...] = ()


# Best first; the first unit with a kind the host has wins.
MATRIX_UNITS: tuple[MatrixUnit, ...] = (
    # AMX: 8 tile registers, `tdpbf16ps` / `tdpbssd` on 16 x 16 output tiles
    # (backends/llvm_tile_dot.py)
    MatrixUnit("amx", (("bf16", frozenset({"amx-tile", "amx-bf16"})),
                       ("int8", frozenset({"amx-tile", "amx-int8"}))), grant=True),
    # AVX512-BF16 without AMX: `vdpbf16ps`, 16 lanes of bfloat16 pairs per instruction
    # (backends/llvm_tile_dot.py).  Chosen by `auto` on AMD cores only (Zen 4 and 5 issue it
    # as fast as an FMA: twice the products): an Emerald Rapids core issues one every two
    # cycles, 106 GFLOP/s against its FMAs' 212 (measured in C), and a bfloat16 matmul on it
    # ran at 95 GFLOP/s against the micro-kernel's 139 (2048^3, one thread).
    MatrixUnit("avx512bf16", (("bf16", frozenset({"avx512f", "avx512bf16"})),),
               auto_cpus=("znver",)),
)
_SYS_ARCH_PRCTL = 158  # x86-64 Linux
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def unit_kinds(unit: MatrixUnit, features: str) -> tuple[str, ...]:
    """The TileDot kinds `unit` runs on a CPU with LLVM feature string `features`."""
    on = parse_features(features)
    if "evex512-off" in on:
        return ()  # (512-bit vectors off: AVX10/256 parts)
    return tuple(kind for kind, need in unit.kinds if need <= on)


def choose_unit(features: str, permitted: bool, want: str = "auto", cpu: str = ""
                ) -> tuple[str | None, tuple[str, ...]]:
    """(unit name, its kinds) for a CPU with LLVM feature string `features` and LLVM name
    `cpu`, in a process the OS grants (`permitted`) the tile state or not; `want` is a
    KDSL_LLVM_MATRIX value (auto, none, or a unit's name: that unit, ValueError where the CPU
    lacks it)."""
    if want == "none":
        return None, ()
    for unit in MATRIX_UNITS:
        if want not in ("auto", unit.name):
            continue
        if want == "auto" and unit.auto_cpus and not cpu.startswith(unit.auto_cpus):
            continue
        kinds = unit_kinds(unit, features) if permitted or not unit.grant else ()
        if kinds:
            return unit.name, kinds
        if want == unit.name:
            raise ValueError(f"{MATRIX_ENV}={want}: this CPU (or process) has no such unit")
    if want != "auto":
        names = ", ".join(["auto", "none", *(u.name for u in MATRIX_UNITS)])
        raise ValueError(f"{MATRIX_ENV}={want!r}: expected one of {names}")
    return None, ()


def matrix_units(features: str, permitted: bool, cpu: str = "") -> frozenset[str]:
    """The capabilities the best unit of a CPU with `features` (LLVM name `cpu`) gives the
    lowering: "tile_dot" plus "tile_dot_<kind>" per kind it runs (none without a unit)."""
    kinds = choose_unit(features, permitted, "auto", cpu)[1]
    return frozenset({"tile_dot", *(f"tile_dot_{k}" for k in kinds)}) if kinds else frozenset()


@lru_cache(maxsize=1)
def tile_state_permitted() -> bool:
    """Ask Linux, once per process, for AMX's tile state (its permission is per process and
    covers every thread); False where it refuses or this is not x86-64 Linux."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


@lru_cache(maxsize=8)
def _matrix(env: str) -> tuple[str | None, tuple[str, ...]]:
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features().flatten()
    # (the OS is asked for the tile state only on CPUs that have tiles)
    tiles = "+amx-tile" in features
    return choose_unit(features, tiles and tile_state_permitted(),
                       env.strip().lower() or "auto", llvm.get_host_cpu_name())


def matrix_unit() -> str | None:
    """The unit the llvm backend runs `TileDot` on now (None: none): the host's best, or the
    one KDSL_LLVM_MATRIX names."""
    return _matrix(os.environ.get(MATRIX_ENV, ""))[0]


def matrix_caps() -> frozenset[str]:
    """The capabilities of `matrix_unit()` (see `matrix_units`)."""
    kinds = _matrix(os.environ.get(MATRIX_ENV, ""))[1]
    return frozenset({"tile_dot", *(f"tile_dot_{k}" for k in kinds)}) if kinds else frozenset()


class _FnAttributes(ir.values.FunctionAttributes):
    """llvmlite's function attributes plus `"key"="value"` string attributes (llvmlite only
    knows the enum ones)."""

    def __init__(self, base: ir.values.FunctionAttributes, strings: dict[str, str]):
        super().__init__(sorted(base))
        self.alignstack = base.alignstack
        self.personality = base.personality
        self.strings = dict(strings)

    def __bool__(self) -> bool:  # llvmlite prints no attributes for an empty set
        return bool(self.strings) or super().__len__() > 0

    def _to_list(self, ret_type):
        return super()._to_list(ret_type) + [f'"{k}"="{v}"' for k, v in
                                             sorted(self.strings.items())]


def apply(module: ir.Module, prof: SimdProfile) -> None:
    """Give every function defined in `module` the profile's string attributes (all of them:
    always-inlined helpers and the kernel alike, so inlining never mixes preferences)."""
    attrs = prof.fn_attrs()
    if not attrs:
        return
    for fn in module.functions:
        if fn.blocks:
            fn.attributes = _FnAttributes(fn.attributes, attrs)


__all__ = ["ENV", "MATRIX_ENV", "MATRIX_UNITS", "RULES", "MatrixUnit", "SimdProfile", "apply",
           "choose", "choose_unit", "matrix_caps", "matrix_unit", "matrix_units", "override",
           "parse_features", "profile", "tile_state_permitted", "unit_kinds"]
