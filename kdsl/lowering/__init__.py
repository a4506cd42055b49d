"""The lowering: Tile IR -> Loop IR, one for every backend, driven by a `Target`.

`lower(fn, target)` turns an optimised Tile IR function into the `loop.Kernel` one program
instance runs.  The driver (`lowerer.py`: the `Lowerer`, its fusion groups and value storage)
hands each op that is not element-wise to the module of its concern, through the interface
written in `context.py` (`LoweringContext`, docs/ir.md "The lowering's interface"):

  elementwise.py  the element-wise op table (16-bit rounding, C division, shifts, ...)
  fp8.py          8-bit float conversions and the loads and stores of their codes
  index.py        index arithmetic (flatten, unflatten, broadcast and transpose sources)
  reduce.py       reductions          scan.py     scans
  gather.py       slice, gather, histogram
  dot.py          `dot` strategies (dot_cpu.py micro-kernel, dot_mma.py tensor cores)
  vector.py       vector accesses     control.py  for / while / if
  debug.py        print, barrier, breakpoint
  caps.py         what a target cannot run (a CompilationError before lowering)
  analysis.py     aliases, users, operands read at any index

then the Loop IR passes: `legalize.py` (decomposes the math a target lacks into ops it has),
`hoist_barriers.py` (no barrier inside a conditional), on one-thread targets
`mask_version.py` (an unmasked copy of a loop nest whose bound tests a guard proves true) and
on targets with `cp_async` `async_ring.py` (a loop's copies in a ring of `num_stages` slots).
"""

from __future__ import annotations

from .lowerer import Lowerer, lower

__all__ = ["Lowerer", "lower"]
