"""The model layer: the networks in pure JAX and what decodes with them, in four wings and a front
door. Imports run one way (pyproject.toml's import-linter contract):

    generate.py     the front door: autoregressive and speculative generation
    decode/         sampling, drafters, verdicts, trees, the round, batches, loops
    checkpoints/    what is on disk: the registry, HF layouts, the Hub, tokenizers, EAGLE folders
    nets/           GPT-2, T5, attention, the EAGLE step, the step interface, weight layouts
    kernels/        the CPU kernel, the Pallas kernels, how programs compile per backend

generate -> decode | checkpoints -> nets -> kernels; decode reads no file. Nothing here imports
measure, results or cli."""

import jax

# float32 means float32. On GPUs with TF32 matrix units (Ampere, Hopper), XLA's default multiplies
# float32 matrices with 10-bit mantissas: the K+1-row verify and the 1-token step then round
# differently, cached logits stop matching uncached ones, and greedy
# speculative decoding stops giving autoregressive decoding's tokens. "highest" asks for float32
# products; it changes nothing for bfloat16 inputs and nothing on the CPU (docs/gpu.md).
jax.config.update("jax_default_matmul_precision", "highest")
