"""The mechanical port used by these tests is kdsl's own (`kdsl port`, kdsl/porting.py)."""

from kdsl.porting import port_source as port

__all__ = ["port"]
