"""Backends: one module per backend; the registry is in this file."""
