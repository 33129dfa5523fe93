"""Value constraints of typed configuration fields, and the one error every rejected value raises.

A dataclass field (a config schema, ``SimConfig``, ``FitConfig``, a policy's ``Hyper``) or a policy
constructor argument carries its constraint in its annotation: ``Annotated[float, Range(0, 1)]``.
OmegaConf and Hydra see the plain type (``typing.get_type_hints`` drops ``Annotated``); ``check_fields``
(called by ``__post_init__``) and ``ltrjax.schema`` read the constraint. A rejection is a
``ConfigError``: one paragraph naming the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any


class ConfigError(ValueError):
    """A configuration value that is not allowed; ``str(e)`` is one paragraph.

    ``key`` is the dotted config key (``sim.entry_prob``), ``value`` what was given, ``allowed`` what
    would be accepted; ``within(prefix)`` re-raises it under an enclosing key.
    """

    def __init__(self, key: str, value: Any, allowed: str, *, note: str = "", show_value: bool = True):
        self.key, self.value, self.allowed, self.note, self.show_value = key, value, allowed, note, show_value
        shown = f"{key} = {value!r}" if show_value else key
        message = f"invalid configuration: {shown}: {allowed}"
        if note:
            message += f" ({note})"
        super().__init__(message.replace("\n", " "))

    def within(self, prefix: str) -> ConfigError:
        key = f"{prefix}.{self.key}" if prefix and self.key else (prefix or self.key)
        return ConfigError(key, self.value, self.allowed, note=self.note, show_value=self.show_value)

    def __reduce__(self):
        return (_rebuild, (self.key, self.value, self.allowed, self.note, self.show_value))


def _rebuild(key, value, allowed, note, show_value) -> ConfigError:
    return ConfigError(key, value, allowed, note=note, show_value=show_value)


def unknown_key(key: str, value: Any, known: Iterable[str], where: str) -> ConfigError:
    """The error of a key that ``where`` does not have (with the nearest known key as a hint)."""
    known = sorted(known)
    name = key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    return ConfigError(key, value, f"{where} has no key {name!r}; {hint}its keys are {', '.join(known) or 'none'}")


class Check:
    """A constraint on one value: ``ok(value)`` and a phrase for the message (``describe()``)."""

    def ok(self, value) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - interface
        raise NotImplementedError


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


@dataclasses.dataclass(frozen=True)
class Range(Check):
    """A number in [lo, hi] (``lo_open``/``hi_open`` exclude the end; ``None``: unbounded)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False

    def ok(self, value) -> bool:
        if value is None:
            return True  # Optional fields: None means "default" and is checked by the type
        if not _is_number(value) or math.isnan(value) or (self.integer and not isinstance(value, int)):
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        if self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi):
            return False
        return True

    def describe(self) -> str:
        what = "an integer" if self.integer else "a number"
        if self.lo is not None and self.hi is not None:
            return (f"{what} in {'(' if self.lo_open else '['}{_fmt(self.lo)}, {_fmt(self.hi)}"
                    f"{')' if self.hi_open else ']'}")
        if self.lo is not None:
            return f"{what} {'>' if self.lo_open else '>='} {_fmt(self.lo)}"
        if self.hi is not None:
            return f"{what} {'<' if self.hi_open else '<='} {_fmt(self.hi)}"
        return what


class OneOf(Check):
    """One of a set of values (strings); ``choices`` may be a callable for registries filled later."""

    def __init__(self, choices: Iterable | Callable[[], Iterable], *, optional: bool = False):
        self._choices = choices
        self.optional = optional

    @property
    def choices(self) -> tuple:
        c = self._choices() if callable(self._choices) else self._choices
        return tuple(c)

    def ok(self, value) -> bool:
        if value is None:
            return self.optional
        return any(type(value) is type(c) and value == c for c in self.choices)

    def describe(self) -> str:
        words = [str(c).lower() if isinstance(c, bool) else str(c) for c in self.choices]
        return "one of " + ", ".join(words) + (" or null" if self.optional else "")

    def __repr__(self) -> str:
        return f"OneOf({self.choices!r})"


@dataclasses.dataclass(frozen=True)
class Each(Check):
    """A list whose every element passes ``check``."""

    check: Check

    def ok(self, value) -> bool:
        return value is None or (isinstance(value, (list, tuple)) and all(self.check.ok(v) for v in value))

    def describe(self) -> str:
        return f"a list whose every element is {self.check.describe()}"


@dataclasses.dataclass(frozen=True)
class Length(Check):
    """A list of exactly ``n`` elements."""

    n: int

    def ok(self, value) -> bool:
        return isinstance(value, (list, tuple)) and len(value) == self.n

    def describe(self) -> str:
        return f"a list of {self.n} values"


# the usual annotations
NonNegative = Annotated[float, Range(0)]
Positive = Annotated[float, Range(0, lo_open=True)]
Probability = Annotated[float, Range(0, 1)]
PositiveInt = Annotated[int, Range(1, integer=True)]
NonNegativeInt = Annotated[int, Range(0, integer=True)]
PositiveInts = Annotated[Sequence[int], Each(Range(1, integer=True))]  # e.g. hidden layer widths


def checks_of(annotation) -> list[Check]:
    """The constraints an (evaluated) annotation carries; ``Optional[Annotated[...]]`` included."""
    out = []
    if typing.get_origin(annotation) is Annotated:
        for m in annotation.__metadata__:  # a Check, or a constraint alias (``Annotated[jax.Array, NonNegative]``)
            out += [m] if isinstance(m, Check) else checks_of(m) if typing.get_origin(m) is Annotated else []
        annotation = typing.get_args(annotation)[0]
    for arg in typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, _UnionType) else ():
        out += checks_of(arg)
    return out


_UnionType = type(int | None)


@functools.lru_cache(maxsize=None)
def field_checks(cls) -> dict[str, list[Check]]:
    """{field name: its constraints} of a dataclass (``Annotated`` field types)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: checks_of(hints.get(f.name)) for f in dataclasses.fields(cls)}


def check_value(key: str, value, checks: Iterable[Check]) -> None:
    """Raise ``ConfigError`` naming ``key`` when ``value`` fails one of ``checks``."""
    for check in checks:
        if not check.ok(value):
            raise ConfigError(key, value, f"expected {check.describe()}")


def check_fields(obj) -> None:
    """Check every field of the dataclass instance ``obj`` against its annotation's constraints."""
    for name, checks in field_checks(type(obj)).items():
        check_value(name, getattr(obj, name), checks)


def strict_fields(cls, mapping, where: str) -> dict:
    """``mapping`` as keyword arguments of dataclass ``cls``; a key ``cls`` does not have is refused."""
    values = dict(mapping or {})
    known = {f.name for f in dataclasses.fields(cls)}
    for key in values:
        if key not in known:
            raise unknown_key(key, values[key], known, where)
    return values
