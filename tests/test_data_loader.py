"""Tests for TokenData: batches, eval offsets, block-size checks and the unigram baseline, on one file and
over shards (every window, DDP rank halves, recorded id maxima).

Run from the repo root: ``python -m pytest -q tests/test_data_loader.py`` (CPU, offline, seconds).
"""

import json
import math

import numpy as np
import pytest
import torch
from data_helpers import split_tokens

from core.errors import UserError
from data.loader import TokenData
from data.prepare import prepare_data

# ----------------------------------------------------------------------------- loader


def test_token_data_missing_folder_is_user_error(tmp_path):
    """Opening a folder without meta.json tells the user to run data.prepare."""
    with pytest.raises(UserError, match="run python -m data.prepare"):
        TokenData(tmp_path)


def test_token_data_truncated_bin_is_user_error(token_data):
    """A shard whose size disagrees with meta.json raises UserError naming the file and --force."""
    path = token_data.folder / "val-00000.bin"
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(UserError, match=r"val-00000\.bin.*--force"):
        TokenData(token_data.folder)


def test_check_block_size_too_large_names_split(token_data):
    """block_size >= the val split's length raises UserError naming val and its token count."""
    n_val = token_data.num_tokens("val")
    token_data.check_block_size(n_val - 1)  # exactly block_size + 1 tokens is enough
    with pytest.raises(UserError, match=rf"too large for the val split \({n_val} tokens\)") as err:
        token_data.check_block_size(n_val)
    assert "raise --data.val_fraction" in str(err.value)  # a bigger val share is the fix for val


def test_check_block_size_hint_for_the_train_split_grows_the_train_split(tmp_path):
    """Too short a *train* split: the hint lowers val_fraction (raising it would shrink train further)."""
    p = tmp_path / "c.txt"
    p.write_text("abcdefghij\n" * 20)
    data = TokenData(prepare_data(str(p), "char", tmp_path / "cache", val_fraction=0.5))
    n_train = data.num_tokens("train")
    with pytest.raises(UserError, match="too large for the train split") as err:
        data.check_block_size(n_train)
    assert "lower --data.val_fraction" in str(err.value) and "raise --data.val_fraction" not in str(err.value)


def test_check_block_size_hint_for_short_shards_raises_shard_tokens(sharded):
    """A split with tokens enough but every shard too short for one window: the hint is a larger
    --data.shard_tokens (a window never crosses shards), not the val share."""
    longest = max(len(s) for s in sharded.shards("val"))
    assert sharded.num_tokens("val") > longest + 1
    with pytest.raises(UserError, match="longest shard") as err:
        sharded.check_block_size(longest)
    assert f"raise --data.shard_tokens above {longest}" in str(err.value)
    assert "val_fraction" not in str(err.value)


def test_get_batch_shapes_and_shift(token_data):
    """x, y are int64 (B, T); y is x shifted by one token; both match the data at the window start."""
    x, y = token_data.get_batch("train", 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    data = torch.from_numpy(split_tokens(token_data.folder, "train").astype(np.int64))
    for row_x, row_y in zip(x, y, strict=True):
        starts = [i for i in range(len(data) - 16) if torch.equal(data[i : i + 16], row_x)]
        assert any(torch.equal(data[i + 1 : i + 17], row_y) for i in starts)


def test_get_batch_is_determined_by_generator_state(token_data):
    """Restoring a generator's state reproduces the next batch bit-exactly (resume)."""
    g = torch.Generator().manual_seed(123)
    token_data.get_batch("train", 2, 8, g)
    state = g.get_state()
    first = token_data.get_batch("train", 2, 8, g)
    g2 = torch.Generator()
    g2.set_state(state)
    again = token_data.get_batch("train", 2, 8, g2)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))


def test_eval_offsets_fixed_by_seed(token_data):
    """eval_offsets is (n_batches, B), identical for one seed, different for another, and in range."""
    a = token_data.eval_offsets("val", 3, 5, 8, seed=7)
    assert a.shape == (3, 5)
    assert torch.equal(a, token_data.eval_offsets("val", 3, 5, 8, seed=7))
    assert not torch.equal(a, token_data.eval_offsets("val", 3, 5, 8, seed=8))
    assert int(a.max()) < token_data.num_tokens("val") - 8


def test_eval_offsets_of_a_larger_batch_hold_the_smaller_ones(token_data):
    """A larger global batch evaluates the smaller batch's windows first, then more (docs/experiment.md):
    arms of one seed with other batch sizes read their curves on nested windows, not other text."""
    small = token_data.eval_offsets("val", 3, 4, 8, seed=7)
    large = token_data.eval_offsets("val", 3, 8, 8, seed=7)
    assert torch.equal(small.flatten(), large.flatten()[: small.numel()])


