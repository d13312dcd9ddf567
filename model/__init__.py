"""The tinygpt model package: :class:`GPT`, its :class:`GPTConfig`, and checkpoint I/O.

    from model import GPT, GPTConfig
"""

from model.gpt import GPT, MLP, Block, CausalSelfAttention, GPTConfig, KVCache

__all__ = ["GPT", "GPTConfig", "CausalSelfAttention", "KVCache", "MLP", "Block"]
