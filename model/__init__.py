"""The tinygpt model package: :class:`GPT`, its :class:`GPTConfig`, sampling and generation, checkpoint I/O, GPT-2 weights.

Imports ``core`` only (never ``data``, ``training`` or a command): a model knows token ids, not text files.

    from model import GPT, GPTConfig
"""

from model.config import GPTConfig
from model.gpt import GPT, MLP, Block, CausalSelfAttention
from model.kv_cache import KVCache

__all__ = ["GPT", "GPTConfig", "CausalSelfAttention", "KVCache", "MLP", "Block"]
