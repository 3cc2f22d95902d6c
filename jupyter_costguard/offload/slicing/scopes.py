"""Free names of nested scopes (functions, lambdas, class bodies, comprehensions), with
Python's scoping rules, and the in-place changes a statement makes."""

from __future__ import annotations

import ast
from typing import Union

from jupyter_costguard.offload.slicing.libraries import (
    IN_PLACE_KEYWORDS,
    LEARNING_METHODS,
    READ_ONLY_METHODS,
)

COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_Comprehension = Union[ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp]


def root_name(node: ast.expr) -> str | None:
    """The variable an attribute/subscript chain hangs off (`a` for `a.b[0].c`)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def owner_name(node: ast.expr) -> str | None:
    """The name at the root of `model.parameters()`, `x[0].data`, `axes.flat`: through calls,
    attributes and subscripts."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def attribute_chain(value: ast.expr) -> str:
    """"a.b.f" for the call `x.a.b.f(...)` (or `await x.a.b.f()`): what follows the root."""
    call = value.value if isinstance(value, ast.Await) else value
    attrs: list[str] = []
    node = call.func if isinstance(call, ast.Call) else call
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            attrs.append(node.attr)
        node = node.value
    return ".".join(reversed(attrs))


def changed_by_call(value: ast.expr) -> str | None:
    """The name a statement like `x.append(1)` (or `await x.refresh()`) changes, if any.

    Methods that only read do not change (unless `inplace=...` says so); learning methods
    (`fit`) change their object wherever they are called, so they are handled as calls."""
    call = value.value if isinstance(value, ast.Await) else value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return None
    attr = call.func.attr
    if attr in LEARNING_METHODS:
        return None
    if attr in READ_ONLY_METHODS and not any(k.arg in IN_PLACE_KEYWORDS for k in call.keywords):
        return None
    return root_name(call.func.value)


class Scope(ast.NodeVisitor):
    """Free names of one nested scope: a function, lambda, class body or comprehension.

    Python decides scope per function, not per statement, so this pass ignores order.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "function", "class" or "comprehension"
        self.locals: set[str] = set()
        self.loads: set[str] = set()
        self.globals: set[str] = set()
        self.nonlocals: set[str] = set()
        self.child_now: set[str] = set()  # free names of nested scopes that run right away
        self.child_later: set[str] = set()  # free names of nested functions (run when called)
        self.global_stores: set[str] = set()
        self.walrus: set[str] = set()  # a comprehension's walrus binds in the enclosing scope
        self.changed: set[str] = set()  # roots of `x.a = ...`, `x[0] = ...`, `x.append(...)`
        self.calls: set[str] = set()  # functions called by name
        #: statements calling a method: (root, the attribute chain "a.b.f", whether it changes
        #: an object), decided by the caller, which knows whether the root is a module
        self.method_calls: set[tuple[str, str, bool]] = set()

    @classmethod
    def of(cls, node: ast.AST) -> Scope:
        """Analyse `node`'s own scope; its decorators, defaults etc. belong to the caller."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            scope = cls("function")
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None:
                    scope.locals.add(arg.arg)
            body: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else [*node.body]
        elif isinstance(node, ast.ClassDef):
            scope, body = cls("class"), [*node.body]
        elif isinstance(node, COMPREHENSIONS):
            scope, body = cls("comprehension"), []
            for i, gen in enumerate(node.generators):
                body += [gen.target, *gen.ifs] if i == 0 else [gen.target, gen.iter, *gen.ifs]
            body += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        else:  # pragma: no cover - callers only pass scopes
            raise TypeError(type(node).__name__)
        for child in body:
            scope.visit(child)
        return scope

    def now(self) -> set[str]:
        """Outside names needed as soon as the scope's code is reached."""
        if self.kind == "function":
            return set()
        return (self.loads | self.child_now) - self.locals

    def later(self) -> set[str]:
        """Outside names needed only when a function inside is called."""
        if self.kind == "function":
            return (self.loads | self.child_now | self.child_later) - self.locals
        if self.kind == "class":  # methods do not see the class body's names
            return set(self.child_later)
        return self.child_later - self.locals

    def changes(self) -> set[str]:
        """Outside names this scope (or one inside it) changes in place."""
        return self.changed - self.locals

    def free_method_calls(self) -> set[tuple[str, str, bool]]:
        return {call for call in self.method_calls if call[0] not in self.locals}

    def free_calls(self) -> set[str]:
        return self.calls - self.locals

    def _store(self, name: str) -> None:
        if name in self.globals:
            self.global_stores.add(name)
        elif name not in self.nonlocals:
            self.locals.add(name)

    def _absorb(self, sub: Scope) -> None:
        self.child_now |= sub.now()
        self.child_later |= sub.later()
        self.global_stores |= sub.global_stores
        self.changed |= sub.changes()
        self.method_calls |= sub.free_method_calls()
        self.calls |= sub.free_calls()
        for name in sub.walrus:
            if self.kind == "comprehension":
                self.walrus.add(name)
            else:
                self._store(name)

    def _outer_parts(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        a = node.args
        for expr in [*a.defaults, *a.kw_defaults]:
            if expr is not None:
                self.visit(expr)
        if not isinstance(node, ast.Lambda):
            for expr in node.decorator_list:
                self.visit(expr)
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None and arg.annotation is not None:
                    self.visit(arg.annotation)
            if node.returns is not None:
                self.visit(node.returns)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.loads.add(node.id)
        else:
            self._store(node.id)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._outer_parts(node)
        self._store(node.name)
        self._absorb(Scope.of(node))

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._outer_parts(node)
        self._absorb(Scope.of(node))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        self._store(node.name)
        self._absorb(Scope.of(node))

    def _comprehension(self, node: _Comprehension) -> None:
        self.visit(node.generators[0].iter)  # evaluated in the enclosing scope
        self._absorb(Scope.of(node))

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        if self.kind == "comprehension":
            self.walrus.add(node.target.id)
        else:
            self._store(node.target.id)

    def visit_Global(self, node: ast.Global) -> None:
        self.globals.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.nonlocals.update(node.names)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._store(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self._store(alias.asname or alias.name)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._store(node.name)
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        call = node.value.value if isinstance(node.value, ast.Await) else node.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
            root = root_name(call.func.value)
            if root is not None:
                changes = changed_by_call(node.value) is not None
                self.method_calls.add((root, attribute_chain(node.value), changes))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute | ast.Subscript) -> None:
        root = root_name(node)
        if root is not None and not isinstance(node.ctx, ast.Load):
            self.changed.add(root)
        self.generic_visit(node)

    visit_Subscript = visit_Attribute

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name):
            self.calls.add(node.func.id)
        elif isinstance(node.func, ast.Attribute) and node.func.attr in LEARNING_METHODS:
            root = root_name(node.func.value)
            if root is not None:
                self.changed.add(root)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self.loads.add(node.target.id)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            self._store(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self._store(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self._store(node.rest)
        self.generic_visit(node)
