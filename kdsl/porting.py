"""The mechanical port of a Triton source file to kdsl (`kdsl port FILE`, docs/porting.md).

The rename is the whole port: `import triton.language as tl` -> `import kdsl as kd`,
`tl.X` -> `kd.X`, `triton.X` -> `kd.X` (`triton.jit`, `triton.cdiv`, `triton.Config`,
`triton.autotune`, `triton.heuristics`, `triton.next_power_of_2`), and the module paths
`triton.language.extra...`/`triton.language.math` -> `kdsl.language...`.  Nothing else is
rewritten: a kernel that runs after this runs after "renaming tl. to kd."."""

from __future__ import annotations

import re

#: (pattern, replacement), applied in order to the whole text
RULES: tuple[tuple[str, str], ...] = (
    (r"^(\s*)import triton\.language as tl\b", r"\1import kdsl as kd"),
    (r"^(\s*)import triton\b(?!\.)", r"\1import kdsl as kd"),
    (r"\bfrom triton\.language\b", "from kdsl.language"),
    (r"\bfrom triton import\b", "from kdsl import"),
    (r"\btriton\.language\.", "kdsl.language."),
    (r"\btl\.", "kd."),
    (r"\btriton\.", "kd."),
)


def port_source(source: str) -> str:
    """kdsl source text of a Triton source text."""
    for pattern, repl in RULES:
        source = re.sub(pattern, repl, source, flags=re.MULTILINE)
    return source
