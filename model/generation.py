"""Text generation over a trained model: prompts to token ids, and streaming a sample's text.

The library half of ``sample.py``; ``training/report.py`` (the end-of-run sample), ``experiment/runs/folders.py`` (the
side-by-side samples) and ``bench.py --stream`` use it too.  Tokens come from
:meth:`model.gpt.GPT.generate_stream`; here they become text, piece by piece, held back while
a piece could still be half of a character or the start of a stop string.  The tokenizer is any
object with ``encode(str) -> list[int]`` and ``decode(list[int]) -> str`` (``data.tokenizers``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from core.errors import UserError
from model.gpt import GPT


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """The prompt's token ids; raises :class:`UserError` for an empty prompt or one the tokenizer cannot encode."""
    if not prompt:
        raise UserError("the prompt is empty: give --prompt with some text (e.g. --prompt 'ROMEO:')")
    ids = tokenizer.encode(prompt)
    if not ids:
        raise UserError(f"the prompt {prompt!r} encodes to no tokens: give a longer prompt")
    return ids


def _held_back(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters of ``text`` may not be shown yet.

    A trailing U+FFFD is half of a multi-byte character (BPE tokens can split one), and a
    suffix that begins a stop string may turn into that stop string with the next token.
    Only the last ``max(len(stop)) - 1`` characters and the trailing U+FFFD run are read.
    """
    body = text.rstrip("\ufffd")
    pending = len(text) - len(body)  # half a character: whatever it becomes may continue a stop
    held = pending
    for stop in stops:
        # The stop's start is looked for before the pending half character, which may be its next character.
        k = next((k for k in range(min(len(stop) - 1, len(body)), 0, -1) if body.endswith(stop[:k])), 0)
        held = max(held, pending + k)
    return held


class _SampleText:
    """One sample's text as its tokens arrive, decoded with the same work per token at any length.

    The text is never re-decoded from its start.  Only the token ids since the last point
    where the text decoded cleanly (``tail``; a BPE token can end in half a UTF-8 character,
    which decodes to a trailing U+FFFD) are decoded again, which relies on
    ``decode(a + b) == decode(a) + decode(b)`` whenever ``decode(a)`` does not end in U+FFFD
    (true of UTF-8 with replacement, and of one character per token).  Of the settled text
    only the last ``max(len(stop)) - 1`` characters are kept: a stop string not found before
    must end in the new text, so it starts at most that far back.  ``window`` is the end of
    the sample's text, from character ``start`` on; ``shown`` counts the characters yielded.
    (Tokens that go on decoding to a trailing U+FFFD -- invalid bytes, one after another --
    stay in ``tail`` and are decoded again until one decodes cleanly.)
    """

    def __init__(self, tokenizer, stops: Sequence[str]) -> None:
        self.tokenizer, self.stops = tokenizer, stops
        self.keep = max((len(s) for s in stops), default=1) - 1
        self.tail: list[int] = []
        self.window, self.settled = "", 0  # window[:settled] is settled text, window[settled:] decodes tail
        self.start = self.shown = 0
        self.done = False

    def add(self, token: int) -> str:
        """Append one token id; return the text it lets us show ('' if none).  ``done`` once a stop is met."""
        self.tail.append(token)
        fresh = self.tokenizer.decode(self.tail)
        text = self.window[: self.settled] + fresh  # the sample's text from character self.start on
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.done = True
            return text[self.shown - self.start : cut]
        end = len(text) - _held_back(text, self.stops)
        piece = text[self.shown - self.start : end]
        self.shown = max(self.shown, self.start + end)
        self.window = text
        if not fresh.endswith("\ufffd"):  # a clean point: settle the text, keep only what a stop may need
            keep = min(len(text), self.keep)
            self.start += len(text) - keep
            self.window, self.settled, self.tail = text[len(text) - keep :], keep, []
        return piece

    def finish(self) -> str:
        """End the sample; return the text not shown yet ('' if it had already ended)."""
        piece = "" if self.done else self.window[self.shown - self.start :]
        self.done = True
        return piece


def stream_samples(
    model: GPT,
    tokenizer,
    prompt_ids: list[int],
    max_new_tokens: int,
    device: torch.device,
    num_samples: int = 1,
    stop: Sequence[str] = (),
    stop_token: int | None = None,
    **sampling,
) -> Iterator[list[str]]:
    """Continue ``prompt_ids`` ``num_samples`` times as one batch; yield each step's new text per sample.

    Each yield is a list of ``num_samples`` strings ('' where a sample has nothing new to
    show); joined, a sample's pieces are its continuation of the prompt.  A sample ends at
    ``stop_token`` (not shown), just before the first of the ``stop`` strings, or after
    ``max_new_tokens``; the batch ends when every sample has.  Text is shown only once it
    decodes cleanly and cannot be the start of a stop string (see :func:`_held_back`).  Each
    token costs the same whatever the length so far (see :class:`_SampleText`).  A
    ``KeyboardInterrupt`` while the model computes a step is re-raised after one last yield of
    the text held back, so the pieces then join to what ``max_new_tokens`` = the steps done
    would give.  ``sampling`` goes to :meth:`GPT.generate_stream` (temperature, top_k, top_p,
    greedy, generator, use_cache).
    """
    model.eval()
    idx = torch.tensor([prompt_ids] * num_samples, dtype=torch.long, device=device)  # (N, T)
    texts = [_SampleText(tokenizer, stop) for _ in range(num_samples)]
    steps = model.generate_stream(idx, max_new_tokens, stop_token=stop_token, **sampling)
    while True:
        try:
            next_ids = next(steps)  # (N,)
        except StopIteration:
            break
        except KeyboardInterrupt:  # Ctrl-C: end every sample where it stands, as max_new_tokens would
            yield [text.finish() for text in texts]
            raise
        pieces = [""] * num_samples
        for r, token in enumerate(next_ids.tolist()):
            if not texts[r].done:
                pieces[r] = texts[r].finish() if token == stop_token else texts[r].add(token)
        yield pieces
        if all(text.done for text in texts):
            return
    yield [text.finish() for text in texts]


def generate_text(
    model: GPT,
    tokenizer,
    prompt: str,
    max_new_tokens: int,
    device: torch.device,
    temperature: float = 1.0,
    top_k: int | None = None,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    **options,
) -> Iterator[str]:
    """Yield the prompt, then one sample's generated text piece by piece as tokens arrive.

    The pieces always join to the prompt plus the decoded continuation (cut at a stop).
    ``options`` are those of :func:`stream_samples` (``top_p``, ``stop``, ``stop_token``,
    ``use_cache``).  Raises :class:`UserError` for an empty prompt or one the tokenizer cannot
    encode, before anything is yielded.
    """
    ids = encode_prompt(tokenizer, prompt)
    yield prompt
    for pieces in stream_samples(
        model,
        tokenizer,
        ids,
        max_new_tokens,
        device,
        temperature=temperature,
        top_k=top_k,
        greedy=greedy,
        generator=generator,
        **options,
    ):
        if pieces[0]:
            yield pieces[0]
