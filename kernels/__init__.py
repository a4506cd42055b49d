"""Kernel library written in kdsl."""
