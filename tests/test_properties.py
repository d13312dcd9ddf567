"""Property tests (hypothesis): whatever users type or whatever bytes sit on disk, a clean outcome.

Run: ``python -m pytest -q tests/test_properties.py``  (CPU, offline, ~20 s).

* The config parser, fed random sections, keys, types and values (as a dict, as TOML text and as
  command-line options), returns a valid config or raises :class:`UserError`; never a traceback.
* Every tokenizer gives ``decode(encode(text)) == text`` for any text it accepts, and refuses
  the rest with a :class:`UserError`.
* A checkpoint file with any bytes changed either loads with exactly the saved contents or is
  refused: damage is never taken for a good checkpoint.

Examples are derandomized (the same on every machine) and no example database is written;
see the profile in ``conftest.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

import train
from core.errors import UserError
from data.tokenizers import CharTokenizer, GPT2Tokenizer, find_gpt2_bpe
from model.checkpoint import load_checkpoint, save_checkpoint
from training.config import SECTIONS, RunConfig, parse_config

# Real section and key names most of the time, so examples reach the type and value checks.
VALID_KEYS = {name: [f.name for f in dataclasses.fields(cls)] for name, cls in SECTIONS.items()}
sections = st.one_of(st.sampled_from(sorted(VALID_KEYS)), st.text(max_size=8))
all_keys = sorted({k for keys in VALID_KEYS.values() for k in keys})
keys = st.one_of(st.sampled_from(all_keys), st.text(max_size=12))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["auto", "cpu", "gpt2", "char", "iambic", "disabled", "offline"]),
)
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=5), scalars, max_size=2))
BY_TYPE = {  # values of a field's own type, so examples also reach the range and cross-field checks
    "int": st.integers(-3, 3000),
    "float": st.floats(-1.0, 1.0) | st.floats(),
    "bool": st.booleans(),
    "str": st.sampled_from(["auto", "cpu", "gpt2", "char", "iambic", "disabled", "offline", "runs", ""])
    | st.text(max_size=8),
    "list[str]": st.lists(st.text(max_size=5), max_size=3),
}


@st.composite
def typed_section(draw, section: str) -> dict:
    """Some of ``section``'s real keys, each with a value of its declared type (or, rarely, anything)."""
    fields = {f.name: f for f in dataclasses.fields(SECTIONS[section])}
    chosen = draw(st.lists(st.sampled_from(sorted(fields)), unique=True, max_size=6))
    return {
        k: draw(
            BY_TYPE.get(str(fields[k].type), values) | values
            if draw(st.integers(0, 9)) == 0
            else BY_TYPE.get(str(fields[k].type), values)
        )
        for k in chosen
    }


random_dicts = st.dictionaries(sections, st.one_of(st.dictionaries(keys, values, max_size=6), scalars), max_size=4)
typed_dicts = st.fixed_dictionaries({}, optional={name: typed_section(name) for name in SECTIONS})
config_dicts = st.one_of(random_dicts, typed_dicts)


def check_config(make) -> None:
    """``make()`` must give a RunConfig that survives its own round trip, or raise UserError."""
    try:
        cfg = make()
    except UserError as e:
        assert "\n" not in str(e).strip()  # one line, as the CLI prints it
        return
    assert isinstance(cfg, RunConfig)
    assert RunConfig.from_dict(cfg.to_dict()) == cfg


@given(config_dicts)
def test_config_dict_is_valid_or_a_clean_error(d):
    """RunConfig.from_dict on any nested dict: a config, or a one-line UserError."""
    check_config(lambda: RunConfig.from_dict(d))


