"""`kdsl bench`: a kernel timed over a sweep of sizes on each backend, with its GB/s, GFLOP/s
and the fraction of the backend's roofline it reaches; a table, JSON or a plot.

`NAME` is a library kernel (its inputs and costs from `kdsl.kernels.cases`, the sizes of
`DEFAULT_SWEEPS` unless `--sizes`); `FILE.py:KERNEL` defines `<KERNEL>_example_args(size)` and
optionally `<KERNEL>_cost(*args)` returning `(flops, bytes)`.  The default backends are the
available ones but the reference interpreter (too slow to time)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np

from kdsl.kernels.cases import CASES, DEFAULT_SWEEPS, itemsize, library_dtype, library_function
from kdsl.runtime.registry import measured_backends
from kdsl.term import Progress

from . import roofline
from .bench import do_bench
from .loader import load_kernel


def _workloads(target: str, sizes: list[str] | None, dtype: str
               ) -> list[tuple[str, Callable[[str], Any], float, float]]:
    """(size label, launch(backend), flops, bytes) per point of the sweep."""
    points = []
    if ".py:" in target:
        module, kernel, name = load_kernel(target, "kdsl bench")
        example = getattr(module, f"{name}_example_args")
        cost = getattr(module, f"{name}_cost", None)
        for size in sizes or [None]:
            pos, kw, grid = example(int(size)) if size is not None else example()
            pos, kw = tuple(pos), dict(kw)
            flops, nbytes = cost(*pos) if cost else (
                0.0, float(sum(a.nbytes for a in pos if isinstance(a, np.ndarray))))

            def launch(b, k=kernel, g=grid, a=pos, w=kw):
                return k[g](*a, backend=b, **w)
            points.append((str(size or "default"), launch, float(flops), float(nbytes)))
        return points
    if target not in CASES:
        raise SystemExit(f"kdsl bench: {target!r} is not a library kernel ({', '.join(CASES)})"
                         " or FILE.py:KERNEL")
    fn, _ = library_function(target)
    case = CASES[target]
    dtype = library_dtype(dtype)
    item = itemsize(dtype)
    for size in sizes or DEFAULT_SWEEPS.get(target, [None]):
        shape = case.sweep(int(size)) if size is not None else case.shape
        pos, kw = case.make(shape, dtype, np.random.default_rng(0))

        def launch(b, a=pos, w=kw):
            return fn(*a, backend=b, **w)
        points.append(("x".join(map(str, shape)), launch, case.flops(shape),
                       case.bytes(shape, item)))
    return points


def bench_cli(target: str, sizes: list[str] | None, backends: list[str] | None,
              dtype: str = "float32", rep: float = 100) -> tuple[list[dict], dict[str, dict]]:
    """Rows of `kdsl bench` (one per size and backend) and the roofline of each backend."""
    backends = backends or measured_backends()
    points = _workloads(target, sizes, dtype)
    roofs = {}
    for b in backends:
        roofs[b] = asdict(roofline.measure(b))
    rows = []
    with Progress(len(points) * len(backends), f"bench {target}") as bar:
        for label, launch, flops, nbytes in points:
            for b in backends:
                t = do_bench(lambda f=launch, be=b: f(be), backend=b, warmup=rep / 4, rep=rep)
                s = t.median * 1e-3
                gflops, gbs = flops / s / 1e9, nbytes / s / 1e9
                roof = roofs[b]
                if flops:
                    attain = min(roof["peak"], roof["bandwidth"] * flops / max(nbytes, 1.0))
                    frac = gflops / attain
                else:
                    frac = gbs / roof["bandwidth"]
                rows.append({"kernel": target, "size": label, "backend": b, "ms": t.median,
                             "ms_min": t.min, "ms_max": t.max, "clock": t.clock,
                             "launch_overhead_ms": t.launch_overhead, "gflops": gflops,
                             "gbs": gbs, "roofline_fraction": frac, "flops": flops,
                             "bytes": nbytes})
                bar.step(f"{label} {b}")
    return rows, roofs


def format_rows(rows: list[dict], roofs: dict[str, dict]) -> str:
    head = (f"{'size':<14} {'backend':<8} {'ms':>9} {'GB/s':>8} {'GFLOP/s':>9} {'roofline':>9}"
            f"  {'launch ms':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lo = r["launch_overhead_ms"]
        lines.append(f"{r['size']:<14} {r['backend']:<8} {r['ms']:9.4f} {r['gbs']:8.2f} "
                     f"{r['gflops']:9.2f} {100 * r['roofline_fraction']:8.1f}%  "
                     f"{'' if lo is None else f'{lo:9.4f}'}")
    lines.append("roofline: " + "; ".join(
        f"{b}: {v['bandwidth']:.1f} GB/s, {v['peak']:.1f} GFLOP/s" for b, v in roofs.items()))
    return "\n".join(lines)


def plot(rows: list[dict], roofs: dict[str, dict], path: str) -> None:
    """Throughput per backend over the sweep, with each backend's roof as a dashed line."""
    from kdsl.extras import require

    matplotlib = require("matplotlib", "kdsl bench --plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # GFLOP/s where some point is compute-bound on its backend's roofline, else GB/s
    compute = any(r["flops"] and r["flops"] / max(r["bytes"], 1.0)
                  >= roofs[r["backend"]]["peak"] / roofs[r["backend"]]["bandwidth"]
                  for r in rows)
    metric, unit = ("gflops", "GFLOP/s") if compute else ("gbs", "GB/s")
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    sizes = list(dict.fromkeys(r["size"] for r in rows))
    for i, b in enumerate(roofs):
        pts = [r for r in rows if r["backend"] == b]
        c = colors[i % len(colors)]
        ax.plot([sizes.index(r["size"]) for r in pts], [r[metric] for r in pts], "o-",
                color=c, label=b)
        roof = roofs[b]
        if compute:
            ys = [min(roof["peak"], roof["bandwidth"] * r["flops"] / max(r["bytes"], 1))
                  for r in pts]
        else:
            ys = [roof["bandwidth"]] * len(pts)
        ax.plot([sizes.index(r["size"]) for r in pts], ys, "--", color=c, alpha=0.7,
                label=f"{b} roofline")
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels(sizes, rotation=30 if max(map(len, sizes)) > 6 else 0)
    ax.set_xlabel("size")
    ax.set_ylabel(unit)
    ax.set_yscale("log")
    ax.set_title(f"{rows[0]['kernel'] if rows else ''}: throughput per backend")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


__all__ = ["bench_cli", "format_rows", "plot"]
