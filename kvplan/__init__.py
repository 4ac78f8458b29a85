"""kvplan: capacity planning for LLM serving (vLLM KV-cache sizing and more)."""

__version__ = "0.1.0"
