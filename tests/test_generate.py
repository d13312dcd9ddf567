"""Generation: the KV cache gives the same tokens and logits as the full model; top-p, stops, batches.

Run: ``python -m pytest -q tests/test_generate.py``  (CPU, a few seconds).
"""

import math
import random

import pytest
import torch
from helpers import MODEL_CHOICES

from core.errors import UserError
from data.tokenizers import CharTokenizer
from model.config import GPTConfig
from model.generation import generate_text, stream_samples
from model.gpt import GPT
from model.kv_cache import KVCache
from model.sampling import sample_next

TINY = dict(vocab_size=97, block_size=16, n_layer=2, n_head=2, n_embd=32)


def tiny(tie: bool = True, **kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**TINY, "tie_embeddings": tie, **kw})).eval()


@pytest.mark.parametrize("tie", [True, False])
def test_greedy_with_the_cache_equals_without_it_past_block_size(tie):
    """Token for token, over 40 new tokens (the 16-token window slides 29 times), for a batch of 3."""
    model = tiny(tie)
    idx = torch.randint(0, 97, (3, 5), generator=torch.Generator().manual_seed(1))
    cached = model.generate(idx, 40, greedy=True)
    assert cached.shape == (3, 45)
    assert torch.equal(cached, model.generate(idx, 40, greedy=True, use_cache=False))
    long_prompt = torch.randint(0, 97, (2, 25), generator=torch.Generator().manual_seed(2))  # longer than the window
    assert torch.equal(
        model.generate(long_prompt, 10, greedy=True), model.generate(long_prompt, 10, greedy=True, use_cache=False)
    )


def test_seeded_sampling_with_the_cache_equals_without_it():
    """Temperature + top-k + top-p with the same seed: the same tokens with and without the cache."""
    model = tiny()
    idx = torch.randint(0, 97, (2, 3), generator=torch.Generator().manual_seed(3))
    kw = dict(temperature=0.9, top_k=20, top_p=0.9)
    a = model.generate(idx, 40, generator=torch.Generator().manual_seed(7), **kw)
    b = model.generate(idx, 40, generator=torch.Generator().manual_seed(7), use_cache=False, **kw)
    assert torch.equal(a, b)
    c = model.generate(idx, 40, generator=torch.Generator().manual_seed(8), **kw)
    assert not torch.equal(a, c)  # the seed matters: the check above is not between constant outputs


@pytest.mark.parametrize(
    "kw",
    [
        {},
        dict(temperature=0.7),
        dict(temperature=1.5),
        dict(top_k=5),
        dict(top_p=0.8),
        dict(top_k=40, top_p=0.95, temperature=1.2),
    ],
    ids=["plain", "cold", "hot", "top-k", "top-p", "combined"],
)
def test_every_sampling_mode_draws_the_same_tokens_with_and_without_the_cache(kw):
    """Same seed => same tokens, cache or not, over 6 seeds and 40 tokens (the 16-token window slides 29 times)."""
    model = tiny(tie=False)
    idx = torch.randint(0, 97, (2, 5), generator=torch.Generator().manual_seed(9))
    outs = set()
    for seed in range(6):
        a = model.generate(idx, 40, generator=torch.Generator().manual_seed(seed), **kw)
        b = model.generate(idx, 40, generator=torch.Generator().manual_seed(seed), use_cache=False, **kw)
        assert torch.equal(a, b), f"seed {seed} differs at {(a != b).nonzero()[0].tolist()}"
        outs.add(tuple(a.flatten().tolist()))
    assert len(outs) == 6  # the seeds matter: the check above is not between constant outputs


# Every model choice (tests/helpers.py): RoPE must rotate a cached key by the position the uncached
# window gives it, also after the window slides and the cache is filled again; GQA caches n_kv_head heads.
@pytest.mark.parametrize("choice", MODEL_CHOICES)
@pytest.mark.parametrize(
    "kw",
    [dict(greedy=True), {}, dict(temperature=0.7, top_k=5), dict(top_k=40, top_p=0.95, temperature=1.2)],
    ids=["greedy", "plain", "cold-top-k", "combined"],
)
def test_every_model_choice_draws_the_same_tokens_with_and_without_the_cache(choice, kw):
    """Same seed => same tokens, cache or not, for each model choice: 20 new tokens after a 5-token prompt
    (the 16-token window slides 9 times) and 4 after a 20-token prompt longer than the window."""
    model = tiny(tie=False, **MODEL_CHOICES[choice])
    outs = set()
    for seed, (length, new) in enumerate([(5, 20), (20, 4)]):
        idx = torch.randint(0, 97, (2, length), generator=torch.Generator().manual_seed(seed))
        a = model.generate(idx, new, generator=torch.Generator().manual_seed(seed), **kw)
        b = model.generate(idx, new, generator=torch.Generator().manual_seed(seed), use_cache=False, **kw)
        assert torch.equal(a, b), f"seed {seed} differs at {(a != b).nonzero()[0].tolist()}"
        outs.add(tuple(a[:, length:].flatten().tolist()))
    assert len(outs) == 2  # the prompts and seeds matter: the check above is not between constant outputs


