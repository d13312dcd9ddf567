"""Tokenizers for tinygpt: a character-level one and GPT-2's byte-level BPE.

Both map text to a flat list of integer token ids and back, and both can be
saved into (and restored from) a folder as ``tokenizer.json`` so that a
prepared-data folder or a run folder is self-contained.

GPT-2's BPE needs its merge ranks (the ``gpt2.tiktoken`` file, 835,554 bytes).
tinygpt must work offline, so :func:`find_gpt2_bpe` looks for that file along a
fixed route (a folder's own copy, ``$TINYGPT_GPT2_BPE``, our cache, tiktoken's
download URL, then the copy shipped inside the ``openai-whisper`` sdist on
PyPI) and only ever accepts a file whose sha256 is :data:`GPT2_BPE_SHA256`.

Library module, not a script.  Quick check from the repo root::

    python -c "from data.tokenizers import build_tokenizer as b; print(b('gpt2').encode('Hello world'))"
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public

from core.errors import UserError
from core.files import atomic_write_bytes, cache_dir, sha256_bytes, sha256_file

# sha256 of the r50k_base / gpt2 rank file, as pinned by tiktoken itself in
# tiktoken_ext/openai_public.py (r50k_base: same ranks and regex as "gpt2").
GPT2_BPE_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"

# tiktoken's canonical download location for the same file (tiktoken_ext/openai_public.py).
_TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"

# openai-whisper ships the identical file as whisper/assets/gpt2.tiktoken; its
# sdist on PyPI is the one copy reachable when only PyPI is.  Pinned so the
# bytes are always the same (the sha256 is still checked).
_WHISPER_SDIST = "openai-whisper==20250625"
_WHISPER_MEMBER_SUFFIX = "whisper/assets/gpt2.tiktoken"

BPE_FILENAME = "gpt2.tiktoken"
TOKENIZER_FILENAME = "tokenizer.json"

_FIX_HINT = (
    f"set TINYGPT_GPT2_BPE to a gpt2.tiktoken file with sha256 {GPT2_BPE_SHA256} "
    f"(e.g. from `pip download --no-deps --no-binary :all: {_WHISPER_SDIST}`, "
    f"file {_WHISPER_MEMBER_SUFFIX}), or use --data.tokenizer=char"
)


def parse_bpe_ranks(contents: bytes) -> dict[bytes, int]:
    """A tiktoken rank file (``<base64 token> <rank>`` per line) as ``{token bytes: rank}``.

    The parsing of ``tiktoken.load.load_tiktoken_bpe``, which is not called because its
    ``read_file_cached`` copies every distinct local path into ``<tmp>/data-gym-cache``.
    """
    return {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in contents.splitlines() if line)}


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
    def from_text(cls, text: str) -> "CharTokenizer":
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
            raise UserError(f"GPT-2 BPE file '{self.bpe_path}' does not exist: {_FIX_HINT}") from None
        actual = sha256_bytes(contents)
        if actual != GPT2_BPE_SHA256:
            raise UserError(
                f"GPT-2 BPE file '{self.bpe_path}' has sha256 {actual}, expected {GPT2_BPE_SHA256}: {_FIX_HINT}"
            )
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

    def to_dict(self) -> dict:
        """JSON-able description: ``{"kind": "gpt2", "bpe_sha256": GPT2_BPE_SHA256}``."""
        return {"kind": "gpt2", "bpe_sha256": GPT2_BPE_SHA256}


def _fetch_via_tiktoken() -> bytes:
    """Download the ranks with tiktoken's own downloader+cache; raises on any failure.

    tiktoken uses ``requests.get`` without a timeout; urllib3 then falls back
    to the socket default timeout, so setting it bounds a hung connection.
    """
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(15)
    try:
        return tiktoken.load.read_file_cached(_TIKTOKEN_URL, expected_hash=GPT2_BPE_SHA256)
    finally:
        socket.setdefaulttimeout(old)


def _fetch_via_pypi() -> bytes:
    """Get the ranks out of the openai-whisper sdist from PyPI (never installs it).

    Raises RuntimeError (with pip's last output line) when pip fails or the
    member is missing.  Takes a few seconds (the sdist is ~0.8 MB).
    """
    print(f"note: fetching GPT-2 BPE ranks from PyPI ({_WHISPER_SDIST} sdist)...", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="tinygpt-whisper-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               _WHISPER_SDIST, "-d", tmp]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            raise RuntimeError("pip download timed out after 300 s") from None
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            raise RuntimeError(f"pip download failed: {lines[-1] if lines else proc.returncode}")
        sdists = sorted(Path(tmp).glob("*.tar.gz"))
        if not sdists:
            raise RuntimeError("pip download produced no .tar.gz sdist")
        with tarfile.open(sdists[0], "r:gz") as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.endswith(_WHISPER_MEMBER_SUFFIX):
                    f = tar.extractfile(member)
                    assert f is not None  # isfile() members always have data
                    return f.read()
        raise RuntimeError(f"{sdists[0].name} has no {_WHISPER_MEMBER_SUFFIX}")


def find_gpt2_bpe(search_dirs: Iterable = ()) -> Path:
    """Return the path of a ``gpt2.tiktoken`` file whose sha256 is GPT2_BPE_SHA256.

    Route, first hit wins (a file with the wrong hash is never returned):

    1. ``<dir>/gpt2.tiktoken`` for each dir in ``search_dirs`` (a run or
       prepared-data folder carries its own copy); a wrong-hash copy is
       reported on stderr and skipped.
    2. ``$TINYGPT_GPT2_BPE``: missing file or wrong hash -> UserError.
    3. ``<cache_dir()>/gpt2.tiktoken``; a wrong-hash copy is reported on
       stderr and replaced if a fetch below succeeds.
    4. tiktoken's download URL (fails fast without internet).
    5. ``pip download`` of the openai-whisper sdist from PyPI; the member
       ``whisper/assets/gpt2.tiktoken`` is hash-checked.

    Fetched bytes are written atomically to the cache.  Raises UserError
    (one line, with the fixes) if every route fails.
    """
    for d in search_dirs:
        p = Path(d) / BPE_FILENAME
        if p.is_file():
            actual = sha256_file(p)
            if actual == GPT2_BPE_SHA256:
                return p
            print(f"warning: ignoring '{p}': sha256 {actual} != expected {GPT2_BPE_SHA256}", file=sys.stderr)

    env = os.environ.get("TINYGPT_GPT2_BPE")
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise UserError(f"TINYGPT_GPT2_BPE='{p}' is not a file: {_FIX_HINT}")
        actual = sha256_file(p)
        if actual != GPT2_BPE_SHA256:
            raise UserError(
                f"TINYGPT_GPT2_BPE file '{p}' has sha256 {actual}, expected {GPT2_BPE_SHA256}: "
                "point it at an unmodified gpt2.tiktoken (or unset it)"
            )
        return p

    cached = cache_dir() / BPE_FILENAME
    bad_cache = ""
    if cached.is_file():
        actual = sha256_file(cached)
        if actual == GPT2_BPE_SHA256:
            return cached
        bad_cache = f"; cached '{cached}' has wrong sha256 {actual}"
        print(f"warning: ignoring '{cached}': sha256 {actual} != expected {GPT2_BPE_SHA256}; re-fetching",
              file=sys.stderr)

    failures = []
    for label, fetch in (("tiktoken download", _fetch_via_tiktoken), ("PyPI", _fetch_via_pypi)):
        try:
            data = fetch()
        except Exception as e:  # any network/pip/tar failure just means "try the next route"
            failures.append(f"{label}: {type(e).__name__}")
            continue
        actual = sha256_bytes(data)
        if actual != GPT2_BPE_SHA256:
            failures.append(f"{label}: sha256 {actual}")
            continue
        atomic_write_bytes(cached, data)
        return cached

    raise UserError(
        f"GPT-2 BPE ranks could not be found or fetched ({', '.join(failures)}{bad_cache}): {_FIX_HINT}"
    )


# --------------------------------------------------------------------------- factory / persistence

TOKENIZER_KINDS = ("gpt2", "char")


def build_tokenizer(kind: str, text: str | None = None, search_dirs: Iterable = ()):
    """Make a tokenizer by name.

    Args:
        kind: "gpt2" or "char".
        text: the corpus; required for "char" (its vocabulary is the corpus' characters).
        search_dirs: extra folders searched first for gpt2.tiktoken (see find_gpt2_bpe).

    Returns CharTokenizer or GPT2Tokenizer.  Raises UserError for an unknown
    kind; ValueError if "char" is asked for without text (a caller bug).
    """
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
