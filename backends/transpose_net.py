"""The shuffle network of Loop IR `Transpose` (an n x n block copied transposed), shared by the
backends that emit it as vector code (llvm_shuffle.py; the OpenCL dialect through c_like.py).

Each stage swaps one bit of the row index with the same bit of the column index: for rows p
(bit t clear) and p | 2**t, the stage's outputs are

    lo[j] = p[j]          if bit t of j is clear, else (p | 2**t)[j - 2**t]
    hi[j] = p[j + 2**t]   if bit t of j is clear, else (p | 2**t)[j]

and after every bit has been swapped (log2(n) stages of n two-vector shuffles), row j holds
column j.  A mask index >= n takes the second vector's element index - n.
"""

from __future__ import annotations


def stage_masks(n: int, bit: int) -> tuple[list[int], list[int]]:
    """Shuffle masks of the two outputs of one stage (indices >= n take the second vector)."""
    lo = [j if not j & bit else n + j - bit for j in range(n)]
    hi = [j + bit if not j & bit else n + j for j in range(n)]
    return lo, hi


def stages(n: int) -> list[tuple[int, list[int], list[int]]]:
    """(bit, lo mask, hi mask) of each stage, in order."""
    out, bit = [], 1
    while bit < n:
        out.append((bit, *stage_masks(n, bit)))
        bit *= 2
    return out