def test_a_sample_does_not_depend_on_the_batch_it_is_drawn_in():
    """Row i of a seeded batch is the same tokens in a batch of 1, 3 or 5 rows (one noise stream per row)."""
    model = tiny()
    prompt = torch.randint(0, 97, (1, 4), generator=torch.Generator().manual_seed(10))
    out = {
        n: model.generate(prompt.expand(n, -1), 30, top_k=20, generator=torch.Generator().manual_seed(3))
        for n in (1, 3, 5)
    }
    assert torch.equal(out[1][0], out[3][0]) and torch.equal(out[3], out[5][:3])
    assert not torch.equal(out[5][0], out[5][1])  # rows draw different noise


@pytest.mark.parametrize("kw", [{}, dict(top_k=50), dict(top_p=0.99), dict(temperature=0.5, top_k=80, top_p=0.95)])
def test_a_one_ulp_swap_of_near_tied_logits_does_not_change_the_draw(kw):
    """Logits x and nextafter(x) on two tokens, then swapped: the sort order flips, the drawn tokens do not.

    Both tokens are kept either way (they rank near the top), so only the order a sort puts
    them in changes -- which, before the noise was keyed to token ids, chose which noise each token got.
    """
    logits = torch.randn(4, 97, generator=torch.Generator().manual_seed(11))
    a, b = 3, 60
    x = logits.max(dim=-1).values + 0.5  # the two near-tied tokens lead every row
    logits[:, a], logits[:, b] = x, torch.nextafter(x, torch.full_like(x, math.inf))
    swapped = logits.clone()
    swapped[:, a], swapped[:, b] = logits[:, b], logits[:, a]
    picked = set()
    for seed in range(200):
        first = sample_next(logits, generator=torch.Generator().manual_seed(seed), **kw)
        second = sample_next(swapped, generator=torch.Generator().manual_seed(seed), **kw)
        assert torch.equal(first, second), f"seed {seed}: {first.tolist()} vs {second.tolist()}"
        picked |= set(first.tolist())
    assert {a, b} <= picked  # both near-tied tokens do get drawn


@pytest.mark.parametrize("choice", ["gpt2", *MODEL_CHOICES])
def test_cached_logits_match_the_full_forward(choice):
    """Prefill, one token at a time, and a chunk after cached positions: each equals the uncached logits,
    for GPT-2's block and every model choice (RoPE: a cached key keeps the rotation of its position)."""
    model = tiny(**MODEL_CHOICES.get(choice, {}))
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = [model(idx[:, : t + 1])[0][:, -1] for t in range(16)]  # (2, 97) each: the last position of every prefix
        cache = KVCache(model.config)
        got = {5: model.decode(idx[:, :6], cache)}  # prefill 6 tokens
        head_t = model.lm_head.weight.t().contiguous()  # the transposed head generate_stream uses
        for t in range(6, 16):
            got[t] = model.decode(idx[:, t : t + 1], cache, head_t)  # one position, attending to the cache
        assert cache.length == 16
        chunked = KVCache(model.config)
        model.decode(idx[:, :4], chunked)
        got_chunk = model.decode(idx[:, 4:11], chunked)  # 7 positions after 4 cached ones: the masked path
    for t, logits in got.items():
        torch.testing.assert_close(logits, full[t], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_chunk, full[10], atol=1e-5, rtol=1e-5)


def test_a_full_cache_refuses_another_position():
    """The cache never silently runs past block_size (positions are learned, 0 .. block_size-1)."""
    model = tiny()
    cache = KVCache(model.config)
    model.decode(torch.zeros(1, 16, dtype=torch.long), cache)
    with pytest.raises(UserError, match="block_size"):
        model.decode(torch.zeros(1, 1, dtype=torch.long), cache)


