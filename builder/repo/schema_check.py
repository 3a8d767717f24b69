"""The checker of manifest_schema.json: a JSON value against the schema, to the first problem, as one sentence.

The app checks manifests with its own copy of this checker (web_src/src/store/schema_check.js), which reads the same
schema file; tests/test_manifest_schema.py holds the two to the same verdict and the same sentence on every
manifest of tests/manifest_corpus.json and on random mutations of it. So both check in the same order:

    $ref, type, const, enum; for a string format, pattern, minLength / maxLength; for a number minimum / maximum;
    for a list minItems / maxItems, items; for an object required, unknown fields (additionalProperties: false),
    propertyNames, minProperties, properties, additionalProperties, dependentSchemas; then allOf, contains, and
    last the x- keywords.

The JSON Schema keywords mean what the standard says, except that a pattern must match the whole string. The
formats: `relative-path` (paths.unsafe_reason finds nothing) and `file-name` (the same, with no `/`). The x-
keywords are the manifest's rules across fields: `x-path-in-folder` (the graph's path lies in the folder its
component names), `x-blocks-cover-size` (one block hash per block of the file), `x-graph-files-listed` (every file
of every graph is in `files`).
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any, NoReturn

from builder.repo import paths

Schema = dict[str, Any]

TYPE_WORDS = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a finite number",
    "boolean": "true or false",
    "null": "null",
}


class SchemaProblem(Exception):
    """The first place a value breaks the schema: `where` (e.g. `graphs[0].path`) and what is wrong there."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where} {what}")
        self.where, self.what = where, what


def check(schema: Schema, value: object) -> None:
    """Raise SchemaProblem at the first place `value` breaks `schema` (the root of a schema file with its $defs)."""
    _Checker(schema).node(schema, value, "")


