"""The mechanical port of a Triton source file to kdsl, as docs/porting.md describes it:
`import triton.language as tl` -> `import kdsl as kd`, `tl.` -> `kd.`, `triton.` -> `kd.`,
and the `triton.language.*` module paths -> `kdsl.language.*`. Nothing else is changed, so a
kernel that runs after this rename runs "after renaming tl. to kd."."""

from __future__ import annotations

import re

# (pattern, replacement), applied in order.
RULES: tuple[tuple[str, str], ...] = (
    (r"^import triton\.language as tl$", "import kdsl as kd"),
    (r"^import triton$", "import kdsl as kd"),
    (r"\bfrom triton\.language\b", "from kdsl.language"),
    (r"\bfrom triton import\b", "from kdsl import"),
    (r"\btriton\.language\.", "kdsl.language."),
    (r"\btl\.", "kd."),
    (r"\btriton\.", "kd."),
)


def port(source: str) -> str:
    """kdsl source of a Triton source text."""
    for pattern, repl in RULES:
        source = re.sub(pattern, repl, source, flags=re.MULTILINE)
    return source
