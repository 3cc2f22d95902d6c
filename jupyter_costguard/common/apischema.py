"""The REST API's request schemas, read from its OpenAPI document (`web/openapi.yaml`) once:
the one place a request's fields, types and limits are written. A refusal is a sentence that
names the field. Here, in the bottom layer, because the stages that parse requests (alerts,
offload, and the hub report's warnings in cost) sit below `web`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.exceptions import best_match
from referencing import Registry
from referencing.jsonschema import DRAFT202012

#: the document (its home is the web layer, which serves it; the file is read, not imported)
OPENAPI_PATH = Path(__file__).parent.parent / "web" / "openapi.yaml"
_BASE = "urn:costguard-openapi"
#: a schema's own sentence for a failed `pattern` or `required` (`{where}`: the field)
MESSAGE = "x-costguard-error"
_TYPES = {"string": "a string", "integer": "an integer", "number": "a number",
          "object": "an object", "array": "a list", "boolean": "true or false"}


class SchemaError(ValueError):
    """A request body the document refuses; the message names the field and the rule."""


def _load() -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    doc: dict[str, Any] = yaml.load(OPENAPI_PATH.read_text("utf-8"), Loader=loader)
    return doc


DOCUMENT: dict[str, Any] = _load()
#: what `GET openapi.json` answers, encoded once
DOCUMENT_JSON: bytes = json.dumps(DOCUMENT).encode()
_REGISTRY: Registry = Registry().with_resource(_BASE, DRAFT202012.create_resource(DOCUMENT))


def _where(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _bounds(schema: dict[str, Any]) -> str:
    if "minimum" in schema and "maximum" in schema:
        return f"between {schema['minimum']} and {schema['maximum']}"
    words = (("minimum", "at least"), ("exclusiveMinimum", "above"),
             ("maximum", "at most"), ("exclusiveMaximum", "below"))
    return " and ".join(f"{word} {schema[key]}" for key, word in words if key in schema)


def _root_type(schema: dict[str, Any], required: bool) -> str:
    fields = schema.get("required") or []
    if not required:
        return "request body must be empty or a JSON object"
    return "request body must be a JSON object" + (f" with {', '.join(fields)}" if fields
                                                   else "")


def sentence(error: ValidationError, required_body: bool = True) -> str:
    """What is wrong, naming the field as a client wrote it (`actions[0].args.url`)."""
    where, kind, value, schema = _where(error.absolute_path), error.validator, \
        error.validator_value, error.schema
    own = schema.get(MESSAGE) if isinstance(schema, dict) else None
    if own and kind in ("pattern", "required"):
        return str(own).format(where=where)
    if kind == "type":
        if not where:
            return _root_type(schema, required_body)
        names = [_TYPES.get(t, t) for t in ([value] if isinstance(value, str) else value)
                 if t != "null"]
        return f"{where} must be {' or '.join(names)}"
    if kind == "required":
        missing = [n for n in value if n not in error.instance]
        return f"{_join(where, missing[0])} is required"
    if kind == "additionalProperties":
        known = set(schema.get("properties", {}))
        unknown = ", ".join(sorted(set(error.instance) - known))
        return f"{where} has unknown field(s): {unknown}" if where else \
            f"unknown field(s): {unknown}"
    if kind == "enum":
        return f"{where} must be one of {', '.join(map(str, value))}"
    if kind == "minLength":
        return f"{where} must not be empty" if value == 1 else \
            f"{where} must be at least {value} characters"
    if kind == "maxLength":
        return f"{where} must be at most {value} characters"
    if kind == "maxItems":
        return f"{where} must hold at most {value} items"
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return f"{where} must be {_bounds(schema)}"
    return f"{where or 'request body'}: {error.message}"


class RequestSchema:
    """One of the document's request schemas (`components/schemas/<name>`), compiled once."""

    def __init__(self, name: str, required: bool = True) -> None:
        self.name = name
        self.required = required
        self.schema: dict[str, Any] = DOCUMENT["components"]["schemas"][name]
        self._validator = Draft202012Validator(
            {"$ref": f"{_BASE}#/components/schemas/{name}"}, registry=_REGISTRY)

    def check(self, body: Any) -> None:
        """SchemaError naming the field unless the document accepts `body` (None: no body,
        which only a request whose body is optional may send)."""
        if body is None:
            if self.required:
                raise SchemaError(_root_type(self.schema, True))
            return
        error = best_match(self._validator.iter_errors(body))
        if error is not None:
            raise SchemaError(sentence(error, self.required))

    def limit(self, path: Sequence[str], keyword: str) -> Any:
        """A limit the document writes for a field (`limit(["bring_back"], "maxItems")`),
        for code that applies it to more than a request."""
        schema = self.schema
        for name in path:
            schema = schema["properties"][name]
            if "$ref" in schema:
                schema = DOCUMENT["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        return schema[keyword]
