"""The model layer: GPT-2 in pure JAX and what decodes with it.

Weights and tokenizer (weights, hf_layout, hub, tokenizer), the forward pass with its KV cache
and CPU kernels (gpt2, kernels), sampling and verification (sampling, drafters, decoding,
batched, generate), the counts a generation leaves (stats), and an independent NumPy reference
(reference). Nothing here imports measure, results or cli.
"""

import jax

# float32 means float32. On GPUs with TF32 matrix units (Ampere, Hopper), XLA's default multiplies
# float32 matrices with 10-bit mantissas: the K+1-row verify and the 1-token step then round
# differently, cached logits stop matching uncached ones, and greedy
# speculative decoding stops giving autoregressive decoding's tokens. "highest" asks for float32
# products; it changes nothing for bfloat16 inputs and nothing on the CPU (docs/gpu.md).
jax.config.update("jax_default_matmul_precision", "highest")
