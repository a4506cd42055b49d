"""`@kd.autotune`: pick the fastest correct configuration of a kernel, per key, with a disk cache.

    @kd.autotune(configs=[kd.Config({"BLOCK": 128}, num_warps=4), kd.Config({"BLOCK": 1024})],
                 key=["n"])
    @kd.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: kd.constexpr): ...

    add[lambda meta: (kd.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    add.best_config

As in Triton: `key` names arguments whose values select the tuning entry (an array contributes its
shape and dtype), the grid callable receives the chosen config's kwargs, and `prune_configs_by`
is a dict with `early_config_prune(configs, named_args, **kwargs) -> configs` and/or
`perf_model(**named_args, **config.kwargs, num_warps=...) -> estimated time` with `top_k`
(a count, or a fraction of the configs); a bare callable is an `early_config_prune`.

`reset_to_zero` (names of arrays zeroed before each timed run, and before the launch that
follows a tuning), `restore_value` (names of arrays restored after each timed run), and the
`pre_hook(named_args, reset_only=False)` / `post_hook(named_args, exception)` that replace them,
behave as in Triton; `do_bench(fn, quantiles)` replaces the timer.  `configs_timings` maps each
config of the last tuning to its [median, 20th, 80th percentile] ms (inf for a discarded one),
`bench_time` is the tuning's duration, and `KDSL_PRINT_AUTOTUNING=1` prints each config's
outcome and the choice on stdout (Triton's `TRITON_PRINT_AUTOTUNING`).

Unlike Triton, a configuration must also be right: each candidate runs on fresh copies of the
array arguments (tuning never writes the caller's arrays) and its outputs after one launch are
checked against a private copy of the first configuration's (or against `reference(*args)`,
which returns the expected outputs as for `kd.testing.compare`) within
`kdsl.testing.tolerance(dtype, tolerance_k, tolerance_acc)` (default: a float32 accumulation of
1024 terms, then the output's rounding); one that disagrees is discarded, and `timings` says
why (one that fails to compile or run too: `errors` keeps each full message, and all of them are
shown when no config is left).  Timings (and verdicts) are cached on disk per (kernel identity,
backend, device, compiler build, key values) and per config, so a new config is timed alone and
other processes reuse the rest: `$KDSL_CACHE_DIR/autotune/<hash>.json`.  `KDSL_AUTOTUNE=0` skips tuning (the
first config).  A progress bar on stderr shows the tuning.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def enabled() -> bool:
    """False when `KDSL_AUTOTUNE` is 0/false/off/no: every autotuner uses its first config."""
    return os.environ.get("KDSL_AUTOTUNE", "1").strip().lower() not in ("0", "false", "off", "no")


def print_autotuning() -> bool:
    """True when `KDSL_PRINT_AUTOTUNING` is 1/true/on/yes (Triton's TRITON_PRINT_AUTOTUNING)."""
    return os.environ.get("KDSL_PRINT_AUTOTUNING", "").strip().lower() in ("1", "true", "on",
                                                                            "yes")


class Config:
    """Meta-parameters of one candidate: constexpr `kwargs` and launch options, with
    `triton.Config`'s arguments (`num_stages` is part of the specialisation, `num_ctas`,
    `maxnreg` and `ir_override` are launch options: docs/language.md "Launching");
    `pre_hook(args)` runs before each launch with this config."""

    def __init__(self, kwargs: dict[str, Any], num_warps: int = 4, num_stages: int = 3,
                 num_ctas: int = 1, maxnreg: int | None = None, pre_hook: Callable | None = None,
                 ir_override: str | None = None):
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_ctas = num_ctas
        self.maxnreg = maxnreg
        self.pre_hook = pre_hook
        self.ir_override = ir_override

    def key(self) -> str:
        """Stable text identifying the config (the per-config disk-cache key; options at
        their default values are left out, so the text of older configs is unchanged)."""
        kw = ", ".join(f"{k}: {self.kwargs[k]!r}" for k in sorted(self.kwargs))
        extra = "".join(f" {k}={v!r}" for k, v in self.launch_options().items()
                        if k != "num_warps" and v != _CONFIG_DEFAULTS.get(k))
        return f"{{{kw}}} num_warps={self.num_warps}{extra}"

    def launch_options(self) -> dict[str, Any]:
        """The launch options of the config (None ones left out), as `all_kwargs` in Triton."""
        opts = {"num_warps": self.num_warps, "num_ctas": self.num_ctas,
                "num_stages": self.num_stages, "maxnreg": self.maxnreg,
                "ir_override": self.ir_override}
        return {k: v for k, v in opts.items() if v is not None}

    def all_kwargs(self) -> dict[str, Any]:
        return {**self.kwargs, **self.launch_options()}

    def __repr__(self) -> str:
        return f"Config({self.key()})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())


_CONFIG_DEFAULTS = {"num_stages": 3, "num_ctas": 1}


def _key_part(v: Any) -> Any:
    shape = getattr(v, "shape", None)
    if shape is not None and getattr(v, "dtype", None) is not None and np.ndim(v) > 0:
        return (tuple(int(s) for s in shape), str(v.dtype))
    return v


def _copy(a: Any) -> Any:
    from kdsl.runtime.dtype_views import DTypeView
    from kdsl.runtime.views import copy_like  # same strides: the kernel's are the original's
    if isinstance(a, DTypeView):  # bfloat16 / fp8 bits
        return DTypeView(copy_like(a.array), a.dtype)
    return copy_like(a)


def _host(a: Any) -> np.ndarray:
    """A private host copy of an array (a DTypeView's bits)."""
    a = getattr(a, "array", a) if type(a).__name__ == "DTypeView" else a
    return np.array(a.get()) if hasattr(a, "get") and not isinstance(a, np.ndarray) \
        else np.array(a)


def _is_array(v: Any) -> bool:
    v = getattr(v, "array", v) if type(v).__name__ == "DTypeView" else v
    return getattr(v, "shape", None) is not None and np.ndim(v) > 0


def _zero(a: Any) -> None:
    """Zero an array in place (NumPy, CuPy, PyOpenCL, torch, a DTypeView's bits)."""
    a = getattr(a, "array", a) if type(a).__name__ == "DTypeView" else a
    if hasattr(a, "zero_"):
        a.zero_()
    else:
        a.fill(0)


def _restore(dst: Any, src: Any) -> None:
    """Copy `src` (a `_copy` of `dst`) back into `dst` in place."""
    if type(dst).__name__ == "DTypeView":
        dst, src = dst.array, src.array
    if hasattr(dst, "copy_"):
        dst.copy_(src)
    elif isinstance(dst, np.ndarray):
        np.copyto(dst, src)
    else:  # device arrays
        dst.set(src.get())


def _failure(e: Exception) -> str:
    """One line for a config that raised: the message, then where (a CompilationError's kernel
    line), e.g. "CompilationError: ... [kernel.py:12: x = a + b]"."""
    loc = getattr(e, "loc", None)
    msg = getattr(e, "msg", None) or str(e)
    line = [t for t in str(msg).splitlines() if t.strip()] or [""]
    text = f"{type(e).__name__}: {line[-1].strip()[:160]}"
    if loc is not None and getattr(loc, "line", 0):
        src = f": {loc.text.strip()}" if getattr(loc, "text", "") else ""
        text += f" [{os.path.basename(str(loc.file))}:{loc.line}{src}]"
    return text


class Autotuner:
    """The object `@kd.autotune` returns: launch it like the kernel it wraps."""

    def __init__(self, fn: Any, configs: Sequence[Config], key: Sequence[str],
                 prune_configs_by: dict | Callable | None = None,
                 reference: Callable | None = None, warmup: float = 5, rep: float = 25,
                 tolerance_k: int = 1024, reset_to_zero: Sequence[str] | None = None,
                 restore_value: Sequence[str] | None = None, pre_hook: Callable | None = None,
                 post_hook: Callable | None = None, do_bench: Callable | None = None,
                 tolerance_acc: str | None = "float32"):
        if not hasattr(fn, "signature") or not hasattr(fn, "run"):
            raise TypeError("@kd.autotune goes above @kd.jit")
        if not configs:
            raise ValueError("@kd.autotune needs at least one Config")
        self.fn = fn
        self.signature = fn.signature
        self.arg_names = list(fn.signature.names)
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.configs = list(configs)
        self.keys = list(key)
        unknown = [k for k in self.keys if k not in fn.signature.names]
        if unknown:
            raise ValueError(f"autotune key {unknown} not among {self.__name__}'s arguments "
                             f"{fn.signature.names}")
        if callable(prune_configs_by):
            prune_configs_by = {"early_config_prune": prune_configs_by}
        self.prune = dict(prune_configs_by or {})
        self.reference = reference
        self.warmup, self.rep, self.tolerance_k = warmup, rep, tolerance_k
        self.tolerance_acc = tolerance_acc
        self.reset_to_zero = list(reset_to_zero or [])
        self.restore_value = list(restore_value or [])
        for what, names in (("reset_to_zero", self.reset_to_zero),
                            ("restore_value", self.restore_value)):
            bad = [n for n in names if n not in fn.signature.names]
            if bad:
                raise ValueError(f"autotune {what} {bad} not among {self.__name__}'s arguments "
                                 f"{fn.signature.names}")
        # Triton's hooks: a given pre_hook/post_hook replaces the reset/restore ones
        self.pre_hook = pre_hook or self._reset_and_snapshot
        self.post_hook = post_hook or self._restore_snapshot
        self._snapshots: dict[str, Any] = {}
        self._dtypes: dict[str, str] = {}  # outputs read through a DTypeView (bfloat16 bits)
        self._do_bench = do_bench
        #: tuning key -> chosen Config
        self.cache: dict[tuple, Config] = {}
        #: the last tuning: config key -> milliseconds, or the reason it was discarded
        self.timings: dict[str, float | str] = {}
        #: the last tuning: Config -> [median, p20, p80] ms (inf: discarded), as in Triton
        self.configs_timings: dict[Config, list[float]] = {}
        #: the last tuning: config key -> the full error of a config that failed
        self.errors: dict[str, str] = {}
        self.bench_time = 0.0  # seconds the last tuning took
        self.best_config: Config | None = None

    def __repr__(self) -> str:
        return f"<Autotuner of {self.fn!r}, {len(self.configs)} configs>"

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    # -- launch

    def run(self, *args: Any, grid: Any, backend: str | None = None, **kwargs: Any) -> Any:
        backend = self._backend(args, kwargs, backend)
        named = self._named(args, kwargs)
        tkey = (backend, *(_key_part(named[k]) for k in self.keys),
                *(str(v.dtype) for v in named.values() if hasattr(v, "dtype") and np.ndim(v)))
        cfg = self.cache.get(tkey)
        if cfg is None:
            if not enabled():
                cfg = self.configs[0]
            else:
                cfg = self._tune(args, kwargs, grid, backend, named, tkey)
                # as Triton: the arrays to reset start the launch after a tuning at zero
                self.pre_hook({**named, **cfg.all_kwargs()}, reset_only=True)
            self.cache[tkey] = cfg
        self.best_config = cfg
        if cfg.pre_hook is not None:
            cfg.pre_hook({**named, **cfg.all_kwargs()})
        return self.fn.run(*args, grid=grid, backend=backend, **kwargs, **cfg.all_kwargs())

    def _backend(self, args: tuple, kwargs: dict, backend: str | None) -> str:
        if backend:
            return backend
        from kdsl.runtime.registry import default_backend, owner_of
        for a in (*args, *kwargs.values()):
            if getattr(a, "shape", None) is not None and not isinstance(a, np.ndarray):
                own = owner_of(a)
                if own:
                    return own
        return getattr(self.fn, "default_backend", None) or default_backend()

    def _named(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        named = dict(zip(self.fn.signature.names, args))
        named.update(kwargs)
        return named

    # -- hooks (Triton's defaults for reset_to_zero / restore_value)

    def _reset_and_snapshot(self, named: dict[str, Any], reset_only: bool = False) -> None:
        for n in self.reset_to_zero:
            _zero(named[n])
        if not reset_only:
            self._snapshots = {n: _copy(named[n]) for n in self.restore_value}

    def _restore_snapshot(self, named: dict[str, Any], exception: Exception | None) -> None:
        for n, snap in self._snapshots.items():
            _restore(named[n], snap)
        self._snapshots = {}

    # -- tuning

    def prune_configs(self, named: dict[str, Any], kwargs: dict[str, Any]) -> list[Config]:
        configs = list(self.configs)
        early = self.prune.get("early_config_prune")
        if early is not None:
            configs = list(early(configs, named, **kwargs)) or configs[:1]
        model = self.prune.get("perf_model")
        if model is not None:
            top_k = self.prune.get("top_k", len(configs))
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = max(1, int(len(configs) * top_k))
            est = {c: model(**{**named, **c.all_kwargs()}) for c in configs}
            configs = sorted(configs, key=lambda c: est[c])[:int(top_k)]
        return configs

    def _cache_path(self, backend: str, tkey: tuple) -> Path:
        from kdsl.backends import get_backend
        from kdsl.runtime.cache import cache_dir, compiler_fingerprint
        h = hashlib.sha256()
        # (the compiler's own code too: the timings belong to the code that was timed, and a
        # lowering change can reorder the configurations)
        for part in (_CACHE_VERSION, self.fn.identity(), backend, get_backend(backend).hash(),
                     compiler_fingerprint(), repr(tkey)):
            h.update(part.encode())
            h.update(b"\0")
        return cache_dir() / "autotune" / f"{h.hexdigest()}.json"

    def _tune(self, args: tuple, kwargs: dict, grid: Any, backend: str,
              named: dict[str, Any], tkey: tuple) -> Config:
        from .term import Progress

        t_start = time.perf_counter()
        configs = self.prune_configs(named, kwargs)
        path = self._cache_path(backend, tkey)
        stored = _read_json(path)
        expected: dict[str, np.ndarray] | None = None
        timings: dict[str, float | str] = {}
        quantiles: dict[str, list[float]] = {}
        self.errors = {}
        verbose = print_autotuning()
        label = f"autotune {self.__name__}"
        with Progress(len(configs), label) as bar:
            for i, cfg in enumerate(configs):
                k = cfg.key()
                if verbose:
                    print(f"Autotuning kernel {self.__name__} with config {cfg}")
                if k in stored:
                    timings[k], q = _from_disk(stored[k])
                    if q:
                        quantiles[k] = q
                    bar.step(f"{k} (cached)")
                    self._report(verbose, timings[k], "(cached)")
                    continue
                copies = tuple(_copy(a) for a in args)
                ckw = {n: _copy(v) for n, v in kwargs.items()}

                def launch(c=cfg, a=copies, kw=ckw, capture=None):
                    full = {**self._named(a, kw), **c.all_kwargs()}
                    if c.pre_hook is not None:
                        c.pre_hook(full)
                    self.pre_hook(full)
                    try:
                        self.fn.run(*a, grid=grid, backend=backend, **kw, **c.all_kwargs())
                        if capture is not None:  # the outputs of this launch, before a restore
                            capture.update(self._outputs(a, kw))
                    except Exception as e:
                        self.post_hook(full, exception=e)
                        raise
                    self.post_hook(full, exception=None)
                outs: dict[str, np.ndarray] = {}
                try:
                    launch(capture=outs)
                except Exception as e:  # a config that cannot compile or run is discarded
                    timings[k] = f"failed: {_failure(e)}"
                    self.errors[k] = f"{type(e).__name__}: {e}"
                    bar.step(f"{k} failed")
                    self._report(verbose, timings[k], self.errors[k])
                    continue
                if expected is None:
                    expected = self._expected(args, kwargs, outs, cfg)
                why = self._disagrees(outs, expected)
                if why:
                    timings[k] = f"wrong: {why}"
                    bar.step(f"{k} wrong")
                else:
                    quantiles[k] = self._bench(launch, backend)
                    timings[k] = quantiles[k][0]
                    bar.step(f"{k} {timings[k]:.3f} ms")
                self._report(verbose, timings[k])
                stored[k] = quantiles.get(k, timings[k])
        _merge_json(path, {k: v for k, v in stored.items() if k in timings
                           and not (isinstance(v, str) and v.startswith("failed"))})
        self.timings = timings
        inf = [math.inf] * 3
        self.configs_timings = {c: quantiles.get(c.key(), inf) for c in configs}
        self.bench_time = time.perf_counter() - t_start
        ok = [c for c in configs if isinstance(timings.get(c.key()), (int, float))]
        if not ok:
            detail = []
            for c in configs:
                text = self.errors.get(c.key()) or str(timings.get(c.key()))
                detail.append(f"{c.key()}:\n" + "\n".join("    " + t
                                                           for t in text.splitlines()))
            raise RuntimeError(f"autotune {self.__name__}: no correct config of "
                               f"{len(configs)}:\n" + "\n".join(detail))
        best = min(ok, key=lambda c: timings[c.key()])
        if verbose:
            print(f"kdsl autotuning for function {self.__name__},\nwith key as {tkey},\n"
                  f"finished after {self.bench_time:.2f}s,\nbest config selected: {best};")
        return best

    def _bench(self, launch: Callable[[], Any], backend: str) -> list[float]:
        """[median, p20, p80] milliseconds of `launch` (a given `do_bench(fn, quantiles)` as in
        Triton, else kdsl's)."""
        if self._do_bench is not None:
            t = self._do_bench(launch, quantiles=(0.5, 0.2, 0.8))
            t = [float(x) for x in (t if isinstance(t, (list, tuple)) else [t] * 3)]
            return (t + t[-1:] * 3)[:3]
        from .tools.bench import do_bench
        t = do_bench(launch, backend=backend, warmup=self.warmup, rep=self.rep, overhead=False)
        return [t.median, t.p20, t.p80]

    @staticmethod
    def _report(verbose: bool, outcome: float | str, detail: str = "") -> None:
        if not verbose:
            return
        text = f"{outcome:.4f} ms" if isinstance(outcome, (int, float)) else outcome
        print(f"  -> {text}" + (f" {detail}" if detail == "(cached)" else ""))
        if detail and detail != "(cached)":
            print("\n".join("     " + t for t in detail.splitlines()))

    def _outputs(self, args: tuple, kwargs: dict) -> dict[str, np.ndarray]:
        """Private host copies of every array argument after a run, by name, as float64 (inputs
        compare equal trivially)."""
        from .tools.tolerance import as_float64
        named = self._named(args, kwargs)
        views = {n: v for n, v in named.items() if type(v).__name__ == "DTypeView"}
        self._dtypes.update({n: v.dtype.name for n, v in views.items()})
        return {n: as_float64(v) if n in views else _host(v) for n, v in named.items()
                if _is_array(v)}

    def _expected(self, args: tuple, kwargs: dict, first: dict[str, np.ndarray],
                  cfg: Config) -> dict[str, np.ndarray]:
        """The outputs every config must match: the reference's, else (a copy of) the first
        config's."""
        if self.reference is None:
            return {k: np.array(v) for k, v in first.items()}
        from kdsl.backends import REFERENCE
        from kdsl.passes.provenance import stored_params

        from .tools.arrays import outputs_of
        ck = self.fn.compile(*args, backend=REFERENCE, **kwargs, **cfg.all_kwargs())
        params = ck.kernel.runtime_params
        names = [params[j].name for j in sorted(stored_params(ck.kernel))]
        cargs = tuple(_copy(a) for a in args)
        cnamed = self._named(cargs, {})
        for n in self.reset_to_zero:  # the reference sees what the launch sees
            if n in cnamed:
                _zero(cnamed[n])
        from .tools.tolerance import as_float64
        value = self.reference(*cargs)
        return {k: as_float64(v) for k, v in outputs_of(value, names or list(first)).items()}

    def _disagrees(self, outs: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> str:
        from .tools.tolerance import elementwise_errors, tolerance
        for name, exp in expected.items():
            got = outs.get(name)
            if got is None:
                return f"no output {name!r}"
            dt = self._dtypes.get(name) or got.dtype
            a = got.astype(np.float64)
            e = np.asarray(exp, np.float64).reshape(a.shape)
            tol = tolerance(dt, self.tolerance_k, self.tolerance_acc)
            err, allowed = elementwise_errors(a, e, tol)
            bad = err > allowed
            if bad.any():
                i = np.unravel_index(int(np.argmax(bad)), bad.shape)
                return (f"{int(bad.sum())} elements of {name!r} differ (first at "
                        f"{tuple(int(x) for x in i)}: {a[i]:.6g} vs {e[i]:.6g})")
        return ""


# ------------------------------------------------------------------------------ disk cache

#: part of every cache file's key: verdicts written before version 2 may be wrong (the expected
#: outputs aliased a working copy that the timing runs kept writing)
_CACHE_VERSION = "2"


def _from_disk(v: Any) -> tuple[float | str, list[float] | None]:
    """(timing or verdict, [median, p20, p80] or None) of a cache entry: a verdict string, a
    list of the three quantiles, or a bare median."""
    if isinstance(v, str):
        try:
            t = float(v)  # a non-finite time is written as text
        except ValueError:
            return v, None
        return t, [t] * 3
    if isinstance(v, list) and v:
        q = [float(x) for x in v] + [float(v[-1])] * 3
        return q[0], q[:3]
    return float(v), [float(v)] * 3


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):  # missing or corrupt: retune, never trust it
        return {}


def _merge_json(path: Path, new: dict[str, Any]) -> None:
    """Merge `new` into the file (other processes may have added configs meanwhile)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_json(path)
        def text(x: Any) -> Any:
            return x if isinstance(x, str) or math.isfinite(x) else str(x)
        data.update({k: [text(x) for x in v] if isinstance(v, list) else text(v)
                     for k, v in new.items()})
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except OSError:  # a read-only cache: tuning still works, it is just not remembered
        print(f"kdsl autotune: could not write {path}", file=sys.stderr)


def autotune(configs: Sequence[Config], key: Sequence[str], prune_configs_by: Any = None,
             reset_to_zero: Sequence[str] | None = None,
             restore_value: Sequence[str] | None = None, pre_hook: Callable | None = None,
             post_hook: Callable | None = None, warmup: float = 5, rep: float = 25,
             do_bench: Callable | None = None, reference: Callable | None = None,
             tolerance_k: int = 1024, tolerance_acc: str | None = "float32",
             **_triton_only: Any) -> Callable[[Any], Autotuner]:
    """Decorator over `@kd.jit` (see the module docstring), with Triton's parameters;
    `use_cuda_graph` and `cache_results` are accepted and change nothing (timings are always
    cached on disk)."""
    def deco(fn: Any) -> Autotuner:
        return Autotuner(fn, configs, key, prune_configs_by, reference, warmup, rep,
                         tolerance_k, reset_to_zero, restore_value, pre_hook, post_hook,
                         do_bench, tolerance_acc)
    return deco
