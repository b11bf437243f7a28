"""Config layering: dataclass defaults, then the variant, then a config file, then key=value overrides.

Every value is checked against the dataclass field's type; an unknown key is an error that names the
nearest known key. Nothing is ever evaluated as code.
"""
from __future__ import annotations

import dataclasses
import difflib
import inspect
import json
import math
import re
import types
import typing
from pathlib import Path

from recipe_zoo.core.api import Range
from recipe_zoo.core.errors import ZooError

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def field_types(cls) -> dict[str, object]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def field_range(annotation) -> Range | None:
    """The ``Range`` an ``Annotated[int | float, Range(...)]`` field declares."""
    if typing.get_origin(annotation) is typing.Annotated:
        return next((m for m in annotation.__metadata__ if isinstance(m, Range)), None)
    return None


def coerce(key: str, value, annotation, source: str):
    """Convert ``value`` (a string from the command line, or a JSON/TOML value) to ``annotation``."""
    valid = field_range(annotation)
    if valid is not None:
        out = coerce(key, value, typing.get_args(annotation)[0], source)
        if not valid.admits(out):
            raise ZooError(f"{source}: {key}={value!r} must be {valid}")
        return out
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in options:
                return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return coerce(key, value, option, source)
            except ZooError as exc:
                errors.append(exc)
        if len(errors) == 1:  # Optional[X]: X's own message, with 'or none'
            raise ZooError(f"{errors[0]} (or none)") from None
        raise ZooError(f"{source}: {key}={value!r} is not a valid {annotation}")
    if origin is typing.Literal:
        choices = typing.get_args(annotation)
        if value not in choices:
            raise ZooError(f"{source}: {key}={value!r} must be one of {list(choices)}")
        return value
    try:
        if annotation is bool:
            if isinstance(value, bool):
                return value
            text = str(value).lower()
            if text in _TRUE | _FALSE:
                return text in _TRUE
            raise ValueError
        if annotation is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value) if not isinstance(value, str) else int(value.replace("_", ""))
        if annotation is float:
            if isinstance(value, bool):
                raise ValueError
            out = float(value)
            if not math.isfinite(out):  # a NaN or infinite LR, weight or fraction is never meant
                raise ZooError(f"{source}: {key}={value!r} is not a finite number")
            return out
        if annotation is str:
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise ValueError
            return str(value)
    except (ValueError, TypeError, OverflowError):  # TypeError: a JSON null or list; OverflowError: 10**400 as float
        name = getattr(annotation, "__name__", str(annotation))
        raise ZooError(f"{source}: {key}={value!r} is not a valid {name}") from None
    raise ZooError(f"{source}: {key} has an unsupported type {annotation}")


def parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ZooError(f"override {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def read_config_file(path: str | Path) -> dict:
    """A JSON or TOML file of key: value pairs (a ``config`` table/object is also accepted)."""
    path = Path(path)
    if not path.is_file():
        raise ZooError(f"{path}: config file not found")
    try:
        if path.suffix == ".toml":
            import tomllib

            data = tomllib.loads(path.read_text())
        else:
            data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZooError(f"{path}: cannot parse config file: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("config"), dict):
        data = data["config"]
    if not isinstance(data, dict):
        raise ZooError(f"{path}: a config file must hold key: value pairs")
    return data


def apply(cfg, values: dict, source: str):
    """Return a copy of ``cfg`` with ``values`` applied, each key and value checked."""
    types_ = field_types(type(cfg))
    replaced = getattr(type(cfg), "REPLACED", {})
    changes = {}
    for key, value in values.items():
        if key not in types_ and key in replaced:  # an old config file, best.json or run of this recipe
            raise ZooError(f"{source}: {key!r} is no longer a field of this recipe: {replaced[key]}")
        if key not in types_:
            near = difflib.get_close_matches(key, list(types_), n=1, cutoff=0.5)
            hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(types_)}"
            raise ZooError(f"{source}: unknown key {key!r}{hint}")
        changes[key] = coerce(key, value, types_[key], source)
    return dataclasses.replace(cfg, **changes)


def build(config_cls, variant: dict, config_file: str | None, overrides: list[str], name: str):
    cfg = apply(config_cls(), variant, f"recipe {name}")
    if config_file:
        cfg = apply(cfg, read_config_file(config_file), str(config_file))
    return apply(cfg, parse_overrides(overrides), "override")


_COMMENT = re.compile(r"^\s+(\w+)\s*:[^#]*?#\s*(.+?)\s*$")


def field_comments(cls) -> dict[str, str]:
    """The ``# comment`` after each field in the dataclass source (base classes included)."""
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        for line in source.splitlines():
            m = _COMMENT.match(line)
            if m:
                comments[m.group(1)] = m.group(2)
    return comments
