"""Intermediate representations: `tile` (SSA tiles), `loop` (threads, registers, shared memory)."""
