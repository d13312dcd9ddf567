"""Typed settings from dataclasses, TOML files and ``--section.key=value`` options.

A :class:`Schema` names the sections of a configuration, each a dataclass whose fields are
made with :func:`doc_field` (the help string doubles as ``--help`` text, litgpt-style) and
which validates itself in ``__post_init__`` (torchtitan-style).  The schema checks keys and
types, adds one ``--section.key`` option per field to an ``argparse`` parser, and turns
the options given into a nested dict.  A TOML file is data and is never executed.  Bad keys,
types or values raise :class:`UserError` naming the valid choices.

Which sections exist is the caller's business: ``training.config`` builds the whole run's
schema, ``python -m data.prepare`` one of the ``[data]`` section alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import tomllib
import typing
from dataclasses import field
from pathlib import Path

from core.cli import closest_option
from core.errors import UserError


def doc_field(default, help: str):
    """A dataclass field whose ``help`` doubles as the CLI help text.

    A list default is copied per instance (``default_factory``), as dataclasses require.
    """
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def field_types(cls_: type) -> dict[str, type]:
    """``{field name: resolved type}`` of a dataclass."""
    hints = typing.get_type_hints(cls_)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls_)}


def check_type(key: str, value, typ, where: str):
    """Return ``value`` as ``typ`` (int -> float widening allowed) or raise UserError."""
    origin = typing.get_origin(typ)
    if typ is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise UserError(f"{key} in {where} must be a finite number, got {value!r}")
        return float(value)
    if typ is list or origin is list:
        item = (typing.get_args(typ) or (str,))[0]  # a bare ``list`` holds strings
        if isinstance(value, list) and all(isinstance(v, item) and not isinstance(v, bool) for v in value):
            return value
        raise UserError(f"{key} in {where} must be a list of {item.__name__}s, got {value!r}")
    ok = isinstance(value, typ) and not (typ is int and isinstance(value, bool))
    if not ok:
        raise UserError(f"{key} in {where} must be of type {typ.__name__}, got {type(value).__name__} {value!r}")
    return value


def parse_cli_value(text: str, typ) -> object:
    """Parse one CLI string into ``typ``: bools accept true/false/1/0/yes/no; lists are comma separated.

    Raises ValueError when ``text`` is not a ``typ``.
    """
    if typ is bool:
        low = text.strip().lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        raise ValueError("expected true or false")
    if typ is int:
        return int(text)
    if typ is float:
        return float(text)
    if typ is list or typing.get_origin(typ) is list:
        item = (typing.get_args(typ) or (str,))[0]
        return [item(t) for t in (s.strip() for s in text.split(",")) if t]
    return text


def load_toml(path: str | Path) -> dict:
    """Read a TOML config file (data, never executed).

    Raises UserError if it is missing, not UTF-8 text (TOML is UTF-8 by definition: a file
    saved as UTF-16 or Latin-1 is refused here, not with a decoding traceback) or malformed.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file {path} does not exist: give a path such as configs/shakespeare.toml")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"config file {path} is not valid TOML ({e}): fix the syntax") from None
    except UnicodeDecodeError as e:
        raise UserError(
            f"config file {path} is not UTF-8 text (byte {e.start}: {e.reason}): save it as UTF-8, as TOML requires"
        ) from None


