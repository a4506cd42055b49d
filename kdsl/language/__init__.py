"""Placeholder: replaced by the language module (kd.program_id, kd.load, dtypes, constexpr...)."""
__all__: list[str] = []