def _draws(logits: torch.Tensor, n: int, seed: int = 0, **kw) -> torch.Tensor:
    """``n`` seeded draws from one row of logits, as one batch."""
    return sample_next(logits.expand(n, -1), generator=torch.Generator().manual_seed(seed), **kw)


def test_top_p_keeps_the_fewest_tokens_whose_mass_reaches_p():
    """Probabilities 0.5, 0.3, 0.15, 0.05: p=0.7 keeps two tokens, p=0.85 three, p=1 all, tiny p the top one."""
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()[[2, 0, 3, 1]]  # shuffled: ids 1, 3, 0, 2 by rank
    assert set(_draws(logits, 4000, top_p=0.7).tolist()) == {1, 3}
    assert set(_draws(logits, 4000, top_p=0.85).tolist()) == {1, 3, 0}
    assert set(_draws(logits, 4000, top_p=1.0).tolist()) == {1, 3, 0, 2}
    assert set(_draws(logits, 200, top_p=0.01).tolist()) == {1}


def test_top_p_sampling_follows_the_renormalised_nucleus():
    """The draws follow p_v / (mass of the nucleus) inside the nucleus, zero outside (checked empirically)."""
    logits = torch.tensor([2.0, 1.5, 1.0, 0.2, -0.5, -1.0])
    probs = torch.exp(logits - torch.logsumexp(logits, 0))  # 0.440, 0.267, 0.162, 0.073, 0.036, 0.022
    keep = torch.cumsum(probs, 0) - probs < 0.8  # mass before each token < p (tokens already sorted)
    want = torch.where(keep, probs, 0.0) / probs[keep].sum()
    n = 20000
    freq = torch.bincount(_draws(logits, n, top_p=0.8), minlength=6).float() / n
    torch.testing.assert_close(freq, want, atol=0.015, rtol=0)
    assert keep.sum() == 3 and freq[~keep].sum() == 0  # mass before the 4th token: 0.869 >= 0.8


def test_top_p_of_one_draws_exactly_as_no_top_p():
    """top_p=1 keeps the whole distribution and consumes the same noise: identical draws."""
    logits = torch.randn(97, generator=torch.Generator().manual_seed(5))
    assert torch.equal(_draws(logits, 500, top_p=1.0, top_k=30), _draws(logits, 500, top_k=30))


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, math.nan])
def test_top_p_outside_zero_one_is_an_error(bad):
    """top_p must be in (0, 1]."""
    with pytest.raises(UserError, match="top_p"):
        tiny().generate(torch.zeros(1, 2, dtype=torch.long), 1, top_p=bad)


def test_stop_token_finishes_rows_and_ends_the_stream():
    """A row that produced stop_token repeats it; the stream ends once every row has."""
    model = tiny()
    idx = torch.randint(0, 97, (2, 4), generator=torch.Generator().manual_seed(6))
    free = model.generate(idx, 12, greedy=True)[:, 4:]  # (2, 12) without a stop
    stop = int(free[0, 0])  # row 0 stops at once
    hits = (free[1] == stop).nonzero()
    steps = int(hits[0]) + 1 if len(hits) else 12  # row 1 runs until it produces the stop token too
    out = model.generate(idx, 12, greedy=True, stop_token=stop)[:, 4:]
    assert out.shape == (2, steps)
    assert (out[0] == stop).all()
    assert torch.equal(out[1], free[1, :steps])


CHARS = list("abcdefghijklmnopqrstuvwxyz .,\n")


def char_model() -> tuple[GPT, CharTokenizer]:
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**TINY, "vocab_size": len(CHARS)})).eval(), CharTokenizer(CHARS)


def test_a_sample_ends_just_before_a_stop_string_and_streams_no_part_of_it():
    """The streamed pieces join to the greedy text cut before the first stop string (never past it)."""
    model, tok = char_model()
    ids = tok.encode("the ")
    full = "".join(p[0] for p in stream_samples(model, tok, ids, 60, torch.device("cpu"), greedy=True))
    assert len(full) == 60
    stop = full[20:22]
    pieces = [p[0] for p in stream_samples(model, tok, ids, 60, torch.device("cpu"), greedy=True, stop=[stop])]
    assert "".join(pieces) == full[: full.find(stop)]
    assert all(stop not in piece for piece in pieces)
    text = "".join(generate_text(model, tok, "the ", 60, torch.device("cpu"), greedy=True, stop=["never there"]))
    assert text == "the " + full  # a stop string that never occurs changes nothing


