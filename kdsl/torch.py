"""kdsl kernels as PyTorch operators (`import kdsl.torch`; needs torch, docs/torch.md).

Importing this module registers every library kernel of `kdsl.kernels` as a torch operator
`torch.ops.kdsl.<name>` with the library function's arguments (plus `backend`), built with
`torch.library.custom_op`:

- the implementation is the library function itself (torch tensors in, torch tensors out,
  read in place through DLPack);
- a fake (meta) implementation gives the output's shape and dtype without running anything, so
  `torch.compile` (fullgraph included) traces through the operator and `torch.library.opcheck`
  passes;
- `softmax`, `layer_norm`, `rms_norm` and `attention` have gradients: their backward is the
  matching `*_backward` operator, itself a kdsl kernel (kernels/*_backward.py), so a compiled
  graph's backward traces too; `matmul` and `mlp` have gradients made of kdsl matmuls (of
  transposed views, read in place) and torch's elementwise operations.

`custom_op` wraps a user's launcher of `@kd.jit` kernels the same way in a few lines.

`torch` stays an optional dependency of kdsl: nothing else in kdsl imports this module.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kdsl.extras import require

torch = require("torch", "kdsl.torch")  # MissingExtra: pip install 'kdsl[torch]'

import kdsl.kernels as K

NAMESPACE = "kdsl"


# ------------------------------------------------------------------------------ the table

def _like(name: str) -> Callable[..., Any]:
    """Fake of an op returning one new contiguous tensor shaped and typed as argument `name`."""
    def fake(**a: Any) -> Any:
        t = a[name]
        return t.new_empty(t.shape)
    return fake


def _fake_matmul(a: Any, b: Any, **_: Any) -> Any:
    return a.new_empty((*a.shape[:-1], b.shape[-1]))


def _fake_block_sparse(a: Any, layout: Any, block: int, **_: Any) -> Any:
    return a.new_empty((a.shape[0], layout.shape[1] * block))


def _fake_sparsify(w: Any, **_: Any) -> Any:
    rows = w.shape[0] // 2
    return w.new_empty((rows, w.shape[1])), w.new_empty((rows, w.shape[1]), dtype=torch.int8)


def _fake_semi(x: Any, values: Any, **_: Any) -> Any:
    return x.new_empty((x.shape[0], values.shape[1]))


def _fake_grads(*names: str) -> Callable[..., Any]:
    def fake(**a: Any) -> Any:
        return tuple(a[n].new_empty(a[n].shape) for n in names)
    return fake


@dataclass(frozen=True)
class OpSpec:
    """One library kernel as an operator: its schema (the library function's parameters, in
    order, with `str? backend=None` last; a library `out=` is not one: the operators are
    functional) and its fake implementation (keyword arguments)."""

    schema: str
    fake: Callable[..., Any]


_B = "str? backend=None"
OPS: dict[str, OpSpec] = {
    "softmax": OpSpec(f"(Tensor x, int axis=-1, {_B}) -> Tensor", _like("x")),
    "layer_norm": OpSpec(f"(Tensor x, Tensor weight, Tensor bias, float eps=1e-05, {_B}) "
                         f"-> Tensor", _like("x")),
    "rms_norm": OpSpec(f"(Tensor x, Tensor weight, float eps=1e-06, {_B}) -> Tensor",
                       _like("x")),
    "matmul": OpSpec(f"(Tensor a, Tensor b, Tensor? bias=None, str? activation=None, {_B}) "
                     f"-> Tensor", lambda a, b, **_: _fake_matmul(a, b)),
    "mlp": OpSpec(f"(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down, {_B}) -> Tensor",
                  lambda x, w_down, **_: x.new_empty((x.shape[0], w_down.shape[1]))),
    "attention": OpSpec(f"(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None, "
                        f"{_B}) -> Tensor", _like("q")),
    "decode_attention": OpSpec(
        f"(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table, Tensor seq_lens, "
        f"float? scale=None, {_B}) -> Tensor", _like("q")),
    "quant_matmul": OpSpec(
        f"(Tensor x, Tensor w_q, Tensor scales, int group_size, int bits, {_B}) -> Tensor",
        lambda x, w_q, **_: x.new_empty((x.shape[0], w_q.shape[1]))),
    "softmax_backward": OpSpec(f"(Tensor dy, Tensor y, int axis=-1, {_B}) -> Tensor",
                               _like("y")),
    "layer_norm_backward": OpSpec(
        f"(Tensor dy, Tensor x, Tensor weight, Tensor bias, float eps=1e-05, {_B}) "
        f"-> (Tensor, Tensor, Tensor)", _fake_grads("x", "weight", "bias")),
    "rms_norm_backward": OpSpec(
        f"(Tensor dy, Tensor x, Tensor weight, float eps=1e-06, {_B}) -> (Tensor, Tensor)",
        _fake_grads("x", "weight")),
    "attention_backward": OpSpec(
        f"(Tensor do, Tensor q, Tensor k, Tensor v, Tensor o, bool causal=False, "
        f"float? scale=None, {_B}) -> (Tensor, Tensor, Tensor)", _fake_grads("q", "k", "v")),
    # sparsity (registered when kdsl.kernels has them)
    "block_sparse_matmul": OpSpec(
        f"(Tensor a, Tensor b_blocks, Tensor layout, int block, Tensor? bias=None, "
        f"str? activation=None, {_B}) -> Tensor",
        lambda a, layout, block, **_: _fake_block_sparse(a, layout, block)),
    "sparsify_2_4": OpSpec(f"(Tensor w, {_B}) -> (Tensor, Tensor)",
                           lambda w, **_: _fake_sparsify(w)),
    "semi_structured_matmul": OpSpec(
        f"(Tensor x, Tensor values, Tensor meta, Tensor? bias=None, str? activation=None, "
        f"{_B}) -> Tensor", lambda x, values, **_: _fake_semi(x, values)),
}


def _param_names(schema: str) -> list[str]:
    inner = schema[schema.index("(") + 1:schema.index(") ->")]
    return [p.split("=")[0].split()[-1] for p in inner.split(", ")]


def _keywords(names: list[str], args: tuple, kwargs: dict) -> dict[str, Any]:
    out = dict(zip(names, args))
    out.update(kwargs)
    return out


def _impl(fn: Callable[..., Any], names: list[str]) -> Callable[..., Any]:
    # library functions return new arrays (never an input): what an operator must return
    def impl(*args: Any, **kwargs: Any) -> Any:
        return fn(**_keywords(names, args, kwargs))
    impl.__name__ = fn.__name__
    return impl


def _fake(spec: OpSpec, names: list[str]) -> Callable[..., Any]:
    def fake(*args: Any, **kwargs: Any) -> Any:
        return spec.fake(**_keywords(names, args, kwargs))
    return fake


def _register(name: str, spec: OpSpec) -> Any:
    names = _param_names(spec.schema)
    op = torch.library.custom_op(f"{NAMESPACE}::{name}", _impl(getattr(K, name), names),
                                 mutates_args=(), schema=spec.schema)
    op.register_fake(_fake(spec, names))
    return op


# ------------------------------------------------------------------------------ gradients

def _ops() -> Any:
    return getattr(torch.ops, NAMESPACE)


def _save(names: list[str], tensors: tuple[str, ...], with_output: bool = False):
    """A setup_context saving the named tensor inputs (and the output) and the other inputs."""
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        bound = dict(zip(names, inputs))
        saved = [bound[n] for n in tensors] + ([output] if with_output else [])
        ctx.save_for_backward(*saved)
        ctx.args = {n: v for n, v in bound.items() if n not in tensors}
    return setup_context


def _softmax_bwd(ctx: Any, grad: Any) -> tuple:
    (y,) = ctx.saved_tensors
    a = ctx.args
    return _ops().softmax_backward(grad, y, a["axis"], a["backend"]), None, None


def _layer_norm_bwd(ctx: Any, grad: Any) -> tuple:
    x, w, b = ctx.saved_tensors
    a = ctx.args
    dx, dw, db = _ops().layer_norm_backward(grad, x, w, b, a["eps"], a["backend"])
    return dx, dw, db, None, None


def _rms_norm_bwd(ctx: Any, grad: Any) -> tuple:
    x, w = ctx.saved_tensors
    a = ctx.args
    dx, dw = _ops().rms_norm_backward(grad, x, w, a["eps"], a["backend"])
    return dx, dw, None, None


def _attention_bwd(ctx: Any, grad: Any) -> tuple:
    q, k, v, o = ctx.saved_tensors
    a = ctx.args
    dq, dk, dv = _ops().attention_backward(grad, q, k, v, o, a["causal"], a["scale"],
                                           a["backend"])
    return dq, dk, dv, None, None, None


def _t(m: Any) -> Any:
    """The transposed view of the last two axes (the matmul kernel reads it in place)."""
    return m.transpose(-1, -2)


def _activation_grad(z: Any, name: str | None) -> Any:
    """d act(z) / dz in float32 (z is the pre-activation)."""
    z = z.float()
    if name == "relu":
        return (z > 0).float()
    if name == "gelu":  # erf form: Phi(z) + z * phi(z)
        return 0.5 * (1.0 + torch.erf(z * 0.7071067811865476)) + \
            z * torch.exp(-0.5 * z * z) * 0.3989422804014327
    s = torch.sigmoid(z)  # silu
    return s * (1.0 + z * (1.0 - s))


def _matmul_bwd(ctx: Any, grad: Any) -> tuple:
    # d(a @ b + bias) through kdsl matmuls of transposed views; the activation's derivative
    # needs the pre-activation, recomputed by one more matmul
    a, b, bias = ctx.saved_tensors
    act, be = ctx.args["activation"], ctx.args["backend"]
    dz = grad
    if act is not None:
        z = _ops().matmul(a, b, bias, None, be)
        dz = (grad.float() * _activation_grad(z, act)).to(a.dtype)
    need_a, need_b, need_bias = ctx.needs_input_grad[:3]
    da = _ops().matmul(dz, _t(b), None, None, be) if need_a else None
    db = None
    if need_b:
        if b.dim() == 3:
            db = _ops().matmul(_t(a), dz, None, None, be)
        else:  # one b shared by a batch: the batch's rows are more rows
            k, n = b.shape
            db = _ops().matmul(_t(a.reshape(-1, k)), dz.reshape(-1, n), None, None, be)
    dbias = None
    if need_bias and bias is not None:
        dbias = dz.float().reshape(-1, dz.shape[-1]).sum(0).to(bias.dtype)
    return da, db, dbias, None, None


def _mlp_bwd(ctx: Any, grad: Any) -> tuple:
    # out = (silu(g) * u) @ w_down with g = x @ w_gate, u = x @ w_up (recomputed)
    x, wg, wu, wd = ctx.saved_tensors
    be = ctx.args["backend"]
    mm = _ops().matmul
    g, u = mm(x, wg, None, None, be).float(), mm(x, wu, None, None, be).float()
    sg = torch.sigmoid(g)
    h = (g * sg * u).to(x.dtype)
    dh = mm(grad, _t(wd), None, None, be).float()
    dg = (dh * u * sg * (1.0 + g * (1.0 - sg))).to(x.dtype)
    du = (dh * g * sg).to(x.dtype)
    need = ctx.needs_input_grad
    dx = mm(dg, _t(wg), None, None, be) + mm(du, _t(wu), None, None, be) if need[0] else None
    dwg = mm(_t(x), dg, None, None, be) if need[1] else None
    dwu = mm(_t(x), du, None, None, be) if need[2] else None
    dwd = mm(_t(h), grad, None, None, be) if need[3] else None
    return dx, dwg, dwu, dwd, None


#: op name -> (backward, tensor inputs saved, whether the output is saved too).  softmax, the
#: norms and attention have gradient kernels; matmul and mlp gradients are kdsl matmuls.
GRADIENTS: dict[str, tuple[Callable[..., tuple], tuple[str, ...], bool]] = {
    "softmax": (_softmax_bwd, (), True),
    "layer_norm": (_layer_norm_bwd, ("x", "weight", "bias"), False),
    "rms_norm": (_rms_norm_bwd, ("x", "weight"), False),
    "attention": (_attention_bwd, ("q", "k", "v"), True),
    "matmul": (_matmul_bwd, ("a", "b", "bias"), False),
    "mlp": (_mlp_bwd, ("x", "w_gate", "w_up", "w_down"), False),
}


# ------------------------------------------------------------------------------ registration

def _register_all() -> dict[str, Any]:
    ops = {}
    for name, spec in OPS.items():
        if not callable(getattr(K, name, None)):
            continue
        ops[name] = op = _register(name, spec)
        if name in GRADIENTS:
            backward, saved, output = GRADIENTS[name]
            op.register_autograd(backward, setup_context=_save(_param_names(spec.schema),
                                                               saved, output))
    return ops


_REGISTERED: dict[str, Any] = _register_all()


def library_ops() -> dict[str, Any]:
    """The registered operators: library kernel name -> its `torch.library.CustomOpDef`
    (callable; `torch.ops.kdsl.<name>` is the same operator)."""
    return dict(_REGISTERED)


# ------------------------------------------------------------------------------ custom_op

# Python default value type -> schema type of an unannotated launcher parameter
_DEFAULT_TYPES: dict[type, Any] = {bool: bool, int: int, float: float, str: str}


def custom_op(name: str, fn: Callable[..., Any] | None = None, *,
              mutates_args: str | Iterable[str] = (), like: str | None = None,
              fake: Callable[..., Any] | None = None, schema: str | None = None,
              backward: Callable[..., Any] | None = None,
              setup_context: Callable[..., Any] | None = None,
              device_types: str | Iterable[str] | None = None) -> Any:
    """Wrap `fn`, a Python function launching `@kd.jit` kernels on torch tensors, as the
    torch operator `name` ("namespace::op"; a bare name goes to the "kdsl_ext" namespace).
    Usable as a decorator.

    - Parameters without annotations are typed from their defaults (bool, int, float, str;
      `None` makes an optional tensor, except `backend=None`: an optional string), else they
      are tensors; annotated ones as torch does.
    - `like="x"`: the operator returns one new tensor of x's shape and dtype; this gives the
      fake implementation (`torch.compile`, opcheck).  `fake=` gives one explicitly.  An
      operator that only writes into arguments named in `mutates_args` returns nothing and
      needs neither.
    - `backward` and `setup_context` are passed to `register_autograd`.

    Returns the `torch.library.CustomOpDef` (call it like `fn`; also `torch.ops.<ns>.<op>`).
    """
    if fn is None:
        return lambda f: custom_op(name, f, mutates_args=mutates_args, like=like, fake=fake,
                                   schema=schema, backward=backward,
                                   setup_context=setup_context, device_types=device_types)
    if "::" not in name:
        name = f"kdsl_ext::{name}"
    mutates = (mutates_args,) if isinstance(mutates_args, str) else tuple(mutates_args)
    sig = inspect.signature(fn)
    returns_tensor = like is not None or fake is not None
    if schema is None:
        schema = torch.library.infer_schema(_annotated(fn, sig, returns_tensor),
                                            mutates_args=mutates)
    op = torch.library.custom_op(name, fn, mutates_args=mutates, schema=schema,
                                 device_types=device_types)
    if fake is None and like is not None:
        if like not in sig.parameters:
            raise ValueError(f"custom_op {name}: like={like!r} is not a parameter of "
                             f"{fn.__name__} ({', '.join(sig.parameters)})")

        def fake(*args: Any, **kwargs: Any) -> Any:
            t = sig.bind(*args, **kwargs).arguments[like]
            return t.new_empty(t.shape)
    if fake is None and not returns_tensor:
        def fake(*args: Any, **kwargs: Any) -> None:
            return None
    op.register_fake(fake)
    if backward is not None:
        op.register_autograd(backward, setup_context=setup_context)
    return op


def _annotated(fn: Callable[..., Any], sig: inspect.Signature, returns_tensor: bool) -> Any:
    """A stand-in of `fn` whose signature has a type on every parameter (for infer_schema)."""
    params = []
    for p in sig.parameters.values():
        ann = p.annotation
        if ann is inspect.Parameter.empty:
            if p.name == "backend":
                ann = str | None
            elif p.default is None:
                ann = torch.Tensor | None
            else:
                ann = _DEFAULT_TYPES.get(type(p.default), torch.Tensor)
        params.append(p.replace(annotation=ann))
    ret = sig.return_annotation
    if ret is inspect.Signature.empty:
        ret = torch.Tensor if returns_tensor else None

    def stand_in(*args: Any, **kwargs: Any) -> Any:  # pragma: no cover - never called
        return fn(*args, **kwargs)
    stand_in.__signature__ = sig.replace(parameters=params, return_annotation=ret)
    stand_in.__name__ = fn.__name__
    return stand_in


__all__ = ["GRADIENTS", "NAMESPACE", "OPS", "OpSpec", "custom_op", "library_ops"]