def test_batch_at_reads_given_offsets(token_data):
    """batch_at returns the windows starting at exactly the given offsets."""
    x, y = token_data.batch_at("val", torch.tensor([0, 5]), 4)
    val = torch.from_numpy(split_tokens(token_data.folder, "val").astype(np.int64))
    assert torch.equal(x, torch.stack([val[0:4], val[5:9]]))
    assert torch.equal(y, torch.stack([val[1:5], val[6:10]]))


def test_unigram_baseline_is_cross_entropy_of_smoothed_train_frequencies(token_data):
    """unigram_val_loss = mean over val tokens of -log((count_train(t) + 1) / (N_train + V))."""
    train, val = (split_tokens(token_data.folder, s).tolist() for s in ("train", "val"))
    counts = {}
    for t in train:
        counts[t] = counts.get(t, 0) + 1
    n, v = len(train), token_data.vocab_size
    expected = sum(-math.log((counts.get(t, 0) + 1) / (n + v)) for t in val) / len(val)
    assert token_data.unigram_val_loss() == pytest.approx(expected, rel=1e-9)
    assert 0 < token_data.unigram_val_loss() < math.log(v)  # frequencies beat the uniform guess


def test_unigram_baseline_on_the_final_windows_reads_their_targets(token_data):
    """unigram_val_loss(block_size, max_tokens) averages over the targets of the final score's windows:
    val[k * block_size + 1 : (k + 1) * block_size + 1] for the first max_tokens // block_size windows."""
    train, val = (split_tokens(token_data.folder, s).tolist() for s in ("train", "val"))
    counts = {}
    for t in train:
        counts[t] = counts.get(t, 0) + 1
    n, v, block = len(train), token_data.vocab_size, 4
    targets = [t for k in range(3) for t in val[k * block + 1 : (k + 1) * block + 1]]
    expected = sum(-math.log((counts.get(t, 0) + 1) / (n + v)) for t in targets) / len(targets)
    assert token_data.unigram_val_loss(block_size=block, max_tokens=3 * block + 2) == pytest.approx(expected, rel=1e-9)


