"""How a setting is declared: once, as the field of its section's dataclass (rule C6).

A setting is one dataclass field made by :func:`setting` (or :func:`flag`, :func:`count`, :func:`choice`):
its Python default is the field's default, and the field's metadata carries the rest of the declaration,
its JSON Schema property (type, the default in its YAML form, description, ``x-rule``, choices and bounds)
and how a YAML value becomes the field's value. A section of the configuration is a field of
:class:`~policylib.config.settings.Config` made by :func:`section`. :func:`section_schema` reads a
field's schema property back, and :mod:`policylib.config.schema` builds ``config_schema()`` from them, so
the schema's defaults are the dataclasses' by construction.
"""
from __future__ import annotations

import copy
from dataclasses import Field, field, fields
from typing import Any, Callable

from ..errors import INT32_MAX

#: The metadata keys of a declared field.
SCHEMA, CONVERT, SECTION = "policylib.schema", "policylib.convert", "policylib.section"


def json_value(value: Any) -> Any:
    """A default in its YAML form: tuples as lists, a value with ``as_spec()`` as that mapping."""
    if isinstance(value, tuple):
        return [json_value(v) for v in value]
    if hasattr(value, "as_spec"):
        return value.as_spec()
    return value


def _as_value(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def setting(type_: str | list[str], default: Any, description: str, rule: str | None, *,
            factory: Callable[[], Any] | None = None, convert: Callable[[Any], Any] | None = None,
            invalid: str | None = None, **more: Any) -> Any:
    """One setting: a dataclass field whose default is ``default`` (or ``factory()``) and whose metadata is
    its schema property (``more``: the JSON Schema keywords beyond type, default, description and rule) and
    ``convert``, what turns its validated YAML value into the field's (default: a list becomes a tuple);
    ``invalid``: what an error of the value's type or choice says is allowed (``x-invalid``)."""
    value = factory() if factory is not None else default
    prop = {"type": type_, "default": json_value(value), "description": description, "x-rule": rule, **more}
    if invalid is not None:
        prop["x-invalid"] = invalid
    metadata = {SCHEMA: prop, CONVERT: convert or _as_value}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def count(default: int | None, description: str, rule: str | None, nullable: bool = False) -> Any:
    """Rule C4: an int32 setting of at least 1."""
    return setting(["integer", "null"] if nullable else "integer", default, description, rule, minimum=1,
                   maximum=INT32_MAX)


def flag(default: bool, description: str, rule: str | None) -> Any:
    return setting("boolean", default, description, rule)


def choice_schema(choices: tuple[str, ...], default: str, description: str, rule: str | None,
                  invalid: str | None = None) -> dict[str, Any]:
    """The schema property of a string setting with a fixed set of values (for a key accepted, not stored)."""
    prop = {"type": "string", "default": default, "description": description, "x-rule": rule, "enum": list(choices)}
    return prop | ({"x-invalid": invalid} if invalid is not None else {})


def choice(choices: tuple[str, ...], default: str, description: str, rule: str | None,
           invalid: str | None = None) -> Any:
    """A string setting with a fixed set of values."""
    return setting("string", default, description, rule, enum=list(choices), invalid=invalid)


def section(cls: type, description: str, rule: str | None, *, accepted: dict[str, dict[str, Any]] | None = None) -> Any:
    """A section of the configuration: a field of ``Config`` holding ``cls``, its settings ``cls``'s fields.
    ``accepted``: keys the section's YAML may carry that are checked and not stored (their schema properties)."""
    return field(default_factory=cls, metadata={SECTION: (description, rule, accepted or {})})


def setting_properties(cls: type) -> dict[str, dict[str, Any]]:
    """The schema properties of a section's settings (``cls``'s fields), in field order (copies)."""
    return {f.name: copy.deepcopy(f.metadata[SCHEMA]) for f in fields(cls)}


def section_schema(f: Field[Any]) -> dict[str, Any]:
    """The schema property of a ``Config`` field: a section (its settings, then the keys it only accepts,
    unknown keys refused) or a top-level setting."""
    if SECTION not in f.metadata:
        return copy.deepcopy(dict(f.metadata[SCHEMA]))
    description, rule, accepted = f.metadata[SECTION]
    cls = f.default_factory
    assert isinstance(cls, type)
    props = setting_properties(cls) | copy.deepcopy(accepted)
    return {"type": ["object", "null"], "default": {}, "description": description, "x-rule": rule,
            "additionalProperties": False, "properties": props}


def converter(f: Field[Any]) -> Callable[[Any], Any]:
    """What turns a setting's validated YAML value into its field's value."""
    convert: Callable[[Any], Any] = f.metadata.get(CONVERT, _as_value)
    return convert


def is_section(f: Field[Any]) -> bool:
    """Whether a ``Config`` field is a section (a dataclass of settings) rather than a top-level setting."""
    return SECTION in f.metadata


__all__ = ["choice", "choice_schema", "converter", "count", "flag", "is_section", "json_value", "section",
           "section_schema", "setting", "setting_properties"]
