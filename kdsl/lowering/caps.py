"""What a target cannot run, found before lowering: a `CompilationError` at the kernel line,
naming the backends that can.

Two kinds of gaps, both listed in docs/language.md ("Backend support"):

- ops only some targets compute (`NEEDS_CAP` in elementwise.py: the Bessel functions,
  absent from OpenCL C), checked op by op while lowering;
- value types a device lacks (`TYPE_NEEDS` here: float64 needs double precision, which an
  OpenCL device without `cl_khr_fp64` does not have; its `Target.missing` says so).  Without
  the check such a kernel would compile and then fail in the device compiler at its first
  launch, naming no line.
"""

from __future__ import annotations

from kdsl.errors import CompilationError
from kdsl.ir import tile
from kdsl.target import Target

#: dtype name -> (the capability it needs, the backends that have it)
TYPE_NEEDS: dict[str, tuple[str, str]] = {
    "float64": ("fp64", "interp, llvm, cuda, and opencl on a device with cl_khr_fp64"),
}


def _elem_names(t: object) -> set[str]:
    elem = getattr(t, "elem", None)
    pointee = getattr(elem, "pointee", None)
    return {getattr(x, "name", "") for x in (elem, pointee) if x is not None}


def check_target(fn: tile.Function, target: Target) -> None:
    """Raise at the first op (or runtime parameter) of `fn` whose values have a type that
    `target` lacks the capability for."""
    lacking = {name: need for name, need in TYPE_NEEDS.items() if need[0] in target.missing}
    if not lacking:
        return

    def fail(name: str, loc: tile.Loc | None) -> None:
        raise CompilationError(f"{name} values need the {lacking[name][0]} capability, which "
                               f"this {target.backend} device lacks (backends that have it: "
                               f"{lacking[name][1]})", loc, fn.name)

    for p in fn.runtime_params:
        for name in _elem_names(p.type) & set(lacking):
            fail(name, fn.loc)
    for op in fn.walk():
        for v in (*op.operands, *op.results):
            for name in _elem_names(v.type) & set(lacking):
                fail(name, op.loc)
