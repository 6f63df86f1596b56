"""Rule C6: each setting is declared once, as its dataclass field; the schema, the defaults and the converters are
read from that one declaration (policylib.config.declare)."""
from __future__ import annotations

from dataclasses import dataclass, fields

import pytest

from policylib.config import Config, config_schema, section_classes
from policylib.config.declare import SCHEMA, SECTION, converter, count, flag, json_value, section_schema, setting


def test_every_field_of_config_and_of_each_section_is_a_declaration():
    assert fields(Config) and section_classes()
    for f in fields(Config):
        assert SECTION in f.metadata or SCHEMA in f.metadata, f.name
    for name, cls in section_classes().items():
        for f in fields(cls):
            assert SCHEMA in f.metadata, f"{name}.{f.name}"
            prop = f.metadata[SCHEMA]
            default = f.default_factory() if callable(f.default_factory) else f.default
            assert prop["default"] == json_value(default), f"{name}.{f.name}"
            assert converter(f)(prop["default"]) == default, f"{name}.{f.name}: the default does not round-trip"


def test_the_schema_of_each_section_is_its_fields_then_the_keys_it_only_accepts():
    schema = config_schema(combinations=False)["properties"]
    for f in fields(Config):
        assert schema[f.name] == section_schema(f)
    zone = schema["zoneTopologySpread"]["properties"]
    assert list(zone) == ["enabled", "topologyKey", "maxSkew", "matchLabelKeys", "whenUnsatisfiable"]
    assert "whenUnsatisfiable" not in {f.name for f in fields(section_classes()["zoneTopologySpread"])}


def test_a_new_setting_is_one_field():
    """What a contributor writes to add a setting, and what the schema and the value come out as."""
    @dataclass(frozen=True)
    class Extra:
        limit: int = count(7, "How many at most.", "C4")
        strict: bool = flag(False, "Refuse instead of warn.", None)
        names: tuple[str, ...] = setting(["array", "null"], ("a", "b"), "Names.", None, items={"type": "string"})

    props = {f.name: f.metadata[SCHEMA] for f in fields(Extra)}
    assert props == {
        "limit": {"type": "integer", "default": 7, "description": "How many at most.", "x-rule": "C4",
                  "minimum": 1, "maximum": 2**31 - 1},
        "strict": {"type": "boolean", "default": False, "description": "Refuse instead of warn.", "x-rule": None},
        "names": {"type": ["array", "null"], "default": ["a", "b"], "description": "Names.", "x-rule": None,
                  "items": {"type": "string"}},
    }
    assert Extra() == Extra(7, False, ("a", "b"))
    assert converter(fields(Extra)[2])(["x"]) == ("x",)


@pytest.mark.parametrize("path,value", [("volcano.version", "1.14.0"), ("hostTopologySpread.matchLabelKeys", "none"),
                                        ("volcano.networkTopology", None)])
def test_a_settings_converter_is_part_of_its_declaration(path, value):
    from policylib import load_config
    section, key = path.split(".")
    loaded = getattr(getattr(load_config({section: {key: value}}), section), key)
    f = next(f for f in fields(section_classes()[section]) if f.name == key)
    assert loaded == converter(f)(value)
    assert {"volcano.version": "v1.14.0", "hostTopologySpread.matchLabelKeys": (),
            "volcano.networkTopology": None}[path] == loaded
