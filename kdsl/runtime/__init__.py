"""Runtime: jit objects, argument binding, specialisation, caches and launch."""
