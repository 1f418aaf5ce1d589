"""The base of every on-disk document model: parsed once at a read boundary, dumped in format order.

A document model declares the format's fields in the order the format fixes; keys it does not
declare are kept (formats are additive, runtime-semantics §1.1) and written after the declared ones
in the order they were read. ``to_json`` writes back exactly the keys that were read or set, so a
document read and written again is byte-identical when it followed the format's order.

Numbers are ``Number`` (an int or a float, never a bool) so that ``1`` stays ``1`` and ``1.0``
stays ``1.0`` through a round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self, TypeVar

from pydantic import BaseModel, ConfigDict, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError
from pydantic import Field as Field

from shopsimrl_core._errors import ConfigError

__all__ = [
    "Document",
    "Part",
    "Number",
    "Int",
    "Bool",
    "Str",
    "Field",
    "DocumentError",
    "describe_error",
]

Number = Annotated[StrictInt | StrictFloat, "number"]
"""An int or a float (never a bool), kept as it was read."""
Int = StrictInt
Bool = StrictBool
Str = StrictStr

# defer_build: a model's validator is built when it is first used, not at import. A one-episode run
# imports every document module and validates two or three of some thirty models (issue 33).
_CONFIG = ConfigDict(extra="allow", protected_namespaces=(), populate_by_name=True, strict=False,
                     ser_json_inf_nan="null", use_enum_values=True, defer_build=True)


class Part(BaseModel):
    """A nested object of a document: declared fields in format order, other keys kept."""

    model_config = _CONFIG

    def to_json(self) -> dict[str, Any]:
        """The object as JSON values: the keys that were read or set, declared ones first."""
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)


class DocumentError(ConfigError):
    """A document on disk does not follow its format; the message names the file, the field and the fix."""


_D = TypeVar("_D", bound="Document")


class Document(Part):
    """A versioned on-disk document (``schema_version`` first)."""

    SCHEMA: ClassVar[str]
    """The ``schema_version`` this model reads and writes."""
    KIND: ClassVar[str]
    """What the document is, for messages (``run manifest``, ``trace record`` …)."""

    @classmethod
    def parse(cls, data: Any, source: str = "<memory>") -> Self:
        """Validate a decoded JSON value as this document.

        Raises:
            DocumentError: one line ``<source>: <kind>: <field>: <problem>; <fix>`` for the first
                problem (a wrong ``schema_version`` names the accepted one).
        """
        if isinstance(data, Mapping) and data.get("schema_version") not in (None, cls.SCHEMA):
            raise DocumentError(
                f"{source}: {cls.KIND}: schema_version is {data.get('schema_version')!r}; "
                f"this reader accepts {cls.SCHEMA!r} (write it with the matching shopsimrl version)",
                code="document-invalid")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise DocumentError(f"{source}: {cls.KIND}: {describe_error(exc)}", code="document-invalid") from None


def describe_error(exc: ValidationError) -> str:
    """The first error of a pydantic validation as ``field.path: problem (got value); fix the field``."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "(document)"
    if first.get("type") == "missing":
        return f"{where}: required field is missing; add it"
    got = first.get("input")
    shown = repr(got)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{where}: {first.get('msg', 'invalid')} (got {shown}); correct this field"
