"""The networks: GPT-2 and T5 with their KV caches behind one step interface (network), the
layouts their weights are kept in, attention, the EAGLE head's step, and an independent NumPy
reference. Pure functions of weights and arrays: no files. Imports kernels only."""
