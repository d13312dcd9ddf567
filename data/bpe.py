"""A byte-level BPE of any size trained on the corpus itself: ``--data.tokenizer=bpe:N``.

The vocabulary-size axis of the tied-vs-untied experiment needs tokenizers between the
65 characters of Tiny Shakespeare and GPT-2's 50,257 tokens.  :class:`BPETokenizer`
trains one with Hugging Face ``tokenizers`` (``BpeTrainer``) on the *train split* of the
corpus, with GPT-2's byte-level pre-tokenizer (its regex, no prefix space) and all 256
byte tokens in the vocabulary, so any text round-trips: ``decode(encode(t)) == t``.
Training on the same pieces in the same order gives the same merges (checked by a test).

The trained tokenizer is stored inside tinygpt's own ``tokenizer.json`` (``{"kind": "bpe",
"hf": <Hugging Face's tokenizer JSON>}``), so a prepared-data or run folder needs nothing
else.

    python -c "from data.bpe import BPETokenizer as B; t = B.train(['to be or not to be'] * 9, 260); print(t.encode('to be'))"
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: a char or gpt2 run never loads the library (3.2 MiB of memory)
    from tokenizers import Tokenizer

from core.errors import UserError

MIN_VOCAB = 257  # the 256 byte tokens plus at least one merge
MAX_VOCAB = 65_536  # token files are uint16 up to this size (data/shards.py); larger would double them
# At most this many characters of the train split train the merges: enough for a stable 64k
# vocabulary, and a bound on time and memory for a multi-gigabyte hub corpus (the first pieces, in order).
MAX_TRAIN_CHARS = 200_000_000


def parse_bpe_size(kind: str) -> int | None:
    """``"bpe:4096"`` -> 4096; None if ``kind`` is not a ``bpe:`` name.

    Raises UserError for a ``bpe:`` name whose size is not an integer in [257, 65536].
    """
    if not kind.startswith("bpe:"):
        return None
    size = kind[4:]
    if not size.isdigit() or not MIN_VOCAB <= int(size) <= MAX_VOCAB:
        raise UserError(
            f"tokenizer {kind!r}: N in bpe:N must be an integer from {MIN_VOCAB} (256 bytes + 1 merge) "
            f"to {MAX_VOCAB:,} (uint16 token files), e.g. --data.tokenizer=bpe:4096"
        )
    return int(size)


def check_trained_size(kind: str, trained: int, allow_smaller: bool, source: str) -> str | None:
    """Judge a ``bpe:N`` tokenizer that trained ``trained`` tokens: None if it reached N.

    A corpus with too few distinct pairs stops merging early (a 30 KB text gives bpe:4096 about
    1,500 tokens), and a run labelled ``bpe:4096`` would then silently be another experiment.
    Raises :class:`UserError` (naming the size reached and the fixes) unless ``allow_smaller``;
    then returns the note to print.  ``kind`` is the ``--data.tokenizer`` value.
    """
    asked = parse_bpe_size(kind)
    if asked is None or trained >= asked:
        return None
    if not allow_smaller:
        smaller = 1 << (trained.bit_length() - 1)  # the largest power of two it reaches
        smaller = smaller if smaller >= MIN_VOCAB else trained
        raise UserError(
            f"--data.tokenizer={kind}: the train split of {source!r} yields only {trained:,} tokens (it has no more "
            f"pairs to merge): give a smaller size such as --data.tokenizer=bpe:{smaller}, or "
            f"--data.allow_smaller_vocab=true to train with {trained:,} tokens"
        )
    return (
        f"note: {kind} trained {trained:,} tokens, not {asked:,}: the train split of {source!r} has no more "
        "pairs to merge (--data.allow_smaller_vocab=true); the run records the real size"
    )


def tokenizer_label(kind: str, vocab_size: int | None) -> str:
    """``kind`` as a person should read it: ``"bpe:4096 (1,527 tokens trained)"`` when a bpe:N fell short of N."""
    asked = parse_bpe_size(kind) if kind.startswith("bpe:") else None
    if asked is None or vocab_size is None or vocab_size >= asked:
        return kind
    return f"{kind} ({vocab_size:,} tokens trained)"


def _take_chars(texts: Iterable[str], limit: int):
    """The texts in order until ``limit`` characters have been given (the last one whole)."""
    seen = 0
    for text in texts:
        if seen >= limit:
            return
        seen += len(text)
        yield text


class BPETokenizer:
    """A byte-level BPE trained with Hugging Face ``tokenizers``; ids ``0..vocab_size-1``.

    Attributes:
        vocab_size: the tokens in the vocabulary; the N asked for unless the corpus has
            too few distinct pairs to merge that far.
        name: ``"bpe:<vocab_size asked for>"``, the ``--data.tokenizer`` value.
    """

    def __init__(self, tokenizer: Tokenizer, name: str) -> None:
        self._tk = tokenizer
        self.name = name
        self.vocab_size = tokenizer.get_vocab_size()

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> BPETokenizer:
        """Learn ``vocab_size - 256`` merges from ``texts`` (the train split's pieces, in order).

        Each text is pre-tokenized on its own (GPT-2's regex), so pieces that end mid-word
        never merge across the boundary.  Uses at most :data:`MAX_TRAIN_CHARS` characters.
        Raises UserError if ``vocab_size`` is out of range or the texts are empty.
        """
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        parse_bpe_size(f"bpe:{vocab_size}")
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tk.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=[],
            show_progress=False,
        )
        tk.train_from_iterator(_take_chars(texts, MAX_TRAIN_CHARS), trainer=trainer)
        if tk.get_vocab_size() <= 256:
            raise UserError("cannot train a BPE tokenizer on an empty train split: give a corpus with text in it")
        return cls(tk, f"bpe:{vocab_size}")

    @classmethod
    def from_dict(cls, d: dict) -> BPETokenizer:
        """Inverse of :meth:`to_dict`.  Raises UserError if the stored tokenizer is unreadable."""
        from tokenizers import Tokenizer

        try:
            tk = Tokenizer.from_str(json.dumps(d["hf"]))
            return cls(tk, str(d["name"]))
        except Exception as e:  # noqa: BLE001 (tokenizers raises a plain Exception for bad JSON)
            raise UserError(
                f"the stored bpe tokenizer is unreadable ({type(e).__name__}): re-run python -m data.prepare --force"
            ) from None

    def encode(self, text: str) -> list[int]:
        """Text -> list of ids (no special tokens are added)."""
        return self._tk.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Several texts at once (Rust threads); same ids as :meth:`encode`."""
        return [e.ids for e in self._tk.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text; a cut UTF-8 sequence becomes U+FFFD.  IndexError-free: unknown ids are dropped."""
        return self._tk.decode([int(i) for i in ids], skip_special_tokens=False)

    def token_bytes(self) -> list[int]:
        """UTF-8 bytes of each id's text, ``(vocab_size,)``: the denominator of bits per byte.

        A byte-level token is spelled with one printable character per byte (GPT-2's table), and
        this vocabulary has no special tokens, so its length in characters is its length in bytes.
        """
        return [len(self._tk.id_to_token(i)) for i in range(self.vocab_size)]

    def hf_tokenizer(self) -> Tokenizer:
        """The Hugging Face ``tokenizers.Tokenizer`` itself (for export)."""
        return self._tk

    def to_dict(self) -> dict:
        """JSON-able description: ``{"kind": "bpe", "name": "bpe:N", "hf": <the tokenizer's JSON>}``."""
        return {"kind": "bpe", "name": self.name, "hf": json.loads(self._tk.to_str())}
