"""`costguard-openapi`: a REST reference generated at build time from an OpenAPI document,
so the reference is the contract the tests hold the server to, never a copy of it.

    ```{costguard-openapi} jupyter_costguard/web/openapi.yaml
    ```

The path is relative to the repository root. Each operation is a section titled
`METHOD /path` with the anchor `<prefix>-<method>-<path>` (tests/test_docs_build.py checks
that every operation of both documents has one); then the document's schemas, one section
each, with their properties.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from cg_nodes import inline, paragraphs, slug
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
METHODS = ("get", "put", "post", "delete", "patch")


def load(path: str) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / path).read_text())
    assert isinstance(doc, dict)
    return doc


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, operation) of every operation, in the document's order."""
    return [(m, p, op) for p, ops in doc["paths"].items() for m, op in ops.items()
            if m in METHODS]


def anchor(prefix: str, method: str, path: str) -> str:
    return slug(prefix, method, path) or prefix


def resolve(doc: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """A `$ref` within the document, followed (once is all these documents need)."""
    ref = item.get("$ref")
    if not ref:
        return item
    node: Any = doc
    for part in ref.lstrip("#/").split("/"):
        node = node[part]
    return dict(node)


def schema_type(schema: dict[str, Any]) -> str:
    """A schema in a few words: its type, its $ref's name, its enum or its alternatives."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return " or ".join(schema_type(s) for s in schema[key])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(str(k) for k in kind)
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array of {schema_type(schema['items'])}"
    return str(kind)


def field_list(rows: list[tuple[str, str, str]]) -> nodes.Node:
    """Rows of (name, kind, description) as a bullet list."""
    items = nodes.bullet_list()
    for name, kind, text in rows:
        para = nodes.paragraph()
        para += nodes.literal(name, name)
        para += nodes.Text(f" ({kind})")
        if text:
            para += nodes.Text(": ")
            para.extend(inline(" ".join(text.split())))
        items += nodes.list_item("", para)
    return items


class OpenAPIDirective(SphinxDirective):
    required_arguments = 1  # the document, relative to the repository root
    option_spec = {"prefix": str}

    def section(self, ids: str, title: str) -> nodes.section:
        sec = nodes.section(ids=[ids])
        sec += nodes.title(title, title)
        return sec

    def run(self) -> list[nodes.Node]:
        path = self.arguments[0]
        self.env.note_dependency(str(ROOT / path))
        doc = load(path)
        prefix = self.options.get("prefix", "api")
        out: list[nodes.Node] = []
        for method, route, op in operations(doc):
            sec = self.section(anchor(prefix, method, route), f"{method.upper()} {route}")
            if op.get("summary"):
                sec += nodes.paragraph("", "", nodes.strong("", "", *inline(op["summary"])))
            sec.extend(paragraphs(op.get("description", "")))
            needs = op.get("x-costguard-permissions")
            if needs:
                text = ", ".join(f"{n['action']} on {n['resource']}" for n in needs)
                sec += nodes.paragraph("", "", nodes.emphasis("", "Needs: "), nodes.Text(text))
            params = [resolve(doc, p) for p in op.get("parameters", [])]
            if params:
                sec += nodes.rubric("", "Parameters")
                sec += field_list([(f"{p['name']}", f"{p['in']}, "
                                    f"{schema_type(p.get('schema', {}))}"
                                    + (", required" if p.get("required") else ""),
                                    p.get("description", "")) for p in params])
            body = op.get("requestBody")
            if body:
                body = resolve(doc, body)
                sec += nodes.rubric("", "Request body")
                sec.extend(paragraphs(body.get("description", "")))
                for ctype, content in body.get("content", {}).items():
                    sec += nodes.paragraph("", "", nodes.literal(ctype, ctype), nodes.Text(
                        ": " + schema_type(content.get("schema", {}))))
                    props = resolve(doc, content.get("schema", {})).get("properties", {})
                    if props:
                        sec += field_list([(n, schema_type(s), s.get("description", ""))
                                           for n, s in props.items()])
            sec += nodes.rubric("", "Responses")
            rows = []
            for code, answer in op.get("responses", {}).items():
                answer_doc = resolve(doc, answer)
                kinds = [schema_type(c.get("schema", {}))
                         for c in answer_doc.get("content", {}).values()]
                rows.append((str(code), ", ".join(kinds) or "no body",
                             answer_doc.get("description", "")))
            sec += field_list(rows)
            out.append(sec)
        schemas = doc.get("components", {}).get("schemas", {})
        if schemas:
            top = self.section(slug(prefix, "schemas"), "Schemas")
            for name, schema in schemas.items():
                sec = self.section(slug(prefix, "schema", name), name)
                sec.extend(paragraphs(schema.get("description", "")))
                props = schema.get("properties", {})
                if props:
                    required = set(schema.get("required", []))
                    sec += field_list([(n, schema_type(s) + (", required" if n in required
                                                             else ""),
                                        s.get("description", "")) for n, s in props.items()])
                elif "type" in schema or "enum" in schema or "oneOf" in schema:
                    sec += nodes.paragraph("", "", nodes.Text(schema_type(schema)))
                top += sec
            out.append(top)
        return out


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("costguard-openapi", OpenAPIDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
