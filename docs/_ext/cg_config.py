"""`costguard-config`: the configuration reference of one configurable class, generated at
build time from its traitlets (name, type, default, help), so the reference cannot drift from
the code. Only the traits costguard declares are listed (not those of jupyter_server's
ExtensionApp or traitlets' Application, which their own docs describe).

    ```{costguard-config} jupyter_costguard.app.CostGuard
    ```

Each trait gets the anchor `<section>-<name>`, e.g. `costguard-sample-interval`
(tests/test_docs_build.py checks that every trait has one).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from cg_nodes import inline, paragraphs, slug
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

#: where costguard's own traits are declared
PACKAGE = "jupyter_costguard."


def load_class(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    assert isinstance(cls, type)
    return cls


def own_traits(cls: type) -> dict[str, Any]:
    """The configurable traits declared by costguard's classes in `cls`'s MRO, by name."""
    traits: dict[str, Any] = cls.class_traits(config=True)  # type: ignore[attr-defined]
    return {name: t for name, t in sorted(traits.items())
            if (t.this_class.__module__ + ".").startswith(PACKAGE)}


def type_of(trait: Any) -> str:
    """The trait's kind as a user writes it: Float, List, Enum of its values..."""
    kind = type(trait).__name__
    values = getattr(trait, "values", None)
    if values is not None and kind in ("Enum", "CaselessStrEnum"):
        return f"{kind}: " + ", ".join(repr(v) for v in values)
    if getattr(trait, "allow_none", False):
        kind += " or None"
    return kind


def default_of(cls: type, name: str, trait: Any) -> str:
    """The default as written in a config file; a default computed when the server starts
    (a `@default` method) says so."""
    if name in getattr(cls, "_trait_default_generators", {}) or any(
            f"_{name}_default" in vars(k) for k in cls.__mro__):
        return "computed at start (see the description)"
    if trait.default_value == sys.executable:  # machine-specific: say what it is
        return "the Python running the server (sys.executable)"
    try:
        return str(trait.default_value_repr())
    except Exception:  # a trait whose default cannot be written out
        return "see the description"


class ConfigDirective(SphinxDirective):
    required_arguments = 1  # the class, dotted
    option_spec = {"section": str}  # the config section, default: the class's name

    def run(self) -> list[nodes.Node]:
        cls = load_class(self.arguments[0])
        section = self.options.get("section", cls.__name__)
        items = nodes.definition_list(classes=["costguard-config"])
        for name, trait in own_traits(cls).items():
            anchor = slug(section, name)
            term = nodes.term("", "", nodes.literal(f"c.{section}.{name}",
                                                   f"c.{section}.{name}"))
            term["ids"].append(anchor)
            body = nodes.definition()
            meta = nodes.paragraph()
            meta += nodes.emphasis("", type_of(trait))
            meta += nodes.Text(", default ")
            meta += nodes.literal("", default_of(cls, name, trait))
            body += meta
            body.extend(paragraphs(trait.help) or [nodes.paragraph("", "", *inline("(no help)"))])
            items += nodes.definition_list_item("", term, body)
        return [items]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("costguard-config", ConfigDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
