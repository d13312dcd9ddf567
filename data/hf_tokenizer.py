"""The tokenizer files of an exported Hugging Face folder: GPT-2's ``vocab.json`` / ``merges.txt`` and ours.

Used by ``hf.py export`` beside :func:`model.hf.export`, which writes the weights.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from core import optional
from core.errors import UserError
from core.files import atomic_write_bytes
from data.bpe import BPETokenizer
from data.gpt2_files import bytes_to_unicode
from data.tokenizers import GPT2Tokenizer, parse_bpe_ranks

TOKENIZER_FILE = "tinygpt_tokenizer.json"  # our own tokenizer description in an exported folder


def gpt2_vocab_and_merges(bpe_path: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """GPT-2's ``vocab.json`` and ``merges.txt`` contents, rebuilt from the tiktoken rank file.

    ``gpt2.tiktoken`` lists each token's bytes with its rank, which is its GPT-2 id (tiktoken
    builds the ranks from ``encoder.json`` and checks they agree).  Rank ``r >= 256`` was
    made by merge ``r - 256``; its two halves are what byte-pair encoding of the token's
    bytes with the merges of lower rank alone leaves (tiktoken's own merge rule), so the
    merges come out in GPT-2's order.  The tokens are spelled through
    :func:`bytes_to_unicode`.  ``tests/test_hf.py`` checks that a tokenizer built from these
    encodes text exactly as tiktoken does.
    """
    ranks = parse_bpe_ranks(Path(bpe_path).read_bytes())
    spell = bytes_to_unicode()
    text = {tok: "".join(spell[b] for b in tok) for tok in ranks}
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(tok) == 1:
            continue
        parts = [bytes([b]) for b in tok]
        while len(parts) > 2:  # apply the lowest-ranked merge that exists before this token, as tiktoken does
            r, i = min((ranks.get(parts[i] + parts[i + 1], rank), i) for i in range(len(parts) - 1))
            if r >= rank:
                raise UserError(
                    f"{bpe_path}: token {tok!r} cannot be built from earlier merges: it is not a GPT-2 BPE file"
                )
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        merges.append((text[parts[0]], text[parts[1]]))
    vocab = {text[tok]: rank for tok, rank in ranks.items()}
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, merges


def write_tokenizer_files(tokenizer, folder: Path, max_length: int | None = None) -> None:
    """Write the tokenizer files a Hugging Face user needs into ``folder``.

    gpt2: ``vocab.json`` and ``merges.txt`` (GPT-2's own format), ``tokenizer.json`` +
    ``tokenizer_config.json`` (written by transformers' ``GPT2TokenizerFast`` loaded from the
    first two, so ``AutoTokenizer.from_pretrained(folder)`` works; ``model_max_length`` is
    ``max_length``, the model's block_size) and ``gpt2.tiktoken`` (tiktoken's and tinygpt's
    format).  bpe:N: its own ``tokenizer.json`` (Hugging Face's format) and ``tokenizer_config.json``
    through ``PreTrainedTokenizerFast``.  Every tokenizer also gets ``tinygpt_tokenizer.json`` (our description).  The
    char tokenizer has no Hugging Face equivalent: for it that last file is all (its
    ``chars[i]`` is token ``i``).
    """
    atomic_write_bytes(folder / TOKENIZER_FILE, (json.dumps(tokenizer.to_dict(), ensure_ascii=False) + "\n").encode())
    kwargs = {"model_max_length": max_length} if max_length else {}
    if isinstance(tokenizer, BPETokenizer):
        fast = optional.transformers().PreTrainedTokenizerFast(tokenizer_object=tokenizer.hf_tokenizer(), **kwargs)
        fast.save_pretrained(str(folder))
        # transformers 5 names the class TokenizersBackend, which 4.x lacks; 5 still loads the old name.
        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        atomic_write_bytes(config_path, (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode())
        return
    if not isinstance(tokenizer, GPT2Tokenizer):
        return
    vocab, merges = gpt2_vocab_and_merges(tokenizer.bpe_path)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    optional.transformers().GPT2TokenizerFast.from_pretrained(str(folder), **kwargs).save_pretrained(str(folder))
    shutil.copyfile(tokenizer.bpe_path, folder / "gpt2.tiktoken")