def toml_value(v) -> str:
    """Render a Python value as TOML (None has no TOML form: an empty inline table stands in)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON string escapes are TOML basic-string escapes
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {toml_value(x)}" for k, x in v.items()) + "}"
    return "{}"


def toml_text(d: dict) -> str:
    lines = []
    for section, body in d.items():
        if isinstance(body, dict):
            lines.append(f"[{json.dumps(section, ensure_ascii=False)}]")
            lines += [f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}" for k, v in body.items()]
        else:
            lines.insert(0, f"{json.dumps(section, ensure_ascii=False)} = {toml_value(body)}")
    return "\n".join(lines) + "\n"


@given(config_dicts)
def test_toml_config_file_is_valid_or_a_clean_error(tmp_path_factory, d):
    """A TOML file with random sections, keys and values parses to a config or a one-line UserError."""
    path = tmp_path_factory.mktemp("toml") / "c.toml"
    path.write_text(toml_text(d), encoding="utf-8")
    check_config(lambda: parse_config(path, {}))


@given(st.text(max_size=200))
def test_any_text_as_a_config_file_is_valid_or_a_clean_error(tmp_path_factory, text):
    """Arbitrary text (mostly not TOML, and code that must never run) is parsed as data or refused."""
    path = tmp_path_factory.mktemp("toml") / "c.toml"
    path.write_text(text, encoding="utf-8")
    check_config(lambda: parse_config(path, {}))


option_names = st.builds(lambda s, k: f"--{s}.{k}", sections, keys)
option_values = st.one_of(st.text(max_size=15), scalars.map(str))
cli_args = st.lists(
    st.one_of(
        st.builds(lambda o, v: f"{o}={v}", option_names, option_values),
        option_names,
        option_values,
        st.sampled_from(["--resume", "--run-name", "--config"]),
    ),
    max_size=6,
)


@given(cli_args)
def test_command_line_is_valid_or_a_clean_error(argv):
    """Random train.py options parse to typed overrides and a config, or to a one-line UserError."""
    assume(not any(a.startswith("-h") or a.startswith("--h") for a in argv))  # --help prints and exits 0

    def make():
        args, overrides = train.parse_args(argv)
        return parse_config(None, overrides)

    check_config(make)


# ----------------------------------------------------------------------------- tokenizers


@given(st.text(min_size=1, max_size=60), st.data())
def test_char_tokenizer_round_trips_any_text_over_its_alphabet(corpus, data):
    """decode(encode(t)) == t for every t made of the corpus's characters; other text is a UserError."""
    tok = CharTokenizer.from_text(corpus)
    text = data.draw(st.text(alphabet=sorted(set(corpus)), max_size=80))
    assert tok.decode(tok.encode(text)) == text
    outsider = data.draw(st.characters().filter(lambda c: c not in corpus))
    with pytest.raises(UserError):
        tok.encode(text + outsider)


@functools.cache
def gpt2() -> GPT2Tokenizer:
    return GPT2Tokenizer(find_gpt2_bpe())  # the cache, or one fetch from PyPI (see test_tokenizers.py)


@given(st.text(max_size=200))
def test_gpt2_tokenizer_round_trips_any_text(text):
    """Byte-level BPE accepts every Unicode string and gives it back exactly."""
    ids = gpt2().encode(text)
    assert all(0 <= i < gpt2().vocab_size for i in ids)
    assert gpt2().decode(ids) == text


# ----------------------------------------------------------------------------- checkpoints


@functools.cache
def saved_checkpoint(folder: str) -> bytes:
    payload = {"model": {"w": torch.arange(64, dtype=torch.float32).reshape(8, 8)}, "step": 3, "val_loss": 1.5}
    save_checkpoint(f"{folder}/c.pt", payload)
    with open(f"{folder}/c.pt", "rb") as f:
        return f.read()


@given(st.data())
def test_damaged_checkpoint_loads_exactly_or_is_refused(tmp_path_factory, data):
    """Overwrite 1-8 random bytes of a checkpoint: it loads with the saved contents, or raises UserError."""
    good = saved_checkpoint(str(tmp_path_factory.getbasetemp()))
    at = data.draw(st.integers(0, len(good) - 1))
    junk = data.draw(st.binary(min_size=1, max_size=8))
    damaged = good[:at] + junk + good[at + len(junk) :]
    path = tmp_path_factory.mktemp("ckpt") / "c.pt"
    path.write_bytes(damaged[: len(good)])
    try:
        ckpt = load_checkpoint(path)
    except UserError:
        return
    assert torch.equal(ckpt["model"]["w"], torch.arange(64, dtype=torch.float32).reshape(8, 8))
    assert (ckpt["step"], ckpt["val_loss"]) == (3, 1.5)


@given(st.binary(max_size=2000))
def test_random_bytes_are_never_a_checkpoint(tmp_path_factory, blob):
    """Any byte string as a checkpoint file is refused with a UserError."""
    path = tmp_path_factory.mktemp("ckpt") / "c.pt"
    path.write_bytes(blob)
    with pytest.raises(UserError):
        load_checkpoint(path)
