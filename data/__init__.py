"""tinygpt's data pipeline: corpora, tokenizers, token-file preparation and batch loading.

Prepare a dataset from the repo root with ``python -m data.prepare --help``; in
code, ``prepare_data(...)`` returns a folder that ``TokenData(folder)`` reads.
Imports ``core`` only (never ``model``, ``training`` or a command).

The names below are re-exported lazily (PEP 562 ``__getattr__``): importing
``data`` stays cheap, and ``python -m data.prepare`` does not trip runpy's
"found in sys.modules" warning by having the package import it first.
"""

import importlib

_EXPORTS = {
    "GPT2_BPE_SHA256": "data.tokenizers",
    "CharTokenizer": "data.tokenizers",
    "GPT2Tokenizer": "data.tokenizers",
    "BPETokenizer": "data.bpe",
    "build_tokenizer": "data.tokenizers",
    "find_gpt2_bpe": "data.tokenizers",
    "load_tokenizer": "data.tokenizers",
    "save_tokenizer": "data.tokenizers",
    "tokenizer_from_dict": "data.tokenizers",
    "clean_play_markdown": "data.corpus",
    "load_documents": "data.corpus",
    "split_documents": "data.corpus",
    "prepare_data": "data.prepare",
    "prepare_from_config": "data.prepare",
    "resolve_source": "data.sources",
    "token_dtype": "data.shards",
    "TokenData": "data.loader",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    """Import the module that defines ``name`` on first access (AttributeError if unknown)."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'data' has no attribute {name!r}")
