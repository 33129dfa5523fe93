"""The generic half of the configuration: where the shipped YAML configs are, and a mapping typed as a dataclass.

``typed(cls, mapping, where)`` turns an OmegaConf or plain mapping into an instance of dataclass ``cls`` the way
Hydra's structured configs do (unknown keys and wrong types refused by OmegaConf), then runs the dataclass's own
checks (``ltrjax.constraints``); every refusal is a ``ConfigError`` naming the dotted key, the value and what is
allowed. It knows nothing of ltrjax's blocks: the schemas are the packages' own dataclasses, gathered by
``ltrjax.schema``.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import pathlib
import types
import typing
from typing import Annotated, Dict, List

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from ltrjax.constraints import ConfigError, check_fields, checks_of, unknown_key


def conf_dir() -> pathlib.Path:
    """The folder of the YAML configs: ``ltrjax/conf`` in an installed package (the top-level ``conf/``
    shipped as package data), else ``conf/`` of the source checkout ``ltrjax`` runs from."""
    here = pathlib.Path(__file__).resolve().parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"ltrjax's configs are neither in {here / 'conf'} (an installed package) nor in "
                            f"{here.parent / 'conf'} (a source checkout); reinstall ltrjax")


def type_words(hint) -> str:
    """A phrase for a (plain) type: 'an integer', 'a list of numbers', ..."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return type_words(args[0])
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return " or ".join(type_words(a) for a in inner) + (" or null" if len(inner) < len(args) else "")
    if origin in (list, tuple, List, collections.abc.Sequence):
        return f"a list of {type_words(args[0]).removeprefix('an ').removeprefix('a ')}s" if args else "a list"
    if origin in (dict, Dict, collections.abc.Mapping):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false",
            dict: "a mapping"}.get(hint, "a value")


def is_optional(hint) -> bool:
    if typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def allowed_text(hint) -> str:
    """What a field of type ``hint`` (``Annotated`` constraints included) accepts, for a message."""
    checks = checks_of(hint)
    if checks:
        words = "; ".join(c.describe() for c in checks)
        return f"expected {words}{' or null' if is_optional(hint) and 'null' not in words else ''}"
    return f"expected {type_words(hint)}"


def lookup(mapping, dotted: str):
    node = mapping
    for part in str(dotted).split("."):
        if isinstance(node, (dict, DictConfig)) and part in node:
            node = node[part]
        elif isinstance(node, (list, tuple, ListConfig)) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def join_key(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix and key else (prefix or key)


def writable(node):
    """A structured config without the read-only flags of frozen dataclasses (so that values merge into it)."""
    OmegaConf.set_readonly(node, False)
    if isinstance(node, DictConfig):
        for key in node.keys():
            child = node._get_node(key)
            if isinstance(child, (DictConfig, ListConfig)):
                writable(child)
    return node


def typed(cls, mapping, where: str, *, label: str | None = None):
    """``mapping`` as an instance of dataclass ``cls``: unknown keys and wrong types refused by OmegaConf (Hydra's
    structured configs), values by the dataclass's ``__post_init__`` checks; every error a ``ConfigError`` whose
    key is prefixed with ``where``."""
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, (dict, DictConfig)):
        raise ConfigError(where, mapping, f"expected a mapping of {label or where} settings")
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):  # nested blocks first, so that their errors name their full key
        sub = hints[f.name]
        if typing.get_origin(sub) in (typing.Union, types.UnionType):
            sub = next((a for a in typing.get_args(sub) if a is not type(None)), sub)
        if dataclasses.is_dataclass(sub) and isinstance(mapping.get(f.name), (dict, DictConfig)):
            typed(sub, mapping[f.name], join_key(where, f.name), label=f.name)
    try:
        merged = OmegaConf.merge(writable(OmegaConf.structured(cls)), mapping)
        obj = OmegaConf.to_object(merged)
        check_fields(obj)  # for the schemas without a __post_init__ of their own
        return obj
    except ConfigError as err:
        raise err.within(where) from None
    except ConfigKeyError as err:
        full = str(err.full_key or err.key)
        owner = err.object_type if dataclasses.is_dataclass(err.object_type) else cls
        raise unknown_key(join_key(where, full), lookup(mapping, full), [f.name for f in dataclasses.fields(owner)],
                          join_key(where, full.rpartition(".")[0]) or label or where) from None
    except ValidationError as err:
        full = str(err.full_key or err.key)
        owner = err.object_type if dataclasses.is_dataclass(err.object_type) else cls
        name = full.rsplit(".", 1)[-1]
        hints = typing.get_type_hints(owner, include_extras=True)
        allowed = allowed_text(hints[name]) if name in hints else f"not allowed here ({err.msg.splitlines()[0]})"
        raise ConfigError(join_key(where, full), lookup(mapping, full), allowed) from None
    except OmegaConfBaseException as err:
        raise ConfigError(where, None, str(err).splitlines()[0], show_value=False) from None
