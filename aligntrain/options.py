"""Typed options and the one registry pattern of objectives, advantage rules and problems.

A registry entry is a pydantic model. Its fields are the entry's options (typed,
bounded, with a description each); its class variables say what the entry is
(``name``, and e.g. which trainer runs it); its methods do the entry's work.
``Registry.register`` adds a class under its ``name``, ``Registry.parse`` turns
a mapping from params.yaml into a validated instance, and ``Registry.describe``
lists the entries and their options (``aligntrain list rules``; the rules table
of docs/advantages.md is generated from it).

Like every model of params.yaml: integers are strict (``true`` is not 1,
``16.0`` is not 16), floats are finite and refuse booleans (:data:`Real`),
unknown keys are errors.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar

import annotated_types
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError


def _refuse_bool(value: Any) -> Any:
    # Lax pydantic reads `true` as 1.0; a boolean where a number belongs is a mistake.
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not a boolean ({value})")
    return value


#: A float field that refuses booleans; finite, because every model here sets allow_inf_nan=False.
Real = Annotated[float, BeforeValidator(_refuse_bool)]


class Strict(BaseModel):
    """Base of every model of params.yaml: frozen, unknown keys refused, floats finite.

    Integer fields are StrictInt and float fields :data:`Real`: lax pydantic reads ``true``
    as 1 or 1.0 and ``16.0`` as 16."""

    # allow_inf_nan=False: `.inf`/`.nan` pass every bound check silently (inf > 0, and nan
    # compares False to everything); subclasses' model_config merges with this one.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Options(Strict):
    """Base of every registry entry (a :class:`Strict` model with a name)."""

    #: the entry's name in its registry (and in params.yaml)
    name: ClassVar[str]

    @classmethod
    def summary(cls) -> str:
        """The first line of the class docstring."""
        doc = (cls.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""


@dataclass(frozen=True)
class OptionDoc:
    """One option of a registry entry, as the command line and the docs show it."""

    name: str
    type: str
    default: str  # "required" when the option has no default
    bounds: str  # e.g. "≥ 1", "in (0, 1)"; "" when unbounded
    description: str


def describe_options(cls: type[BaseModel]) -> list[OptionDoc]:
    """The options of ``cls`` in declaration order."""
    rows = []
    for name, field in cls.model_fields.items():
        default = "required" if field.is_required() else repr(field.get_default(call_default_factory=True))
        rows.append(
            OptionDoc(name, _type_name(field.annotation), default, _bounds(field.metadata), field.description or "")
        )
    return rows


E = TypeVar("E", bound=Options)


class Registry(Generic[E]):
    """Entries of one kind (``"objective"``, ``"advantage rule"``, ``"problem"``) by name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, type[E]] = {}

    def register(self, cls: type[E]) -> type[E]:
        """Class decorator: add ``cls`` under ``cls.name``."""
        name = cls.__dict__.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} class needs a class variable `name`: {cls.__qualname__}")
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._entries[name] = cls
        return cls

    def get(self, name: str) -> type[E]:
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise ValueError(f"unknown {self.kind} {name!r}; known: {self.names()}") from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __iter__(self) -> Iterator[type[E]]:
        return (self._entries[name] for name in self.names())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def parse(self, name: str, options: Mapping[str, Any] | None = None) -> E:
        """The entry ``name`` with ``options``; ValueError naming the entry and each bad option."""
        cls = self.get(name)
        try:
            return cls.model_validate(dict(options or {}))
        except ValidationError as err:
            raise ValueError(f"{self.kind} {name!r}: {option_errors(err)}") from None


def option_errors(err: ValidationError) -> str:
    """A pydantic error as one line: ``option k: Input should be ...; option clip: ...``."""
    parts = []
    for error in err.errors():
        key = ".".join(str(p) for p in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown option"
        parts.append(f"option {key}: {message}" if key else message)
    return "; ".join(parts)


# --------------------------------------------------------------------------- how options print


def _type_name(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _type_name(args[0])
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin in (list, tuple) and args:
        return f"list of {_type_name(args[0])}"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


_BOUND_SYMBOLS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}


def _bounds(metadata: list[Any]) -> str:
    parts = []
    for item in metadata:
        if isinstance(item, annotated_types.BaseMetadata):
            parts += [
                f"{symbol} {getattr(item, bound)}"
                for bound, symbol in _BOUND_SYMBOLS.items()
                if getattr(item, bound, None) is not None
            ]
    return ", ".join(parts)
