"""Tokenizers for tinygpt: characters, GPT-2's byte-level BPE, and a BPE trained on the corpus.

All map text to a flat list of integer token ids and back, give each id's length in
UTF-8 bytes (for bits per byte), and can be saved into (and restored from) a folder as
``tokenizer.json`` so that a prepared-data or run folder is self-contained.  GPT-2's rank
file is found offline by :mod:`data.gpt2_files`; ``bpe:N`` is :mod:`data.bpe`.

Library module, not a script.  Quick check from the repo root::

    python -c "from data.tokenizers import build_tokenizer as b; print(b('gpt2').encode('Hello world'))"
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from core.errors import UserError
from core.files import atomic_write_bytes, sha256_bytes
from data.bpe import BPETokenizer, parse_bpe_size
from data.gpt2_files import (  # noqa: F401 (re-exported: the rank file's names are part of this module's API)
    BPE_FILENAME,
    GPT2_BPE_SHA256,
    GPT2_FIX_HINT,
    find_gpt2_bpe,
    parse_bpe_ranks,
)

TOKENIZER_FILENAME = "tokenizer.json"

# --------------------------------------------------------------------------- char


class CharTokenizer:
    """One token per Unicode character, ids in the order of ``chars``.

    Like nanoGPT's ``shakespeare_char``: the vocabulary is the sorted set of
    characters in the corpus (65 for Tiny Shakespeare).

    Attributes:
        chars: the vocabulary, ``chars[i]`` is the character of id ``i``.
        vocab_size: ``len(chars)``.
        name: ``"char"``.
    """

    name = "char"

    def __init__(self, chars: list[str]):
        """Build from an explicit vocabulary.

        Raises UserError if an entry is not exactly one character or repeats
        (this only happens with a hand-edited/corrupt tokenizer.json).
        """
        chars = list(chars)
        bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
        if bad or len(set(chars)) != len(chars) or not chars:
            raise UserError(
                "char tokenizer vocabulary must be a non-empty list of distinct single characters: "
                "re-run python -m data.prepare --tokenizer=char --force"
            )
        self.chars = chars
        self.vocab_size = len(chars)
        self._stoi = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """Vocabulary = sorted set of the characters of ``text`` (nanoGPT's prepare.py).

        Raises UserError if ``text`` is empty.
        """
        if not text:
            raise UserError("cannot build a char tokenizer from empty text: give a corpus with text in it")
        return cls(sorted(set(text)))

    def encode(self, text: str) -> list[int]:
        """Text -> list of ids, one per character (len == len(text)).

        Raises UserError listing the first few characters that are not in the
        vocabulary (e.g. a sampling prompt with characters the corpus lacks).
        """
        stoi = self._stoi
        try:
            return [stoi[c] for c in text]
        except KeyError:
            missing: list[str] = []
            for c in text:
                if c not in stoi and c not in missing:
                    missing.append(c)
            shown = ", ".join(repr(c) for c in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise UserError(
                f"text has characters not in the char tokenizer's vocabulary: {shown}{more}: "
                "use a prompt made of the corpus' characters"
            ) from None

    def decode(self, ids: Iterable[int]) -> str:
        """List (or 1-D tensor/array) of ids -> text.  IndexError for ids >= vocab_size."""
        chars = self.chars
        return "".join(chars[int(i)] for i in ids)

    def token_bytes(self) -> list[int]:
        """UTF-8 bytes of each id's character, ``(vocab_size,)``: the denominator of bits per byte."""
        return [len(c.encode("utf-8")) for c in self.chars]

    def to_dict(self) -> dict:
        """JSON-able description: ``{"kind": "char", "chars": [...]}``."""
        return {"kind": "char", "chars": list(self.chars)}


# --------------------------------------------------------------------------- gpt2


class GPT2Tokenizer:
    """GPT-2's byte-level BPE (50,257 tokens) through tiktoken, from a local rank file.

    Equivalent to ``tiktoken.get_encoding("gpt2")`` but without network access:
    the ranks come from ``bpe_path`` (sha256-checked by tiktoken).

    Attributes:
        bpe_path: the ``gpt2.tiktoken`` file used.
        vocab_size: 50257 (50,000 merges + 256 bytes + ``<|endoftext|>``).
        eot_token: 50256, the id of ``<|endoftext|>``.
        name: ``"gpt2"``.
    """

    name = "gpt2"
    vocab_size = 50257
    eot_token = 50256

    def __init__(self, bpe_path):
        """Load the ranks from ``bpe_path``.

        Raises UserError if the file is missing or its sha256 differs from
        GPT2_BPE_SHA256.
        """
        self.bpe_path = Path(bpe_path)
        try:
            contents = self.bpe_path.read_bytes()
        except FileNotFoundError:
            raise UserError(f"GPT-2 BPE file '{self.bpe_path}' does not exist: {GPT2_FIX_HINT}") from None
        actual = sha256_bytes(contents)
        if actual != GPT2_BPE_SHA256:
            raise UserError(
                f"GPT-2 BPE file '{self.bpe_path}' has sha256 {actual}, expected {GPT2_BPE_SHA256}: {GPT2_FIX_HINT}"
            )
        import tiktoken  # here, not at the top: a char or bpe run never loads it
        import tiktoken_ext.openai_public

        ranks = parse_bpe_ranks(contents)
        self._enc = tiktoken.Encoding(
            name="gpt2",
            pat_str=tiktoken_ext.openai_public.r50k_pat_str,
            mergeable_ranks=ranks,
            special_tokens={"<|endoftext|>": self.eot_token},
            explicit_n_vocab=self.vocab_size,
        )

    def encode(self, text: str) -> list[int]:
        """Text -> list of BPE ids.

        Uses ``encode_ordinary``: a literal "<|endoftext|>" in user text is
        encoded as ordinary text, never as the special token.
        """
        return self._enc.encode_ordinary(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Several texts at once (tiktoken runs them on threads); same ids as ``encode``."""
        return self._enc.encode_ordinary_batch(list(texts))

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text; invalid UTF-8 byte sequences become U+FFFD (tiktoken's default)."""
        return self._enc.decode([int(i) for i in ids])

    def token_bytes(self) -> list[int]:
        """UTF-8 bytes of each id's text, ``(vocab_size,)``; 0 for ``<|endoftext|>``, which is no text."""
        return [len(self._enc.decode_single_token_bytes(i)) for i in range(self.eot_token)] + [0]

    def to_dict(self) -> dict:
        """JSON-able description: ``{"kind": "gpt2", "bpe_sha256": GPT2_BPE_SHA256}``."""
        return {"kind": "gpt2", "bpe_sha256": GPT2_BPE_SHA256}


# --------------------------------------------------------------------------- factory / persistence

TOKENIZER_KINDS = ("gpt2", "char", "bpe:N")


def build_tokenizer(
    kind: str, text: str | None = None, search_dirs: Iterable = (), train_texts: Iterable[str] | None = None
):
    """Make a tokenizer by name.

    Args:
        kind: "gpt2", "char" or "bpe:N" (N from 257 to 65,536).
        text: the corpus; required for "char" (its vocabulary is the corpus' characters).
        search_dirs: extra folders searched first for gpt2.tiktoken (see find_gpt2_bpe).
        train_texts: the train split's pieces, in order; required for "bpe:N" (trained on them).

    Returns CharTokenizer, GPT2Tokenizer or BPETokenizer.  Raises UserError for an unknown
    kind or a bad N; ValueError if "char" or "bpe:N" is asked for without its text (a caller bug).
    """
    size = parse_bpe_size(kind)
    if size is not None:
        if train_texts is None:
            raise ValueError(f"build_tokenizer({kind!r}) needs the train split's texts")
        return BPETokenizer.train(train_texts, size)
    if kind == "gpt2":
        return GPT2Tokenizer(find_gpt2_bpe(search_dirs))
    if kind == "char":
        if text is None:
            raise ValueError("build_tokenizer('char') needs the corpus text")
        return CharTokenizer.from_text(text)
    raise UserError(f"unknown tokenizer {kind!r}: use one of {', '.join(TOKENIZER_KINDS)}")


def tokenizer_from_dict(d: dict, search_dirs: Iterable = ()):
    """Inverse of ``to_dict()``.  Raises UserError for an unknown kind or wrong gpt2 hash."""
    kind = d.get("kind") if isinstance(d, dict) else None
    if kind == "char":
        return CharTokenizer(d.get("chars") or [])
    if kind == "gpt2":
        if d.get("bpe_sha256") != GPT2_BPE_SHA256:
            raise UserError(
                f"tokenizer says bpe_sha256={d.get('bpe_sha256')!r}, but tinygpt only knows GPT-2's "
                f"{GPT2_BPE_SHA256}: re-run python -m data.prepare --force"
            )
        return GPT2Tokenizer(find_gpt2_bpe(search_dirs))
    if kind == "bpe":
        return BPETokenizer.from_dict(d)
    raise UserError(f"unknown tokenizer kind {kind!r} in tokenizer data: use one of {', '.join(TOKENIZER_KINDS)}")


def save_tokenizer(tok, folder: Path) -> None:
    """Write ``folder/tokenizer.json`` (``tok.to_dict()``); for gpt2 also ``folder/gpt2.tiktoken``.

    Copying the (verified) BPE file makes the folder usable offline on its own.
    Both files are written atomically.  ``folder`` must exist.
    """
    folder = Path(folder)
    atomic_write_bytes(folder / TOKENIZER_FILENAME, (json.dumps(tok.to_dict(), ensure_ascii=False) + "\n").encode())
    if isinstance(tok, GPT2Tokenizer):
        target = folder / BPE_FILENAME
        if not (target.exists() and target.resolve() == tok.bpe_path.resolve()):
            atomic_write_bytes(target, tok.bpe_path.read_bytes())


def load_tokenizer(folder: Path):
    """Read ``folder/tokenizer.json`` and rebuild the tokenizer (gpt2: ``folder`` searched first).

    Raises UserError naming the file if it is missing or not valid JSON.
    """
    path = Path(folder) / TOKENIZER_FILENAME
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(
            f"tokenizer file '{path}' is missing: use a prepared-data or run folder that has one "
            "(re-run python -m data.prepare --force)"
        ) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(
            f"tokenizer file '{path}' is corrupt ({type(e).__name__}): re-run python -m data.prepare --force"
        ) from None
    return tokenizer_from_dict(d, search_dirs=(Path(folder),))
