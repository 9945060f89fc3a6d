"""A JSON Schema validator of the subset mltool's schemas use (docs/formats.md#json-manifests-
and-schemas: type, properties, required, additionalProperties, items, minItems, maxItems, enum,
const, minimum, maximum, minLength, pattern, local $ref, boolean schemas), written here from
the draft 2020-12 text so manifests are checked against schemas/ by code that is not mltool's
(the project venv has no jsonschema package).

    errors = validate(document, schema)   # [] when valid; else "POINTER: what" strings
"""
import re

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or
                         (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def validate(doc, schema):
    errors = []
    _check(doc, schema, schema, "", errors)
    return errors


def _check(v, s, root, at, errors):
    if s is True:
        return
    if s is False:
        errors.append(f"{at or '(root)'}: no value allowed")
        return
    if "$ref" in s:
        name = s["$ref"].split("/")[-1]
        _check(v, root["$defs"][name], root, at, errors)
    where = at or "(root)"
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_TYPES[t](v) for t in types):
            errors.append(f"{where}: {v!r} is not of type {types}")
            return
    if "const" in s and v != s["const"]:
        errors.append(f"{where}: {v!r} is not {s['const']!r}")
    if "enum" in s and v not in s["enum"]:
        errors.append(f"{where}: {v!r} is not one of {s['enum']}")
    if _TYPES["number"](v):
        if "minimum" in s and v < s["minimum"]:
            errors.append(f"{where}: {v} < {s['minimum']}")
        if "maximum" in s and v > s["maximum"]:
            errors.append(f"{where}: {v} > {s['maximum']}")
    if isinstance(v, str):
        if len(v) < s.get("minLength", 0):
            errors.append(f"{where}: shorter than {s['minLength']}")
        if "pattern" in s and not re.search(s["pattern"], v):
            errors.append(f"{where}: {v!r} does not match {s['pattern']}")
    if isinstance(v, list):
        if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", len(v)):
            errors.append(f"{where}: {len(v)} items")
        for i, item in enumerate(v):
            if "items" in s:
                _check(item, s["items"], root, f"{at}/{i}", errors)
    if isinstance(v, dict):
        for name in s.get("required", []):
            if name not in v:
                errors.append(f"{where}: required field {name!r} is missing")
        props = s.get("properties", {})
        for name, item in v.items():
            if name in props:
                _check(item, props[name], root, f"{at}/{name}", errors)
            elif "additionalProperties" in s:
                _check(item, s["additionalProperties"], root, f"{at}/{name}", errors)
