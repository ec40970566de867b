"""specbench: measure what speculative decoding buys."""

__version__ = "0.1.0"
