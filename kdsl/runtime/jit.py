"""Placeholder: replaced by the runtime (JITFunction, jit)."""


class JITFunction:  # pragma: no cover - placeholder
    def __init__(self, fn):
        self.fn = fn
        self.__kdsl_jit__ = fn


def jit(fn):  # pragma: no cover - placeholder
    return JITFunction(fn)