def test_a_sample_ends_at_the_stop_token_which_is_not_shown():
    """stop_token ends the sample before that token's text."""
    model, tok = char_model()
    ids = tok.encode("the ")
    full = "".join(p[0] for p in stream_samples(model, tok, ids, 40, torch.device("cpu"), greedy=True))
    token = tok.encode(full[10])[0]
    text = "".join(
        p[0] for p in stream_samples(model, tok, ids, 40, torch.device("cpu"), greedy=True, stop_token=token)
    )
    assert text == full[: full.find(full[10])]


def test_num_samples_run_as_one_batch():
    """N greedy samples in one batch are N copies of the single sample; seeded samples differ per row."""
    model, tok = char_model()
    ids = tok.encode("the ")
    one = "".join(p[0] for p in stream_samples(model, tok, ids, 30, torch.device("cpu"), greedy=True))
    rows = ["", "", ""]
    for pieces in stream_samples(model, tok, ids, 30, torch.device("cpu"), num_samples=3, greedy=True):
        rows = [r + p for r, p in zip(rows, pieces)]
    assert rows == [one] * 3
    rows = ["", "", ""]
    for pieces in stream_samples(
        model, tok, ids, 30, torch.device("cpu"), num_samples=3, generator=torch.Generator().manual_seed(0)
    ):
        rows = [r + p for r, p in zip(rows, pieces)]
    assert len(set(rows)) == 3


class ScriptedModel:
    """Stands in for GPT in stream_samples: fixed token rows, one column per step, as generate_stream yields them.

    A row that produced ``stop_token`` repeats it and the stream ends once every row has, as in
    :meth:`GPT.generate_stream`; ``interrupt_after`` steps, a KeyboardInterrupt (Ctrl-C) is raised.
    """

    def __init__(self, rows: list[list[int]], interrupt_after: int | None = None):
        self.rows, self.interrupt_after = rows, interrupt_after

    def eval(self):
        return self

    def generate_stream(self, idx, max_new_tokens, stop_token=None, **sampling):
        finished = [False] * len(self.rows)
        for step in range(min(max_new_tokens, len(self.rows[0]))):
            if step == self.interrupt_after:
                raise KeyboardInterrupt
            ids = [stop_token if done else row[step] for row, done in zip(self.rows, finished)]
            finished = [done or i == stop_token for done, i in zip(finished, ids)]
            yield torch.tensor(ids)
            if stop_token is not None and all(finished):
                return


def whole_text_stream(model, tokenizer, max_new_tokens, num_samples, stop, stop_token):
    """The reference: stream_samples as it was before incremental decoding, re-decoding each whole sample at every step."""
    from model.generation import _held_back

    new, shown, done = [[] for _ in range(num_samples)], [0] * num_samples, [False] * num_samples
    for next_ids in model.generate_stream(None, max_new_tokens, stop_token=stop_token):
        pieces = [""] * num_samples
        for r, token in enumerate(next_ids.tolist()):
            if done[r]:
                continue
            if token == stop_token:
                done[r], pieces[r] = True, tokenizer.decode(new[r])[shown[r] :]
                continue
            new[r].append(token)
            text = tokenizer.decode(new[r])  # the whole sample, every step
            cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
            if cut >= 0:
                done[r], pieces[r] = True, text[shown[r] : cut]
            else:
                end = len(text) - _held_back(text, stop)
                pieces[r], shown[r] = text[shown[r] : end], max(shown[r], end)
        yield pieces
        if all(done):
            return
    yield ["" if done[r] else tokenizer.decode(new[r])[shown[r] :] for r in range(num_samples)]


def token_chunks(kind: str):
    """(tokenizer, chunks): runs of token ids to build streams from, with multi-byte characters split over tokens."""
    if kind == "char":
        chars = list("ab \n.é日\ufffd")  # U+FFFD as a real character, held back like half of one
        return CharTokenizer(chars), [[i] for i in range(len(chars))]
    from data.tokenizers import build_tokenizer

    tok = build_tokenizer("gpt2")
    byte = tok._enc.encode_single_token  # tiktoken: the token of one byte (no public way to name it)
    chunks = [[t] for t in tok.encode(" the cat sat.\n\nROMEO: é日本 🙂 café")]  # whole tokens, some multi-byte
    chunks += [[byte(bytes([b])) for b in ch.encode()] for ch in "é日本🙂\ufffd"]  # one token per byte of a character
    chunks += [[byte(bytes([b]))] for b in (0x80, 0xE6, 0xFF, 0xF0)]  # stray bytes: invalid or a character's start
    return tok, chunks


