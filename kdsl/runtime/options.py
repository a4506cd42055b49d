"""Launch options: the keywords `kernel[grid](...)` and `kernel.compile(...)` accept besides the
kernel's own parameters.

Every option Triton's CUDA and HIP backends accept at launch is accepted, so that a Triton
launch (or a `triton.Config`'s options) runs unchanged.  An option is one of:

  "key"      changes the compiled code: part of the specialisation key, and handed to the
             compiler as the `CompileOptions` field of the same name (`num_stages`, `maxnreg`
             -> the CUDA kernel's `__maxnreg__`; kdsl/compile_options.py);
  "ignored"  accepted and checked for a sensible type, with no effect (kdsl has no such
             mechanism, or it is always on/off; docs/language.md "Launching" says which).

`num_warps`, `backend`, `check`, `poison` and `fast_math` are kdsl's own launch keywords
(`kdsl/runtime/jit.py`); they are not in this table.

A kernel parameter named like a Triton option (`num_warps: kd.constexpr`) takes the keyword
AND the option takes its value, as in Triton (where the options are parsed from all the
keywords).  kdsl's own keywords (`backend`, `check`, `poison`, `fast_math`) go to a parameter
of that name only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: kdsl's own launch keywords: a kernel parameter of the same name takes the keyword instead
KDSL_KEYWORDS = ("backend", "check", "poison", "fast_math")
#: Triton's names that kdsl's launcher takes as explicit keywords (they are in every key)
EXPLICIT = ("num_warps", "num_stages")

DEFAULT_NUM_STAGES = 3  # Triton's CUDA default


def _int_at_least(lo: int) -> Callable[[str, Any], Any]:
    def check(name: str, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name}: expected an int >= {lo}, got {v!r}")
        return v
    return check


def _optional_int(name: str, v: Any) -> Any:
    return None if v is None else _int_at_least(1)(name, v)


def _bool(name: str, v: Any) -> Any:
    if not isinstance(v, (bool, int)) and v is not None:
        raise ValueError(f"{name}: expected a bool, got {v!r}")
    return v


def _any(name: str, v: Any) -> Any:
    return v


@dataclass(frozen=True)
class Option:
    default: Any
    effect: str  # "key" or "ignored"
    check: Callable[[str, Any], Any] = _any


#: name -> Option, for every launch option of Triton's CUDA (CUDAOptions) and HIP backends
OPTIONS: dict[str, Option] = {
    "num_stages": Option(DEFAULT_NUM_STAGES, "key", _int_at_least(0)),
    "maxnreg": Option(None, "key", _optional_int),
    "num_ctas": Option(1, "ignored", _int_at_least(1)),
    "warp_size": Option(32, "ignored", _int_at_least(1)),
    "enable_fp_fusion": Option(True, "ignored", _bool),
    "enable_reflect_ftz": Option(True, "ignored", _bool),
    "launch_cooperative_grid": Option(False, "ignored", _bool),
    "launch_pdl": Option(False, "ignored", _bool),
    "sanitize_overflow": Option(True, "ignored", _bool),
    "extern_libs": Option(None, "ignored"),
    "arch": Option(None, "ignored"),
    "ptx_version": Option(None, "ignored"),
    "ptx_options": Option(None, "ignored"),
    "ir_override": Option(None, "ignored"),
    "supported_fp8_dtypes": Option(None, "ignored"),
    "deprecated_fp8_dot_operand_dtypes": Option(None, "ignored"),
    "default_dot_input_precision": Option(None, "ignored"),
    "allowed_dot_input_precisions": Option(None, "ignored"),
    "max_num_imprecise_acc_default": Option(None, "ignored"),
    "backend_name": Option(None, "ignored"),
    "instrumentation_mode": Option("", "ignored"),
    # Triton's HIP backend
    "waves_per_eu": Option(0, "ignored"),
    "matrix_instr_nonkdim": Option(0, "ignored"),
    "kpack": Option(1, "ignored"),
    "allow_flush_denorm": Option(False, "ignored", _bool),
    "schedule_hint": Option("none", "ignored"),
}

#: the options in the specialisation key besides num_warps/num_stages, in key order
KEYED = tuple(n for n, o in OPTIONS.items() if o.effect == "key" and n not in EXPLICIT)


def check_num_stages(v: Any) -> int:
    return OPTIONS["num_stages"].check("num_stages", v)


def parse(options: dict[str, Any]) -> dict[str, Any]:
    """Check the launch options given as keywords; returns those that change the compiled
    code and differ from their default (name -> value; the specialisation key's part).
    Raises TypeError for an unknown name."""
    out = {}
    for name, v in options.items():
        opt = OPTIONS.get(name)
        if opt is None:
            raise TypeError(f"unknown keyword argument {name!r}")
        v = opt.check(name, v)
        if opt.effect == "key" and v != opt.default:
            out[name] = v
    return {n: out[n] for n in ("num_stages", *KEYED) if n in out}


__all__ = ["DEFAULT_NUM_STAGES", "EXPLICIT", "KDSL_KEYWORDS", "KEYED", "OPTIONS", "Option",
           "check_num_stages", "parse"]
