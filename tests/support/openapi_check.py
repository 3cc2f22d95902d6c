"""Holds API responses to the OpenAPI document shipped in the package."""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from jupyter_costguard.web.openapi import OPENAPI_PATH

BASE = "urn:costguard-openapi"


@functools.lru_cache(maxsize=1)
def spec() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(OPENAPI_PATH.read_text())
    return doc


@functools.lru_cache(maxsize=1)
def registry() -> Registry:
    return Registry().with_resource(BASE, Resource(contents=spec(), specification=DRAFT202012))


def route_for(path: str) -> str:
    """The OpenAPI path template matching a concrete path like /notebooks/a.ipynb."""
    for template in spec()["paths"]:
        pattern = "^" + re.sub(r"\{[^}]+\}", ".+", re.escape(template).replace(r"\{", "{")
                               .replace(r"\}", "}")) + "$"
        if re.match(pattern, path):
            return template
    raise AssertionError(f"{path} is not in the OpenAPI document")


def validate(path: str, status: int, body: Any, method: str = "get") -> None:
    """Raise if `body` is not what the document promises for this path and status."""
    template = route_for(path)
    responses = spec()["paths"][template][method]["responses"]
    assert str(status) in responses, f"{method.upper()} {template} documents no {status}"
    response = responses[str(status)]
    if "$ref" in response:
        response = spec()["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    schema = response["content"]["application/json"]["schema"]
    if "$ref" in schema:
        schema = {"$ref": BASE + schema["$ref"]}
    Draft202012Validator(schema, registry=registry()).validate(body)


def documented_get_paths() -> list[str]:
    return [p for p, ops in spec()["paths"].items() if "get" in ops]


def validate_request(path: str, body: Any, method: str = "post") -> None:
    """Raise if `body` is not a request body the document accepts for this path."""
    operation = spec()["paths"][route_for(path)][method]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    if "$ref" in schema:
        schema = {"$ref": BASE + schema["$ref"]}
    Draft202012Validator(schema, registry=registry()).validate(body)
