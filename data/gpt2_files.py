"""Finding GPT-2's BPE rank file (``gpt2.tiktoken``) without the internet.

GPT-2's BPE needs its merge ranks (the ``gpt2.tiktoken`` file, 835,554 bytes).
tinygpt must work offline, so :func:`find_gpt2_bpe` looks for that file along a
fixed route (a folder's own copy, ``$TINYGPT_GPT2_BPE``, our cache, a Hugging Face
folder's ``vocab.json``, tiktoken's download URL, then the copy shipped inside the
``openai-whisper`` sdist on PyPI) and only ever accepts a file whose sha256 is :data:`GPT2_BPE_SHA256`.
Used by :class:`data.tokenizers.GPT2Tokenizer`.
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
from collections.abc import Iterable
from pathlib import Path

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

GPT2_FIX_HINT = (
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


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (``encoder.py`` in openai/gpt-2), as vocab.json spells tokens."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    rest = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(rest)}}


def ranks_from_vocab(vocab_path: Path) -> bytes:
    """The ``gpt2.tiktoken`` bytes rebuilt from a Hugging Face GPT-2 folder's ``vocab.json``, or ``b""``.

    vocab.json maps each token, spelt through :func:`bytes_to_unicode`, to its id, which is
    its rank (``<|endoftext|>`` aside); the rank file lists ``<base64 bytes> <rank>`` in rank
    order.  Whether the result is GPT-2's is for the caller's sha256 check to say: an unreadable
    or foreign vocab.json gives bytes (or ``b""``) that fail it.
    """
    try:
        vocab = json.loads(Path(vocab_path).read_text(encoding="utf-8"))
        byte_of = {c: b for b, c in bytes_to_unicode().items()}
        tokens = sorted(
            (rank, bytes(byte_of[c] for c in text)) for text, rank in vocab.items() if text != "<|endoftext|>"
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return b""
    return b"".join(base64.b64encode(tok) + b" %d\n" % rank for rank, tok in tokens)


def _fetch_via_tiktoken() -> bytes:
    """Download the ranks with tiktoken's own downloader+cache; raises on any failure.

    tiktoken uses ``requests.get`` without a timeout; urllib3 then falls back
    to the socket default timeout, so setting it bounds a hung connection.
    """
    import tiktoken.load  # only on this rare route; a run that never downloads never loads tiktoken

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
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", _WHISPER_SDIST, "-d", tmp]
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
    4. ``<dir>/vocab.json`` (a Hugging Face GPT-2 folder's) rebuilt into the rank
       file (:func:`ranks_from_vocab`), if the result's sha256 is right.
    5. tiktoken's download URL (fails fast without internet).
    6. ``pip download`` of the openai-whisper sdist from PyPI; the member
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
            raise UserError(f"TINYGPT_GPT2_BPE='{p}' is not a file: {GPT2_FIX_HINT}")
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
        print(
            f"warning: ignoring '{cached}': sha256 {actual} != expected {GPT2_BPE_SHA256}; re-fetching", file=sys.stderr
        )

    # A Hugging Face GPT-2 folder holds the ranks as vocab.json: rebuilt here, offline, before any download.
    for d in search_dirs:
        vocab = Path(d) / "vocab.json"
        data = ranks_from_vocab(vocab) if vocab.is_file() else b""
        if data and sha256_bytes(data) == GPT2_BPE_SHA256:
            atomic_write_bytes(cached, data)
            return cached

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
        f"GPT-2 BPE ranks could not be found or fetched ({', '.join(failures)}{bad_cache}): {GPT2_FIX_HINT}"
    )
