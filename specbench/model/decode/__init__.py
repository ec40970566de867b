"""Decoding: sampling, the drafters and their registry, the verdicts, token trees, one sequence's
start and round, batches, the device loops and the counts a generation leaves. It runs networks
(nets) and reads no file: decode imports nothing from checkpoints."""
