"""The model layer: GPT-2 in pure JAX and what decodes with it.

Weights and tokenizer (weights, hf_layout, hub, tokenizer), the forward pass with its KV cache
and CPU kernels (gpt2, kernels), sampling and verification (sampling, drafters, decoding,
batched, generate), the counts a generation leaves (stats), and an independent NumPy reference
(reference). Nothing here imports measure, results or cli.
"""