def shown(value: object) -> str:
    """A value as a problem quotes it: compact JSON with numbers as JavaScript writes them, at most 60 characters."""
    number = _as_double(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0
    text = (
        _javascript_json(value)
        if math.isfinite(number)
        else str(number).replace("inf", "Infinity").replace("nan", "NaN")
    )
    return text if len(text) <= 60 else text[:59] + "…"


def _javascript_json(value: object) -> str:
    """JSON.stringify's text of a parsed value (so both checkers quote values alike; it writes Infinity as null)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _javascript_number(value)
    if isinstance(value, list):
        return "[" + ",".join(_javascript_json(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_javascript_json(str(k))}:{_javascript_json(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def _javascript_number(value: float) -> str:
    """A JSON number as JavaScript reads and writes it: a double, in its shortest digits, fixed notation from 1e-6 up
    to 1e21 and exponent notation (1e-7, 1e+21) outside."""
    if isinstance(value, int) and abs(value) <= 2**53:
        return str(value)
    number = _as_double(value)
    if not math.isfinite(number):
        return "null"
    if number == 0:
        return "0"
    if 1e-6 <= abs(number) < 1e21:
        text = format(Decimal(repr(number)), "f")
        return text.removesuffix(".0") if text.endswith(".0") else text
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", repr(number))


def _as_double(value: float) -> float:
    """A JSON number as the double JavaScript reads: an integer beyond the doubles is Infinity."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def type_of(value: object) -> str:
    """The JSON type of a parsed value; a whole float (1.0) is an integer, as in JSON Schema and JavaScript."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        number = _as_double(value)
        return "integer" if math.isfinite(number) and number.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _has_type(value: object, wanted: str) -> bool:
    actual = type_of(value)
    if wanted == "number":
        return actual == "integer" or (actual == "number" and math.isfinite(_as_double(value)))  # type: ignore[arg-type]
    return actual == wanted


def format_problem(fmt: str, value: str) -> str | None:
    reason = paths.unsafe_reason(value)
    if reason is None and fmt == "file-name" and "/" in value:
        reason = "contains a /"
    return reason


def _item(where: str, index: int) -> str:
    return f"{where}[{index}]"


def _field(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _entry(where: str, key: str) -> str:
    return f"{where}[{json.dumps(key, ensure_ascii=False)}]"


class _Checker:
    def __init__(self, root: Schema) -> None:
        self.root = root

    def fail(self, where: str, what: str) -> NoReturn:
        raise SchemaProblem(where or "the top level", what)

    def must_be(self, schema: Schema, where: str, words: str, value: object) -> None:
        """`where must be ...`: in the words of the schema's description where it has one."""
        self.fail(where, f"must be {schema.get('description', words)}, got {shown(value)}")

    def node(self, schema: Schema, value: object, where: str) -> None:
        if "$ref" in schema:
            self.node(self.root["$defs"][schema["$ref"].removeprefix("#/$defs/")], value, where)
        if "type" in schema:
            wanted = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(_has_type(value, t) for t in wanted):
                self.must_be(schema, where, " or ".join(TYPE_WORDS[t] for t in wanted), value)
        if "const" in schema and value != schema["const"]:
            self.must_be(schema, where, shown(schema["const"]), value)
        if "enum" in schema and not any(type_of(value) == type_of(v) and value == v for v in schema["enum"]):
            self.must_be(schema, where, "one of " + ", ".join(schema["enum"]), value)
        if isinstance(value, str):
            self.string(schema, value, where)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            self.number(schema, value, where)
        elif isinstance(value, list):
            self.array(schema, value, where)
        elif isinstance(value, dict):
            self.object(schema, value, where)
        for part in schema.get("allOf", []):
            self.node(part, value, where)
        if (
            "contains" in schema
            and isinstance(value, list)
            and not any(self.fits(schema["contains"], v) for v in value)
        ):
            (key, rule), *_ = schema["contains"]["properties"].items()
            self.fail(where, f"has no entry whose {key} is {shown(rule['const'])}")
        if isinstance(value, dict):
            self.across(schema, value, where)

    def fits(self, schema: Schema, value: object) -> bool:
        try:
            self.node(schema, value, "")
        except SchemaProblem:
            return False
        return True

    def string(self, schema: Schema, value: str, where: str) -> None:
        if "format" in schema:
            reason = format_problem(schema["format"], value)
            if reason is not None:
                self.fail(where, f"{shown(value)} {reason}")
        if "pattern" in schema and re.fullmatch(schema["pattern"], value) is None:
            self.must_be(schema, where, f"text matching {schema['pattern']}", value)
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if len(value) < low or (high is not None and len(value) > high):
            words = f"{low} to {high} characters long" if high is not None else f"at least {low} characters long"
            if low == 0:
                words = f"at most {high} characters long"
            self.must_be(schema, where, f"a string {words}", value)

    def number(self, schema: Schema, value: float, where: str) -> None:
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            words = f"from {low} to {high}" if low is not None and high is not None else f"at least {low}"
            if low is None:
                words = f"at most {high}"
            self.must_be(schema, where, words, value)

    def array(self, schema: Schema, value: list[Any], where: str) -> None:
        if len(value) < schema.get("minItems", 0):
            self.must_be(schema, where, "a non-empty list" if schema["minItems"] == 1 else "a longer list", value)
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            self.must_be(schema, where, f"a list of at most {schema['maxItems']} entries", value)
        if "items" in schema:
            for index, item in enumerate(value):
                self.node(schema["items"], item, _item(where, index))

    def object(self, schema: Schema, value: dict[str, Any], where: str) -> None:
        missing = [key for key in schema.get("required", []) if key not in value]
        if missing:
            self.fail(where, "lacks " + ", ".join(missing))
        properties: Schema = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        if extra is False:
            unknown = sorted(key for key in value if key not in properties)
            if unknown:
                self.fail(where, "has unknown field(s) " + ", ".join(shown(key) for key in unknown))
        if "propertyNames" in schema:
            for key in value:
                self.node(schema["propertyNames"], key, f"{where} key")
        if len(value) < schema.get("minProperties", 0):
            self.must_be(schema, where, "a non-empty object", value)
        for key, rule in properties.items():
            if key in value:
                self.node(rule, value[key], _field(where, key))
        if isinstance(extra, dict):
            for key, item in value.items():
                if key not in properties:
                    self.node(extra, item, _entry(where, key))
        for key, rule in schema.get("dependentSchemas", {}).items():
            if key in value:
                self.node(rule, value, where)

    def across(self, schema: Schema, value: dict[str, Any], where: str) -> None:
        """The x- keywords: rules between fields of one object, checked once its fields are."""
        if "x-path-in-folder" in schema:
            folder = f"{value[schema['x-path-in-folder']]}/"
            if not value["path"].startswith(folder):
                self.fail(_field(where, "path"), f"must be in {folder}, got {shown(value['path'])}")
        if schema.get("x-blocks-cover-size") and value.get("blocks") is not None:
            count = math.ceil(value["size"] / value["blocks"]["size"])
            if len(value["blocks"]["sha256"]) != count:
                self.fail(_field(where, "blocks.sha256"), f"must hold {count} digest(s), one per block")
        if schema.get("x-graph-files-listed"):
            for index, graph in enumerate(value["graphs"]):
                folder = graph["path"].rsplit("/", 1)[0]
                for rel in [graph["path"], *(f"{folder}/{name}" for name in graph["external_data"])]:
                    if rel not in value["files"]:
                        self.fail(_item("graphs", index), f"names {rel}, which files does not list")