@pytest.mark.parametrize("kind", ["gpt2", "char"])
def test_streaming_equals_decoding_the_whole_text_every_step(kind):
    """Random token streams, stop strings, stop tokens, batches: every yield equals the whole-text reference.

    Streaming decodes only the tokens since the last clean point and searches for stops only near
    the new text; what it yields, step by step, must not change.
    """
    tok, chunks = token_chunks(kind)
    eot = getattr(tok, "eot_token", 1)
    rng = random.Random(0)
    cuts = 0
    for case in range(250):
        n, length = rng.randint(1, 3), rng.randint(1, 40)
        rows = [[t for _ in range(length) for t in rng.choice(chunks)][:length] for _ in range(n)]
        stop_token = eot if case % 3 == 0 else None
        if stop_token is not None:
            for row in rows:
                row[rng.randrange(length)] = eot if rng.random() < 0.5 else row[0]
        free = ["".join(p) for p in zip(*whole_text_stream(ScriptedModel(rows), tok, length, n, (), None))]
        text = rng.choice(free)
        stops = [
            text[i : i + rng.randint(1, 4)] for i in (rng.randrange(len(text) + 1) for _ in range(rng.randint(0, 3)))
        ]
        stops = [s for s in stops if s] + rng.sample(["é", "本 ", "\n\n", "\ufffd", "at."], rng.randint(0, 2))
        max_new = rng.randint(1, length)
        want = list(whole_text_stream(ScriptedModel(rows), tok, max_new, n, stops, stop_token))
        got = list(
            stream_samples(
                ScriptedModel(rows),
                tok,
                [0],
                max_new,
                torch.device("cpu"),
                num_samples=n,
                stop=stops,
                stop_token=stop_token,
            )
        )
        assert got == want, f"case {case}: rows {rows}, stops {stops!r}, stop_token {stop_token}, max_new {max_new}"
        cuts += sum(len("".join(p)) < len(f) for p, f in zip(zip(*want), free))
    assert cuts > 100  # the stops and stop tokens did end samples early


def test_ctrl_c_yields_the_text_held_back_then_stops():
    """A KeyboardInterrupt inside the model: the pieces then join to what max_new_tokens = the steps done gives."""
    tok, chunks = token_chunks("char")
    rows = [[6, 1, 0, 1, 2], [3, 6, 6, 6, 2]]  # '日ba' + 'b', '\n日日' + '日': each ends 3 steps in on a stop's start
    stops = ["ab", "日日日"]
    pieces = []
    with pytest.raises(KeyboardInterrupt):
        for p in stream_samples(
            ScriptedModel(rows, interrupt_after=3), tok, [0], 7, torch.device("cpu"), num_samples=2, stop=stops
        ):
            pieces.append(p)
    want = list(whole_text_stream(ScriptedModel(rows), tok, 3, 2, stops, None))
    assert ["".join(p) for p in zip(*pieces)] == ["".join(p) for p in zip(*want)] == ["日ba", "\n日日"]
    assert pieces[-1] == ["a", "日日"]  # the text held back at the interrupt comes out last


def test_no_part_of_a_stop_shows_when_its_next_character_arrives_split_across_tokens():
    """Stop "\\né" with é as two byte tokens: after "Hi", "\\n", 0xC3 nothing of "\\n" may show,
    since 0xA9 completes the stop; the sample is "Hi" and no streamed piece holds the newline."""
    from data.tokenizers import build_tokenizer

    tok = build_tokenizer("gpt2")
    raw = [tok.encode("Hi")[0], tok.encode("\n")[0]] + [tok._enc.encode_single_token(bytes([b])) for b in "é".encode()]
    assert tok.decode(raw) == "Hi\né" and len(raw) == 4
    pieces = [p[0] for p in stream_samples(ScriptedModel([raw]), tok, [0], 4, torch.device("cpu"), stop=["\né"])]
    assert "".join(pieces) == "Hi" and not any("\n" in p for p in pieces)