def merge(base: dict, override: dict) -> dict:
    """Section-wise merge of two nested config dicts; ``override`` wins."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for section, values in override.items():
        if isinstance(values, dict) and isinstance(out.get(section), dict):
            out[section].update(values)
        else:
            out[section] = values
    return out


def overrides_to_argv(overrides: dict) -> list[str]:
    """The inverse of :meth:`Schema.parse_overrides`: ``{"model": {"n_layer": 2}}`` -> ``["--model.n_layer=2"]``."""
    argv = []
    for section, values in overrides.items():
        for key, value in values.items():
            if isinstance(value, bool):
                text = str(value).lower()
            elif isinstance(value, list):
                text = ",".join(str(v) for v in value)
            else:
                text = str(value)
            argv.append(f"--{section}.{key}={text}")
    return argv


class Schema:
    """The sections of a configuration (``{"model": GPTConfig, ...}``) and its derived keys.

    ``derived``: ``{"section.key": why}`` for keys filled in by the program, which a user may
    not set (their options are not offered, and a file that sets one is refused).
    """

    def __init__(self, sections: dict[str, type], derived: dict[str, str] | None = None) -> None:
        self.sections = dict(sections)
        self.derived = dict(derived or {})

    def settable_keys(self, section: str) -> list[str]:
        """The keys of ``section`` a user may set."""
        return [f.name for f in dataclasses.fields(self.sections[section]) if f"{section}.{f.name}" not in self.derived]

    def typed_section(self, name: str, values: dict, where: str) -> dict:
        """Check one section's keys and types; return its values typed (not yet validated as a whole)."""
        types_ = field_types(self.sections[name])
        clean = {}
        for key, value in values.items():
            full = f"{name}.{key}"
            if key not in types_:
                raise UserError(
                    f"unknown key {full!r} in {where}: valid keys in [{name}] are {', '.join(self.settable_keys(name))}"
                )
            clean[key] = check_type(full, value, types_[key], where)
        return clean

    def _tables(self, d: dict, where: str) -> dict[str, dict]:
        """``d``'s sections as dicts, refusing an unknown section or a section that is not a table."""
        if not isinstance(d, dict):
            raise UserError(f"{where} must be a table of sections, got {type(d).__name__}")
        unknown = sorted(set(d) - set(self.sections))
        if unknown:
            raise UserError(f"unknown section {unknown[0]!r} in {where}: valid sections are {', '.join(self.sections)}")
        tables = {}
        for name in self.sections:
            tables[name] = d.get(name, {})
            if not isinstance(tables[name], dict):
                raise UserError(f"[{name}] in {where} must be a table, got {type(tables[name]).__name__}")
        return tables

    def check_keys_and_types(self, d: dict, where: str) -> None:
        """Refuse unknown sections, keys, badly typed values and derived keys in ``d`` (a file's contents)."""
        self.check_not_derived(d, where)
        for name, values in self._tables(d, where).items():
            self.typed_section(name, values, where)

    def build(self, d: dict, where: str) -> dict:
        """``{section: dataclass instance}`` from a nested dict; each section validates itself."""
        return {
            name: self.sections[name](**self.typed_section(name, values, where))
            for name, values in self._tables(d, where).items()
        }

    def check_not_derived(self, d: dict, where: str) -> None:
        """Refuse keys the user may not set (see ``derived``)."""
        for key, why in self.derived.items():
            section, name = key.split(".")
            if isinstance(d.get(section), dict) and name in d[section]:
                raise UserError(f"{key} cannot be set in {where}: {why}")

    def add_override_arguments(self, parser: argparse.ArgumentParser, exclude: typing.Iterable[str] = ()) -> None:
        """Add one ``--section.key`` option per settable field, with the field's help and default.

        ``exclude`` names sections (``"wandb"``) or keys (``"model.tie_embeddings"``) a command
        does not offer because they do nothing there.  Defaults are ``argparse.SUPPRESS`` so only
        the options actually given show up; their values stay strings until :meth:`parse_overrides`.
        """
        exclude = set(exclude)
        for section, cls_ in self.sections.items():
            if section in exclude:
                continue
            group = parser.add_argument_group(f"[{section}] overrides")
            for f in dataclasses.fields(cls_):
                key = f"{section}.{f.name}"
                if key in self.derived or key in exclude:
                    continue
                default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                group.add_argument(
                    f"--{key}",
                    dest=key,
                    metavar="VALUE",
                    default=argparse.SUPPRESS,
                    help=f"{f.metadata.get('help', '')} (default: {default!r})".replace("%", "%%"),
                )

    def parse_overrides(self, namespace: argparse.Namespace) -> dict:
        """Turn the ``--section.key`` options of a parsed namespace into a typed nested dict."""
        nested: dict = {}
        for key, text in vars(namespace).items():
            if "." not in key:
                continue
            section, name = key.split(".", 1)
            typ = field_types(self.sections[section])[name]
            try:
                value = parse_cli_value(text, typ)
            except ValueError:
                tname = getattr(typ, "__name__", str(typ))
                raise UserError(f"--{key}={text!r} is not a valid {tname}: {self._example(key, typ)}") from None
            nested.setdefault(section, {})[name] = value
        return nested

    def _guess(self, parser: argparse.ArgumentParser, bad: str) -> str:
        """``"did you mean --x? "`` for the closest option the parser has (``difflib``), or a key named ``bad``
        in some section (``--seed`` -> ``--train.seed``); empty when nothing is close."""
        named = [o for o in parser._option_string_actions if "." in o and o.split(".")[-1] == bad.lstrip("-")]
        close = closest_option(parser, bad) or (named[0] if named else None)
        return f"did you mean {close}? " if close else ""

    def _example(self, key: str, typ) -> str:
        """How to give ``key`` a value of ``typ``: the two values of a bool, else its default as an example."""
        if typ is bool:
            return f"give --{key}=true or --{key}=false"
        if typing.get_origin(typ) in (tuple, list):
            return f"give comma-separated values, e.g. --{key}=100,200"
        section, name = key.split(".", 1)
        field = next(f for f in dataclasses.fields(self.sections[section]) if f.name == name)
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        return (
            f"give e.g. --{key}={default}" if default not in (None, "") else f"give a {getattr(typ, '__name__', typ)}"
        )

    def parse_cli(
        self, parser: argparse.ArgumentParser, argv: list[str] | None, exclude: typing.Iterable[str] = ()
    ) -> tuple[argparse.Namespace, dict]:
        """Add the ``--section.key`` options to ``parser``, parse ``argv`` and type the overrides.

        ``exclude`` as in :meth:`add_override_arguments` (it may also name sections outside
        this schema): such an option is refused as not applying to this command.  Any other
        unknown option is a :class:`UserError` naming the valid keys of its section.  Returns
        ``(namespace, overrides)``, the overrides a nested dict.
        """
        exclude = set(exclude)
        self.add_override_arguments(parser, exclude)
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            bad = unknown[0].split("=")[0]
            section = bad.lstrip("-").split(".")[0]
            if section in exclude or bad.lstrip("-") in exclude:
                raise UserError(f"{bad} does not apply to {parser.prog}: drop it")
            guess = self._guess(parser, bad)
            if section in self.sections:
                raise UserError(
                    f"unknown option {bad}: {guess}valid [{section}] keys are {', '.join(self.settable_keys(section))}"
                )
            raise UserError(
                f"unknown option {bad}: {guess}use --section.key=value with a section in {', '.join(self.sections)} "
                f"or a flag listed by --help"
            )
        return args, self.parse_overrides(args)