def test_tiling_windows_tile_one_shard_from_its_start(token_data):
    """tiling_offsets on one shard: every block_size-th token while a window fits, capped by max_tokens."""
    n = token_data.num_tokens("val") - 8
    assert torch.equal(token_data.tiling_offsets("val", 8, 10**9), torch.arange(-(-n // 8)) * 8)
    assert torch.equal(token_data.tiling_offsets("val", 8, 8 * 3 + 5), torch.arange(3) * 8)
    assert torch.equal(token_data.tiling_offsets("val", 8, 1), torch.zeros(1, dtype=torch.int64))


# ----------------------------------------------------------------------------- loader over shards


def test_positions_cover_every_window_of_every_shard_and_none_across_shards(sharded):
    """Positions 0..N-1 map, in order, to every window of shard 0, then shard 1, ...; no window spans two."""
    block = 16
    for split in ("train", "val"):
        shards = sharded.shards(split)
        assert len(shards) >= 2
        expected = [np.asarray(s[i : i + block + 1], dtype=np.int64) for s in shards for i in range(len(s) - block)]
        n = sharded.num_positions(split, block)
        assert n == len(expected)
        x, y = sharded.batch_at(split, torch.arange(n), block)
        got = torch.cat([x, y[:, -1:]], dim=1).numpy()
        assert np.array_equal(got, np.stack(expected))
        with pytest.raises(ValueError, match="positions must be in"):
            sharded.batch_at(split, torch.tensor([n]), block)


def test_tiling_windows_tile_every_shard_from_its_start(sharded):
    """With several val shards the final score's windows tile each shard from its first token, in
    order (shard i: tokens [k * block, (k + 1) * block] while they fit), so no shard is skipped."""
    for block in (16, 200):
        shards = sharded.shards("val")
        expected = [
            np.asarray(s[i : i + block + 1], dtype=np.int64) for s in shards for i in range(0, len(s) - block, block)
        ]
        x, y = sharded.batch_at("val", sharded.tiling_offsets("val", block, 10**9), block)
        assert np.array_equal(torch.cat([x, y[:, -1:]], dim=1).numpy(), np.stack(expected))
        capped = sharded.tiling_offsets("val", block, 3 * block)
        assert torch.equal(capped, sharded.tiling_offsets("val", block, 10**9)[:3])


def test_one_shard_gives_exactly_the_old_offsets_and_batches(token_data):
    """One shard: get_batch draws torch.randint(len - block_size, (B,)) -- the pre-shard formula -- and reads
    the windows at those token offsets; eval_offsets likewise."""
    g, ref = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    (shard,) = token_data.shards("train")
    for _ in range(3):
        x, y = token_data.get_batch("train", 8, 16, g)
        offsets = torch.randint(len(shard) - 16, (8,), generator=ref)
        tokens = torch.from_numpy(np.asarray(shard, dtype=np.int64))
        assert torch.equal(x, torch.stack([tokens[o : o + 16] for o in offsets]))
        assert torch.equal(y, torch.stack([tokens[o + 1 : o + 17] for o in offsets]))
    assert torch.equal(g.get_state(), ref.get_state())
    (val,) = token_data.shards("val")
    expected = torch.randint(len(val) - 8, (3, 5), generator=torch.Generator().manual_seed(4))
    assert torch.equal(token_data.eval_offsets("val", 3, 5, 8, seed=4), expected)


def test_two_ranks_read_the_two_halves_of_one_process_batch(sharded):
    """world_size=2 x batch b == one process x batch 2b, step after step, and every generator ends in the same state."""
    seed, b, block = 5, 3, 16
    one, r0, r1 = (torch.Generator().manual_seed(seed) for _ in range(3))
    for _ in range(4):
        x, y = sharded.get_batch("train", 2 * b, block, one)
        x0, y0 = sharded.get_batch("train", b, block, r0, rank=0, world_size=2)
        x1, y1 = sharded.get_batch("train", b, block, r1, rank=1, world_size=2)
        assert torch.equal(torch.cat([x0, x1]), x) and torch.equal(torch.cat([y0, y1]), y)
        assert not torch.equal(x0, x1)
    assert torch.equal(one.get_state(), r0.get_state()) and torch.equal(r0.get_state(), r1.get_state())
    with pytest.raises(ValueError, match="rank"):
        sharded.get_batch("train", b, block, one, rank=2, world_size=2)


def test_unigram_baseline_over_shards_and_its_bounded_version(sharded, monkeypatch):
    """Exact over all shards for a small corpus; with the token budget lowered it uses the first N tokens
    of each split (frequencies from train's head, the mean over val's head), read in chunks."""
    import data.loader as L

    def baseline(train, val):
        counts = np.bincount(train, minlength=sharded.vocab_size).astype(np.float64) + 1.0
        log_probs = np.log(counts) - np.log(counts.sum())
        return float(-log_probs[val].mean())

    train, val = (np.concatenate(sharded.shards(s)) for s in ("train", "val"))
    assert sharded.unigram_val_loss() == baseline(train, val)
    monkeypatch.setattr(L, "UNIGRAM_TOKENS", 700)
    monkeypatch.setattr(L, "CHUNK_TOKENS", 128)
    assert sharded.unigram_val_loss() == pytest.approx(baseline(train[:700], val[:700]), rel=1e-12)


def test_big_corpus_checks_recorded_max_ids_and_a_sample(sharded, monkeypatch):
    """Above the full-scan size, a shard holding an id above the maximum meta.json records for it (the file
    changed after preparation) is refused, and so is a recorded maximum >= vocab_size; both name the file."""
    import data.loader as L

    monkeypatch.setattr(L, "FULL_SCAN_TOKENS", 0)
    TokenData(sharded.folder)  # a clean folder passes the sampled check
    meta_path = sharded.folder / "meta.json"
    meta = json.loads(meta_path.read_text())
    shard = meta["splits"]["train"]["shards"][1]
    top = shard["max_id"]
    shard["max_id"] = top - 1  # the file now holds an id above the recorded maximum
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(
        UserError,
        match=rf"token file '.*{shard['file']}' holds token id {top} "
        rf"but meta.json records at most {top - 1}: .*--force",
    ):
        TokenData(sharded.folder)
    shard["max_id"] = meta["vocab_size"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(
        UserError,
        match=rf"'.*{shard['file']}' holds token id {meta['vocab_size']} but meta.json "
        r"says vocab_size",
    ):
        TokenData(sharded.folder)


def test_sampled_id_scan_reads_head_tail_and_spaced_runs():
    """The big-corpus check reads about ``budget`` tokens of a shard, including its first and last ones."""
    from data.loader import _sample_max_id

    tokens = np.zeros(100_000, dtype="<u2")
    assert _sample_max_id(tokens, 64) == 0
    for at in (0, len(tokens) - 1):
        spiked = tokens.copy()
        spiked[at] = 7
        assert _sample_max_id(spiked, 64) == 7
    spiked = tokens.copy()
    spiked[50_001] = 9  # between the sampled runs: the price of a bounded check
    assert _sample_max_id(spiked, 64) == 0 and _sample_max_id(spiked, len(tokens)) == 9
