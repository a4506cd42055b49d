"""`kdsl.torch.custom_op`: a user's launcher of `@kd.jit` kernels becomes a torch operator in a
few lines (schema from the signature, fake implementation from `like=`), usable eagerly, in
`torch.compile(fullgraph=True)` and with a user-given backward; in-place launchers too.  And
torch stays optional: `import kdsl` and the library never import it."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import kdsl as kd
import kdsl.torch as kt


@kd.jit
def axpb_kernel(x_ptr, out_ptr, n, a, b, BLOCK: kd.constexpr):
    offs = kd.program_id(0) * BLOCK + kd.arange(0, BLOCK)
    m = offs < n
    x = kd.load(x_ptr + offs, mask=m).to(kd.float32)
    kd.store(out_ptr + offs, x * a + b, mask=m)


@kt.custom_op("kdsl_test::axpb", like="x")
def axpb(x, a: float, b=0.0, backend=None):
    x = x.contiguous()
    out = torch.empty_like(x)
    axpb_kernel[(kd.cdiv(x.numel(), 256),)](x, out, x.numel(), a, b, BLOCK=256, backend=backend)
    return out


def _axpb_backward(ctx, grad):
    return axpb(grad, ctx.a, 0.0, ctx.backend), None, None, None


def _axpb_setup(ctx, inputs, output):
    ctx.a, ctx.backend = inputs[1], inputs[3]


axpb.register_autograd(_axpb_backward, setup_context=_axpb_setup)


@kt.custom_op("kdsl_test::fill_", mutates_args=("out",))
def fill_(out, value: float):
    flat = out.view(-1)
    axpb_kernel[(kd.cdiv(flat.numel(), 256),)](flat, flat, flat.numel(), 0.0, value, BLOCK=256)


def test_schema_from_signature():
    schema = str(torch.ops.kdsl_test.axpb.default._schema)
    assert schema == ("kdsl_test::axpb(Tensor x, float a, float b=0., str? backend=None) "
                      "-> Tensor"), schema
    assert "Tensor(a0!) out" in str(torch.ops.kdsl_test.fill_.default._schema)


def test_eager_every_backend(backend):
    x = torch.randn(3, 100)
    torch.testing.assert_close(axpb(x, 2.0, 1.0, backend), x * 2 + 1)
    torch.testing.assert_close(axpb(x.t(), 2.0, backend=backend), x.t() * 2)  # a strided view


def test_opcheck_and_compile_fullgraph():
    x = torch.randn(5, 7, requires_grad=True)
    torch.library.opcheck(axpb, (x, 3.0, 0.5))

    def f(t):
        return axpb(torch.sin(t), 3.0, 0.5).sum()

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    got.backward()
    want = (torch.sin(x.detach()) * 3 + 0.5).sum()
    torch.testing.assert_close(got.detach(), want)
    torch.testing.assert_close(x.grad, torch.cos(x.detach()) * 3)


def test_in_place_operator():
    out = torch.zeros(4, 4)
    fill_(out, 2.5)
    assert (out == 2.5).all()
    torch.library.opcheck(fill_, (torch.zeros(3), 1.0))

    def f(t):
        fill_(t, 7.0)
        return t + 1

    assert (torch.compile(f, fullgraph=True, backend="aot_eager")(torch.zeros(6)) == 8).all()


def test_bad_like():
    with pytest.raises(ValueError, match="like='y' is not a parameter"):
        kt.custom_op("kdsl_test::bad", lambda x: x, like="y")


def test_torch_stays_optional():
    code = ("import sys, kdsl, kdsl.kernels, kdsl.cli, kdsl.testing\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "sys.modules['torch'] = None\n"  # as if torch were not installed
            "try:\n    import kdsl.torch\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "pip install 'kdsl[torch]'" in out.stdout
