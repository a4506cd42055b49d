"""The kdsl kernel library for GenAI inference: plain functions over arrays that validate
their inputs, pick a configuration (kernels/configs.py) and launch kdsl kernels.

Each accepts NumPy arrays or the backend's device arrays (CuPy for cuda, PyOpenCL arrays for
opencl; the result is the same kind of array) and `backend=None` (chosen as for kernel
launches: from the arrays, else KDSL_BACKEND, else llvm).  bfloat16 is passed as
`kdsl.runtime.binding.bfloat16_view(uint16_bits)` or as an ml_dtypes array.  float64
references with the same signatures: `kdsl.kernels.reference`.  See docs/kernels.md.
"""

from __future__ import annotations

from . import reference
from .attention import attention, decode_attention
from .matmul import matmul
from .mlp import mlp
from .norms import layer_norm, rms_norm
from .quant import quant_matmul
from .softmax import softmax

__all__ = [
           "attention",
           "decode_attention",
           "layer_norm",
           "matmul",
           "mlp",
           "quant_matmul",
           "reference",
           "rms_norm",
           "softmax",
]
