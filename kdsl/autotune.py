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

Unlike Triton, a configuration must also be right: each candidate runs on fresh copies of the
array arguments and its outputs are checked against the first configuration's (or against
`reference(*args)`, which returns the expected outputs as for `kd.testing.compare`) within
`kdsl.testing.tolerance(dtype, tolerance_k)`; one that disagrees is discarded, and the report
says why.  Timings (and verdicts) are cached on disk per (kernel identity, backend, device, key
values) and per config, so a new config is timed alone and other processes reuse the rest:
`$KDSL_CACHE_DIR/autotune/<hash>.json`.  `KDSL_AUTOTUNE=0` skips tuning (the first config).
A progress bar on stderr shows the tuning.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def enabled() -> bool:
    """False when `KDSL_AUTOTUNE` is 0/false/off/no: every autotuner uses its first config."""
    return os.environ.get("KDSL_AUTOTUNE", "1").strip().lower() not in ("0", "false", "off", "no")


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
    from kdsl.runtime.views import copy_like  # same strides: the kernel's are the original's
    return copy_like(a)


def _host(a: Any) -> np.ndarray:
    return np.asarray(a.get()) if hasattr(a, "get") and not isinstance(a, np.ndarray) \
        else np.asarray(a)


class Autotuner:
    """The object `@kd.autotune` returns: launch it like the kernel it wraps."""

    def __init__(self, fn: Any, configs: Sequence[Config], key: Sequence[str],
                 prune_configs_by: dict | Callable | None = None,
                 reference: Callable | None = None, warmup: float = 5, rep: float = 25,
                 tolerance_k: int = 1024):
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
        #: tuning key -> chosen Config
        self.cache: dict[tuple, Config] = {}
        #: the last tuning: config key -> milliseconds, or the reason it was discarded
        self.timings: dict[str, float | str] = {}
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
            self.cache[tkey] = cfg
        self.best_config = cfg
        if cfg.pre_hook is not None:
            cfg.pre_hook({**named, **cfg.all_kwargs()})
        return self.fn.run(*args, grid=grid, backend=backend, **kwargs, **cfg.all_kwargs())

    def _backend(self, args: tuple, kwargs: dict, backend: str | None) -> str:
        if backend:
            return backend
        from kdsl.runtime.registry import owner_of
        for a in (*args, *kwargs.values()):
            if getattr(a, "shape", None) is not None and not isinstance(a, np.ndarray):
                own = owner_of(a)
                if own:
                    return own
        return (getattr(self.fn, "default_backend", None) or os.environ.get("KDSL_BACKEND")
                or "llvm")

    def _named(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        named = dict(zip(self.fn.signature.names, args))
        named.update(kwargs)
        return named

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
        from kdsl.runtime.cache import cache_dir
        h = hashlib.sha256()
        for part in (self.fn.identity(), backend, get_backend(backend).hash(), repr(tkey)):
            h.update(part.encode())
            h.update(b"\0")
        return cache_dir() / "autotune" / f"{h.hexdigest()}.json"

    def _tune(self, args: tuple, kwargs: dict, grid: Any, backend: str,
              named: dict[str, Any], tkey: tuple) -> Config:
        from .bench import Progress, do_bench

        configs = self.prune_configs(named, kwargs)
        path = self._cache_path(backend, tkey)
        stored = _read_json(path)
        expected: dict[str, np.ndarray] | None = None
        timings: dict[str, float | str] = {}
        label = f"autotune {self.__name__}"
        with Progress(len(configs), label) as bar:
            for i, cfg in enumerate(configs):
                k = cfg.key()
                if k in stored:
                    timings[k] = stored[k]
                    bar.step(f"{k} (cached)")
                    continue
                copies = tuple(_copy(a) for a in args)
                ckw = {n: _copy(v) for n, v in kwargs.items()}

                def launch(c=cfg, a=copies, kw=ckw):
                    if c.pre_hook is not None:
                        c.pre_hook({**self._named(a, kw), **c.all_kwargs()})
                    return self.fn.run(*a, grid=grid, backend=backend, **kw, **c.all_kwargs())
                try:
                    launch()
                except Exception as e:  # a config that cannot compile or run is discarded
                    timings[k] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
                    bar.step(f"{k} failed")
                    continue
                outs = self._outputs(copies, ckw)
                if expected is None:
                    expected = self._expected(args, kwargs, outs, cfg, i, configs)
                why = self._disagrees(outs, expected)
                if why:
                    timings[k] = f"wrong: {why}"
                    bar.step(f"{k} wrong")
                else:
                    timings[k] = do_bench(launch, backend=backend, warmup=self.warmup,
                                          rep=self.rep, overhead=False).median
                    bar.step(f"{k} {timings[k]:.3f} ms")
                stored[k] = timings[k]
        _merge_json(path, {k: v for k, v in timings.items()
                           if not (isinstance(v, str) and v.startswith("failed"))})
        self.timings = timings
        ok = [c for c in configs if isinstance(timings.get(c.key()), (int, float))]
        if not ok:
            raise RuntimeError(f"autotune {self.__name__}: no correct config; "
                               + "; ".join(f"{k}: {v}" for k, v in timings.items()))
        return min(ok, key=lambda c: timings[c.key()])

    def _outputs(self, args: tuple, kwargs: dict) -> dict[str, np.ndarray]:
        """Every array argument after a run, by name (inputs compare equal trivially)."""
        named = self._named(args, kwargs)
        return {n: _host(v) for n, v in named.items()
                if getattr(v, "shape", None) is not None and np.ndim(v) > 0}

    def _expected(self, args: tuple, kwargs: dict, first: dict[str, np.ndarray], cfg: Config,
                  i: int, configs: list[Config]) -> dict[str, np.ndarray]:
        """The outputs every config must match: the reference's, else the first config's."""
        if self.reference is None:
            return first
        from kdsl.passes.lower_analysis import stored_params

        from .compare import _outputs_of
        ck = self.fn.compile(*args, backend="interp", **kwargs, **cfg.all_kwargs())
        params = ck.kernel.runtime_params
        names = [params[j].name for j in sorted(stored_params(ck.kernel))]
        value = self.reference(*(_copy(a) for a in args))
        return {k: np.asarray(_host(v)) for k, v in
                _outputs_of(value, names or list(first)).items()}

    def _disagrees(self, outs: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> str:
        from .compare import _as_f64
        from .testing import _dtype_name, tolerance
        for name, exp in expected.items():
            got = outs.get(name)
            if got is None:
                return f"no output {name!r}"
            dt = _dtype_name(got.dtype)
            a = _as_f64(got, dt)
            e = _as_f64(exp, _dtype_name(exp.dtype)).reshape(a.shape)
            tol = tolerance(dt, self.tolerance_k)
            with np.errstate(invalid="ignore"):
                bad = ~((np.abs(a - e) <= tol.atol + tol.rtol * np.abs(e))
                        | (a == e) | (np.isnan(a) & np.isnan(e)))
            if bad.any():
                i = np.unravel_index(int(np.argmax(bad)), bad.shape)
                return (f"{int(bad.sum())} elements of {name!r} differ (first at "
                        f"{tuple(int(x) for x in i)}: {a[i]:.6g} vs {e[i]:.6g})")
        return ""


# ------------------------------------------------------------------------------ disk cache

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
        data.update({k: (v if isinstance(v, str) or math.isfinite(v) else str(v))
                     for k, v in new.items()})
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except OSError:  # a read-only cache: tuning still works, it is just not remembered
        print(f"kdsl autotune: could not write {path}", file=sys.stderr)


def autotune(configs: Sequence[Config], key: Sequence[str], prune_configs_by: Any = None,
             reference: Callable | None = None, warmup: float = 5, rep: float = 25,
             tolerance_k: int = 1024, **_triton_only: Any) -> Callable[[Any], Autotuner]:
    """Decorator over `@kd.jit` (see the module docstring).  Triton-only options such as
    `reset_to_zero`, `restore_value` and `do_bench` are accepted and ignored."""
    def deco(fn: Any) -> Autotuner:
        return Autotuner(fn, configs, key, prune_configs_by, reference, warmup, rep,
                         tolerance_k)
    return deco
