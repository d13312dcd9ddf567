"""The key/value cache that lets generation run one new position a step: :class:`KVCache`.

cache = KVCache(config)                    # empty; filled by GPT.decode
k, v = cache.update(layer, k_new, v_new)   # (B, n_kv_head, length + T, head_size) each
"""

from __future__ import annotations

import torch

from model.config import GPTConfig


class KVCache:
    """The keys and values of the positions seen so far, so generation runs one new position a step.

    Per layer, ``keys[l]`` and ``values[l]`` are ``(B, n_kv_head, block_size, head_size)`` (allocated
    on the first :meth:`update`, like the keys given: grouped-query attention caches its fewer
    key/value heads); the first ``length`` positions are filled.  Under ``position='rope'`` the
    keys are stored rotated by their positions, which are their places in the cache.
    """

    def __init__(self, config: GPTConfig) -> None:
        self.block_size = config.block_size
        self.keys: list[torch.Tensor | None] = [None] * config.n_layer
        self.values: list[torch.Tensor | None] = [None] * config.n_layer
        self.length = 0  # positions filled, the same in every layer

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k``, ``v`` ``(B, n_kv_head, T, head_size)`` at positions ``length ..``; return all so far.

        The result is ``(B, n_kv_head, length + T, head_size)`` each (views); :meth:`GPT.decode`
        moves ``length`` on after the last layer.
        """
        if self.keys[layer] is None:
            B, n_head, _, head_size = k.shape
            self.keys[layer] = k.new_zeros(B, n_head, self.block_size, head_size)  # (B, n_head, block_size, head_size)
            self.values[layer] = v.new_zeros(B, n_head, self.block_size, head_size)
        end = self.length + k.size(2)
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]
