"""Placeholder: replaced by the runtime (backend registry access)."""


def available_backends() -> list[str]:  # pragma: no cover - placeholder
    return []
