"""Differential check against Triton itself: where `triton` and `torch` are installed (the
optional `triton-ref` extra; CI does not need them), each kernel of kernels/*.py runs twice on
the same inputs: the original text under Triton's interpreter (TRITON_INTERPRET=1, torch CPU
tensors) and its mechanical port under kdsl (NumPy arrays, llvm backend).  Outputs must agree:
random bits exactly, float results within the float32 tolerance of their reduction length."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest

from kdsl.testing import assert_close

from .conftest import KERNELS

os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is decorated
torch = pytest.importorskip("torch")
pytest.importorskip("triton")
if tuple(int(p) for p in np.__version__.split(".")[:2]) >= (2, 4):
    # Triton 3.6's interpreter converts 1-element arrays with int(), an error since NumPy 2.4
    pytest.skip("Triton 3.6's interpreter needs NumPy < 2.4 (the `triton-ref` extra pins it)",
                allow_module_level=True)

RNG = np.random.default_rng(11)
_triton_modules: dict[str, Any] = {}


def triton_module(name: str) -> Any:
    if name not in _triton_modules:
        spec = importlib.util.spec_from_file_location(f"triton_ref_{name}",
                                                      KERNELS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        _triton_modules[name] = mod
    return _triton_modules[name]


@dataclass
class Case:
    module: str
    kernel: str
    grid: tuple
    make: Callable[[], tuple[list, dict]]  # -> (positional args, keyword args)
    outputs: tuple[int, ...]               # positions of the outputs among the args
    k: int = 1                             # reduction length for the tolerance
    exact: bool = False
    extra: dict = field(default_factory=dict)


def _f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _softmax():
    x = _f32(9, 100, scale=3)
    return [np.empty_like(x), x, 100, 100, 9, 100], {"BLOCK_SIZE": 128, "num_stages": 2}


def _layernorm():
    x, w, b = _f32(6, 300), _f32(300), _f32(300)
    return ([x, np.empty_like(x), w, b, np.empty(6, np.float32), np.empty(6, np.float32), 300,
             300, 1e-5], {"BLOCK_SIZE": 128})


def _dropout():
    x = _f32(500)
    return [x, np.empty_like(x), 500, 0.3, 1234], {"BLOCK_SIZE": 128}


def _random_bits():
    return [np.zeros(4 * 300, np.int32), 987654321, 300], {"BLOCK": 128}


def _swiglu():
    a, b = _f32(4, 100), _f32(4, 100)
    return [a, b, np.empty_like(a), 100], {"n_cols": 100, "BLOCK_SIZE": 128}


def _cumsum():
    x = RNG.integers(-50, 50, (3, 100)).astype(np.int32)
    return [x, np.zeros_like(x), 100, 100], {"BLOCK": 128, "REVERSE": False}


def _linear_scan():
    a, b = RNG.uniform(0.5, 1, 100).astype(np.float32), _f32(100)
    return [a, b, np.empty(100, np.float32), 100], {"BLOCK": 128}


def _argmax():
    x = _f32(6, 70)
    return [x, np.empty(6, np.float32), np.zeros(12, np.int32), 70, 70], {"BLOCK": 128}


def _welford():
    x = _f32(10, 150, scale=2) + 5
    return [x, np.empty(10, np.float32), np.empty(10, np.float32), 10, 150], \
        {"BLOCK_R": 4, "BLOCK_C": 32}


def _persistent_matmul():
    a, b = _f32(50, 70), _f32(70, 40)
    c = np.zeros((50, 40), np.float32)
    return ([a, b, c, None, 50, 40, 70, 70, 1, 40, 1, 40, 1],
            {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 2,
             "NUM_SMS": 3, "ACTIVATION": "leaky_relu"})


def _attn_ragged():
    q, k, v = _f32(45, 16), _f32(45, 16), _f32(45, 16)
    return [q, k, v, np.zeros((45, 16), np.float32), 0.25, 45, 16], \
        {"HEAD_DIM": 16, "BLOCK_M": 16, "BLOCK_N": 16}


def _split_join():
    x = _f32(16, 2)
    return [x, np.zeros(80, np.float32)], {"BLOCK": 16}


def _sort_gather():
    x = _f32(32)
    return [x, RNG.integers(0, 32, 32).astype(np.int32), np.zeros(96, np.float32)], \
        {"BLOCK": 32}


def _umulhi():
    a = RNG.integers(0, 2**31, 64).astype(np.int32)
    b = RNG.integers(0, 2**31, 64).astype(np.int32)
    return [a, b, np.zeros(64, np.int32)], {"BLOCK": 64}


# Not here: the kernels calling libdevice (rms_norm, geglu, the int8 quantiser), since Triton's
# interpreter has no libdevice (its functions return None there).
CASES = {
    "softmax": Case("softmax", "softmax_rows", (4,), _softmax, (0,), k=100),
    "layer_norm": Case("layernorm", "ln_forward", (6,), _layernorm, (1, 4, 5), k=300),
    "dropout": Case("dropout", "seeded_dropout", (4,), _dropout, (1,), exact=True),
    "randint4x": Case("dropout", "random_bits", (3,), _random_bits, (0,), exact=True),
    "swiglu": Case("llm", "swiglu_fwd", (4,), _swiglu, (2,), k=4),
    "cumsum": Case("scans", "row_cumsum", (3,), _cumsum, (1,), exact=True),
    "linear_scan": Case("scans", "linear_scan", (1,), _linear_scan, (2,), k=100),
    "argmax": Case("scans", "row_argmax", (6,), _argmax, (1, 2), exact=True),
    "welford": Case("scans", "welford_var_mean", (3,), _welford, (1, 2), k=150),
    "persistent_matmul": Case("matmul", "persistent_matmul", (3,), _persistent_matmul, (2,),
                              k=70),
    "attention_block_ptr": Case("attention", "attn_ragged", (3,), _attn_ragged, (3,), k=45),
    "split_join": Case("misc", "split_join", (1,), _split_join, (1,), exact=True),
    "sort_gather": Case("misc", "sort_gather", (1,), _sort_gather, (2,), exact=True),
    "umulhi": Case("misc", "umulhi_kernel", (1,), _umulhi, (2,), exact=True),
}


def _to_torch(a: Any) -> Any:
    return torch.from_numpy(a.copy()) if isinstance(a, np.ndarray) else a


@pytest.mark.parametrize("name", sorted(CASES))
def test_kdsl_matches_triton_interpreter(ported, name):
    case = CASES[name]
    args, kwargs = case.make()
    t_args = [_to_torch(a) for a in args]
    getattr(triton_module(case.module), case.kernel)[case.grid](*t_args, **kwargs)
    k_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    getattr(ported(case.module), case.kernel)[case.grid](*k_args, **kwargs, backend="llvm")
    for i in case.outputs:
        want = t_args[i].numpy()
        got = k_args[i]
        if case.exact:
            np.testing.assert_array_equal(got, want, err_msg=f"output {i}")
        else:
            assert_close(got, want.astype(np.float64), k=max(case.k, 2) * 4,
                         what=f"output {i} vs Triton")
