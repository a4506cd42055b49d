"""The kdsl kernel library for GenAI inference: plain functions over arrays that validate
their inputs, pick a configuration (kernels/configs.py) and launch kdsl kernels.

Each accepts NumPy arrays or the backend's device arrays (CuPy for cuda, PyOpenCL arrays for
opencl; the result is the same kind of array) and `backend=None` (chosen as for kernel
launches: from the arrays, else KDSL_BACKEND, else llvm).  bfloat16 is passed as
`kdsl.runtime.binding.bfloat16_view(uint16_bits)`, as an ml_dtypes array or as a torch
tensor; torch tensors come back as torch tensors.  `softmax`, `layer_norm`, `rms_norm` and
`attention` have gradient kernels `<name>_backward(dy, *forward_args)`.  float64 references
with the same signatures: `kdsl.kernels.reference`.  See docs/kernels.md and docs/torch.md.
"""

from __future__ import annotations

from . import reference
from .attention import attention, decode_attention
from .attention_backward import attention_backward
from .matmul import matmul
from .mlp import mlp
from .norms import layer_norm, rms_norm
from .norms_backward import layer_norm_backward, rms_norm_backward
from .quant import quant_matmul
from .softmax import softmax, softmax_backward
from .sparse import block_sparse_matmul, semi_structured_matmul, sparsify_2_4

__all__ = [
           "attention",
           "attention_backward",
           "block_sparse_matmul",
           "decode_attention",
           "layer_norm",
           "layer_norm_backward",
           "matmul",
           "mlp",
           "quant_matmul",
           "reference",
           "rms_norm",
           "rms_norm_backward",
           "semi_structured_matmul",
           "softmax",
           "softmax_backward",
           "sparsify_2_4",
]
