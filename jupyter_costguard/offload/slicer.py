"""Find the earlier code cells that a selection of notebook cells needs, so they can run as a job.

Running the whole notebook as a batch job wastes the accelerator on cells nobody asked for, and
running only the selected cells fails on the first name an earlier cell defined.  The slicer
picks the middle: the selected cells plus, transitively, every earlier code cell that binds or
changes a name they (or the cells pulled in for them) use, in notebook order.

It works on the cells the frontend sends (unsaved edits included), not on the file on disk.  Each
code cell up to the last selected one is transformed exactly as IPython would run it (magics,
``!shell``, ``?help``) and its names are found with :mod:`ast`, with Python's scoping rules:

* a cell *defines* the names it binds at module level (assignment, import, ``def``, ``class``,
  ``for``/``with`` targets, walrus, names a function assigns through ``global``);
* a cell *uses* the free names it loads, including free names of comprehensions, class bodies,
  decorators and defaults; free names of function and lambda bodies are needed when the function
  is called, which may be as late as the last selected cell, so they are looked up from there;
* a cell that *changes* a name (``x += 1``, ``x.a = 1``, ``x[0] = 1``, ``del x``, or a statement
  that is a method call such as ``x.append(1)`` or ``df.drop(..., inplace=True)``) both uses and
  defines it, so the chain back to the last plain ``x = ...`` is kept.  Method calls that only
  read (``df.head()``, ``df.describe()``, ...) are not taken as changes;
* calling a function by name (``train()``) does what its body does to globals: assign those it
  declares ``global``, change those it changes in place (``history.append(loss)``), and so on for
  the functions it calls by name; the calling cell then defines or changes those names;
* a binding that may not happen (inside ``if``, a loop, a ``try`` without the same binding in each
  handler) defines the name but does not hide earlier definitions, and if no earlier cell defines
  it the name is not reported as unresolved.

Cells with no id get ``"#<index>"``.  ``except ... as e`` does not define ``e`` for later cells:
Python deletes it when the handler ends.

Magics: ``%time``/``%prun`` and ``%%time``/``%%prun``/``%%capture`` run their body as Python in
the user's namespace, so it is analysed like the cell itself (``%%capture out`` also defines
``out``); ``%timeit``/``%%timeit`` run it in a private scope, so it only uses names.  ``$name`` and
``{expr}`` in ``!shell`` commands and other line magics are expanded by IPython from the user's
namespace, so they are weak uses: cells defining them are pulled in, but a name nobody defines
(an environment variable such as ``$HOME``) is not reported.  Any other cell magic (``%%bash``,
``%%writefile``, ``%%html``, ...) is opaque: its body has no Python names.

Known limits -- the slice can miss a dependency through:

* code built at run time: ``exec``/``eval`` of strings, writes to ``globals()``/``locals()``,
  ``setattr`` on a module, ``%run``, ``%store -r``, ``%load``;
* names a star import brings in: an earlier ``from m import *`` cell is included whenever some
  needed name is still undefined, and names it might provide are not reported as unresolved;
* state outside Python: files (``%%writefile``, ``df.to_csv`` in one cell and ``read_csv`` in a
  later one), environment variables (``%env``), the working directory (``%cd``), databases;
* changes through an alias (``y = x; y.append(1)`` changes ``x`` but only ``y`` is tracked),
  through a function's argument (``f(x)`` that appends to ``x``), or through a method or a
  function not called by plain name (``trainer.fit()`` whose method appends to a global);
* magics inside function bodies, which are only seen as calls to ``get_ipython``;
* a function called between two definitions of a name its body uses: only the later definition is
  taken (the call may happen as late as the last selected cell).

It errs the other way too (cells included that were not needed): a statement calling a method of
a module (``plt.plot(...)``, ``np.random.seed(0)``) counts as changing that module, and a
function that assigns a ``global`` defines it in its own cell even if it is never called.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

#: Names the job's interpreter or IPython provides; never reported as unresolved.
_PROVIDED = frozenset(dir(builtins)) | frozenset(
    {"__builtins__", "__class__", "get_ipython", "In", "Out", "exit", "quit", "display"}
    | {"_", "__", "___", "_i", "_ii", "_iii", "_ih", "_oh", "_dh"}
)
#: Magics whose body is Python run in the user's namespace: it defines names.
_EXEC_MAGICS = frozenset({"time", "prun", "capture"})
#: Magics whose body is Python run in a scope of its own (timeit wraps it in a function).
_SCOPED_MAGICS = frozenset({"timeit"})
#: Options (those taking a value, plain flags) to skip before the Python statement of a magic.
_MAGIC_OPTIONS = {"timeit": ("nrp", "tcqo"), "prun": ("DlsT", "rq")}
#: Method calls that only read their object, so a statement calling them changes nothing.
_READ_ONLY_METHODS = frozenset(
    {"head", "tail", "describe", "info", "summary", "value_counts", "nunique", "unique"}
    | {"isna", "isnull", "keys", "values", "items", "count", "to_string", "memory_usage"}
)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_Comprehension = Union[ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp]


class SliceError(ValueError):
    """Bad input to the slicer; `cell_id`/`index` name the offending cell when there is one."""

    def __init__(self, message: str, cell_id: str | None = None, index: int | None = None) -> None:
        super().__init__(message)
        self.cell_id = cell_id
        self.index = index


@dataclass(frozen=True)
class SlicedCell:
    """One cell of the slice, with why it is there so the user can check the choice."""

    index: int  # position in the notebook's cell list, markdown cells included
    cell_id: str
    source: str  # as the user wrote it
    code: str  # after IPython's transformations: what the job runs
    selected: bool
    provides: tuple[str, ...]  # names later included cells need from it (sorted)
    reason: str  # e.g. "selected", "imports np", "defines df; changes model"


@dataclass(frozen=True)
class Slice:
    """The cells a job must run, in notebook order, and what the caller needs to know about them."""

    cells: tuple[SlicedCell, ...]
    defines: tuple[str, ...]  # names the selected cells bind: the natural results to bring back
    unresolved: tuple[str, ...]  # names used that no included cell, builtin or `given` provides

    @property
    def code(self) -> str:
        """One script, each cell headed by a comment so tracebacks can be traced to cells."""
        parts = []
        for cell in self.cells:
            body = cell.code if cell.code.endswith("\n") or not cell.code else cell.code + "\n"
            cell_id = " ".join(cell.cell_id.splitlines())  # an id must not end the comment
            parts.append(f"# cell {cell.index} (id {cell_id})\n{body}")
        return "".join(parts)

    def to_json(self) -> dict[str, Any]:
        """What the frontend shows before the job is submitted."""
        return {
            "cells": [
                {
                    "index": c.index,
                    "cell_id": c.cell_id,
                    "selected": c.selected,
                    "provides": list(c.provides),
                    "reason": c.reason,
                    "source": c.source,
                }
                for c in self.cells
            ],
            "defines": list(self.defines),
            "unresolved": list(self.unresolved),
        }


def _replace(known: set[str], after: set[str]) -> None:
    """Set `known` (shared with the caller) to what is surely bound after a branch."""
    known.clear()
    known.update(after)


def _root_name(node: ast.expr) -> str | None:
    """The variable an attribute/subscript chain hangs off (`a` for `a.b[0].c`)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _changed_by_call(value: ast.expr) -> str | None:
    """The name a statement like `x.append(1)` (or `await x.refresh()`) changes, if any."""
    call = value.value if isinstance(value, ast.Await) else value
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr not in _READ_ONLY_METHODS
    ):
        return _root_name(call.func.value)
    return None


#: What calling a function does to the cell's names: (globals it assigns, names it changes).
_Effects = tuple[frozenset[str], frozenset[str]]


class _Scope(ast.NodeVisitor):
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

    @classmethod
    def of(cls, node: ast.AST) -> _Scope:
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
        elif isinstance(node, _COMPREHENSIONS):
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

    def free_calls(self) -> set[str]:
        return self.calls - self.locals

    def _store(self, name: str) -> None:
        if name in self.globals:
            self.global_stores.add(name)
        elif name not in self.nonlocals:
            self.locals.add(name)

    def _absorb(self, sub: _Scope) -> None:
        self.child_now |= sub.now()
        self.child_later |= sub.later()
        self.global_stores |= sub.global_stores
        self.changed |= sub.changes()
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
        self._absorb(_Scope.of(node))

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._outer_parts(node)
        self._absorb(_Scope.of(node))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        self._store(node.name)
        self._absorb(_Scope.of(node))

    def _comprehension(self, node: _Comprehension) -> None:
        self.visit(node.generators[0].iter)  # evaluated in the enclosing scope
        self._absorb(_Scope.of(node))

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
        root = _changed_by_call(node.value)
        if root is not None:
            self.changed.add(root)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute | ast.Subscript) -> None:
        root = _root_name(node)
        if root is not None and not isinstance(node.ctx, ast.Load):
            self.changed.add(root)
        self.generic_visit(node)

    visit_Subscript = visit_Attribute

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name):
            self.calls.add(node.func.id)
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


def _strip_options(arg: str, magic: str) -> str:
    """Drop `-n 3`-style options before a magic's Python statement."""
    with_value, flags = _MAGIC_OPTIONS.get(magic, ("", ""))
    rest = arg
    while True:
        m = re.match(r"\s*-(\S+)", rest)
        if m is None:
            return rest.lstrip()
        cluster, tail = m.group(1), rest[m.end() :]
        for i, char in enumerate(cluster):
            if char in flags:
                continue
            if char in with_value:
                if i == len(cluster) - 1:  # the value is the next word
                    tail = re.sub(r"^\s*\S+", "", tail, count=1)
                break
            return rest.lstrip()  # not an option: the statement starts here (e.g. `-x`)
        rest = tail


@dataclass
class _CellNames:
    """What one cell binds, changes and needs."""

    binds: set[str] = field(default_factory=set)  # bound other than by import (maybe conditionally)
    imports: set[str] = field(default_factory=set)
    mutates: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)  # `del x` not followed by a rebinding
    stars: list[str] = field(default_factory=list)  # modules star-imported
    definite: set[str] = field(default_factory=set)  # surely bound when the cell ends
    hard: set[str] = field(default_factory=set)  # needed from earlier cells
    soft: set[str] = field(default_factory=set)  # needed only if some earlier cell defines it
    late: set[str] = field(default_factory=set)  # needed by its functions, whenever called

    @property
    def defs(self) -> set[str]:
        return self.binds | self.imports | self.mutates

    @property
    def results(self) -> set[str]:
        """Values worth bringing back: modules are not, deleted names cannot be."""
        return (self.binds | self.mutates) - self.deleted


class _CellAnalyser:
    """Module-level names of one cell, in statement order, tracking what is surely bound."""

    def __init__(
        self,
        transform: Callable[[str], str],
        writers: dict[str, _Effects],
        where: str,
        index: int,
        cell_id: str,
    ) -> None:
        self.transform = transform
        self.writers = writers  # what calling each function defined so far does
        self.where, self.index, self.cell_id = where, index, cell_id
        self.out = _CellNames()
        self.bound: set[str] = set()  # bound anywhere so far, even conditionally
        self.later: set[str] = set()  # free names of functions: resolved when the cell ends
        self.weak = 0  # >0 while reading names IPython expands only if they exist

    def run(self, code: str) -> _CellNames:
        known: set[str] = set()
        self._stmts(self._parse(code, "", 0).body, known)
        out = self.out
        for name in self.later - known:
            if name in self.bound or self.out.stars:
                out.soft.add(name)
            else:
                out.late.add(name)
        out.definite = known
        out.soft |= (out.binds - known) - out.hard  # conditional bindings keep earlier values
        out.soft -= out.hard
        return out

    def _parse(self, code: str, what: str, line_offset: int) -> ast.Module:
        try:
            return ast.parse(code)
        except SyntaxError as exc:
            line = (exc.lineno or 0) + line_offset
            raise SliceError(
                f"{self.where} has a syntax error{what} at line {line}: {exc.msg}",
                cell_id=self.cell_id,
                index=self.index,
            ) from None

    # -- names -----------------------------------------------------------------------------
    def _need(self, name: str, soft: bool = False) -> None:
        if soft or self.weak or self.out.stars:  # a star import may already provide it
            self.out.soft.add(name)
        else:
            self.out.hard.add(name)

    def _load(self, name: str, known: set[str]) -> None:
        if name not in known:
            self._need(name, soft=name in self.bound)

    def _bind(self, name: str, known: set[str]) -> None:
        self.out.binds.add(name)
        self.out.deleted.discard(name)
        self.bound.add(name)
        known.add(name)

    def _mutate(self, name: str, known: set[str]) -> None:
        self._load(name, known)
        self.out.mutates.add(name)

    def _target(self, node: ast.expr, known: set[str]) -> None:
        if isinstance(node, ast.Name):
            self._bind(node.id, known)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                self._target(elt, known)
        elif isinstance(node, ast.Starred):
            self._target(node.value, known)
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            self._expr(node.value, known)
            if isinstance(node, ast.Subscript):
                self._expr(node.slice, known)
            root = _root_name(node)
            if root is not None:
                self._mutate(root, known)
        else:
            self._expr(node, known)

    def _nested(self, node: ast.AST, known: set[str]) -> _Scope:
        scope = _Scope.of(node)
        for name in scope.now():
            self._load(name, known)
        self.later |= scope.later()
        for name in scope.global_stores:  # defined only if the function runs
            self._bind(name, set())
        for name in scope.walrus:  # the comprehension may not iterate
            self._bind(name, set(known))
        return scope

    # -- expressions -----------------------------------------------------------------------
    def _expr(self, node: ast.AST | None, known: set[str]) -> None:
        if node is None:
            return
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                self._load(node.id, known)
            else:
                self._bind(node.id, known)
        elif isinstance(node, ast.NamedExpr):
            self._expr(node.value, known)
            self._bind(node.target.id, known)
        elif isinstance(node, ast.Lambda):
            for expr in [*node.args.defaults, *node.args.kw_defaults]:
                self._expr(expr, known)
            self._nested(node, known)
        elif isinstance(node, _COMPREHENSIONS):
            self._expr(node.generators[0].iter, known)
            self._nested(node, known)
        elif isinstance(node, ast.BoolOp):  # later operands may not be evaluated
            self._expr(node.values[0], known)
            for value in node.values[1:]:
                self._expr(value, set(known))
        elif isinstance(node, ast.IfExp):
            self._expr(node.test, known)
            self._expr(node.body, set(known))
            self._expr(node.orelse, set(known))
        elif not (isinstance(node, ast.Call) and self._magic(node, known)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                stores, changes = self.writers.get(node.func.id, (frozenset(), frozenset()))
                for name in stores:  # calling it may assign these globals
                    self._bind(name, set())
                for name in changes:  # ... and change these in place
                    self._mutate(name, known)
            for child in ast.iter_child_nodes(node):
                self._expr(child, known)

    def _magic(self, call: ast.Call, known: set[str]) -> bool:
        """Handle `get_ipython().<method>('...')` from IPython's transforms; False if not one."""
        func = call.func
        if not (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name)
            and func.value.func.id == "get_ipython"
        ):
            return False
        args: list[str] = []
        for arg_node in call.args:  # IPython's calls pass only string literals
            if not (isinstance(arg_node, ast.Constant) and isinstance(arg_node.value, str)):
                return False
            args.append(arg_node.value)
        line = call.lineno - 1
        if func.attr == "run_line_magic" and len(args) == 2:
            name, arg = args
            if name in _EXEC_MAGICS or name in _SCOPED_MAGICS:
                self._python(name, _strip_options(arg, name), known, f" in %{name}", line)
            else:
                self._expanded(arg, known)
        elif func.attr == "run_cell_magic" and len(args) == 3:
            name, arg, body = args
            if name == "capture":
                outputs = [w for w in arg.split() if not w.startswith("-")]
                if outputs and outputs[0].isidentifier():
                    self._bind(outputs[0], known)
            if name == "timeit":  # setup code after the options, then the body, in one function
                setup = _strip_options(arg, name)
                self._python(name, f"{setup}\n{body}", known, " in %%timeit", line)
            elif name in _EXEC_MAGICS:
                self._python(name, body, known, f" in the %%{name} body", line + 1)
            else:
                self._expanded(arg, known)
        elif func.attr in ("system", "getoutput") and len(args) == 1:
            self._expanded(args[0], known)
        return True

    def _python(self, magic: str, source: str, known: set[str], what: str, line: int) -> None:
        tree = self._parse(self.transform(source), what, line)
        if magic in _SCOPED_MAGICS:  # runs inside a function: only its free names matter
            scope = _Scope("function")
            for stmt in tree.body:
                scope.visit(stmt)
            for name in scope.later():
                self._load(name, known)
        else:
            self._stmts(tree.body, known)

    def _expanded(self, text: str, known: set[str]) -> None:
        """Names in `$name` / `{expr}` that IPython substitutes into shell and magic lines."""
        self.weak += 1
        try:
            for m in re.finditer(r"\$\$|\$([A-Za-z_]\w*)|\{([^{}]*)\}", text):
                if m.group(1):
                    self._load(m.group(1), known)
                elif m.group(2) and m.group(2).strip():
                    try:
                        expr = ast.parse(m.group(2).strip(), mode="eval")
                    except SyntaxError:
                        continue  # IPython leaves it as it is too
                    self._expr(expr.body, set(known))
        finally:
            self.weak -= 1

    # -- statements ------------------------------------------------------------------------
    def _stmts(self, body: Iterable[ast.stmt], known: set[str]) -> None:
        for stmt in body:
            self._stmt(stmt, known)

    def _branch(self, body: Iterable[ast.stmt], known: set[str]) -> set[str]:
        inner = set(known)
        self._stmts(body, inner)
        return inner

    def _stmt(self, s: ast.stmt, known: set[str]) -> None:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = s.args
            for expr in [*s.decorator_list, *a.defaults, *a.kw_defaults, s.returns]:
                self._expr(expr, known)
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                self._expr(arg.annotation if arg else None, known)
            scope = self._nested(s, known)
            self._bind(s.name, known)
            stores, changes = set(scope.global_stores), scope.changes()
            for callee in scope.free_calls() - {s.name}:  # what the functions it calls do
                callee_stores, callee_changes = self.writers.get(callee, (frozenset(), frozenset()))
                stores |= callee_stores
                changes |= callee_changes
            self.writers[s.name] = (frozenset(stores), frozenset(changes))
        elif isinstance(s, ast.ClassDef):
            for expr in [*s.decorator_list, *s.bases, *(k.value for k in s.keywords)]:
                self._expr(expr, known)
            self._nested(s, known)
            self._bind(s.name, known)
        elif isinstance(s, ast.Assign):
            self._expr(s.value, known)
            for target in s.targets:
                self._target(target, known)
        elif isinstance(s, ast.AnnAssign):
            self._expr(s.annotation, known)
            if s.value is not None:
                self._expr(s.value, known)
                self._target(s.target, known)
        elif isinstance(s, ast.AugAssign):
            self._expr(s.value, known)
            if isinstance(s.target, ast.Name):
                self._mutate(s.target.id, known)
            else:
                self._target(s.target, known)
        elif isinstance(s, ast.Delete):
            for target in s.targets:
                self._delete(target, known)
        elif isinstance(s, ast.Import):
            for alias in s.names:
                self._import(alias.asname or alias.name.split(".")[0], known)
        elif isinstance(s, ast.ImportFrom):
            for alias in s.names:
                if alias.name == "*":
                    self.out.stars.append("." * s.level + (s.module or ""))
                else:
                    self._import(alias.asname or alias.name, known)
        elif isinstance(s, (ast.For, ast.AsyncFor, ast.While)):
            self._loop(s, known)
        elif isinstance(s, ast.If):
            self._expr(s.test, known)
            _replace(known, self._branch(s.body, known) & self._branch(s.orelse, known))
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self._expr(item.context_expr, known)
                if item.optional_vars is not None:
                    self._target(item.optional_vars, known)
            self._stmts(s.body, known)
        elif isinstance(s, ast.Try) or (sys.version_info >= (3, 11) and isinstance(s, ast.TryStar)):
            self._try(s, known)
        elif sys.version_info >= (3, 10) and isinstance(s, ast.Match):
            self._expr(s.subject, known)
            for case in s.cases:
                inner = set(known)
                for node in ast.walk(case.pattern):
                    if isinstance(node, ast.Name):
                        self._load(node.id, inner)
                    elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
                        self._bind(node.name, inner)
                    elif isinstance(node, ast.MatchMapping) and node.rest:
                        self._bind(node.rest, inner)
                self._expr(case.guard, inner)
                self._stmts(case.body, inner)
        elif isinstance(s, ast.Expr):
            self._expr(s.value, known)
            root = _changed_by_call(s.value)
            if root is not None:
                self._mutate(root, known)
        elif not isinstance(s, (ast.Global, ast.Nonlocal)):
            for child in ast.iter_child_nodes(s):
                if isinstance(child, ast.stmt):
                    self._stmt(child, known)
                else:
                    self._expr(child, known)

    def _import(self, name: str, known: set[str]) -> None:
        self.out.imports.add(name)
        self.out.deleted.discard(name)
        self.bound.add(name)
        known.add(name)

    def _delete(self, node: ast.expr, known: set[str]) -> None:
        if isinstance(node, ast.Name):
            self._mutate(node.id, known)
            self.out.deleted.add(node.id)
            known.discard(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                self._delete(elt, known)
        else:
            self._target(node, known)

    def _loop(self, s: ast.For | ast.AsyncFor | ast.While, known: set[str]) -> None:
        inner = set(known)
        if isinstance(s, ast.While):
            self._expr(s.test, known)
        else:
            self._expr(s.iter, known)
            self._target(s.target, inner)
        self._stmts(s.body, inner)
        after = self._branch(s.orelse, known & inner)
        known.intersection_update(inner & after)  # the body may not run at all

    def _try(self, s: ast.Try | ast.TryStar, known: set[str]) -> None:
        after = set(known)
        self._stmts([*s.body, *s.orelse], after)
        for handler in s.handlers:
            inner = set(known)
            self._expr(handler.type, inner)
            if handler.name:  # bound in the handler only: Python deletes it afterwards
                inner.add(handler.name)
            self._stmts(handler.body, inner)
            inner.discard(handler.name or "")
            after &= inner
        _replace(known, after)
        self._stmts(s.finalbody, known)


@dataclass(frozen=True)
class _Entry:
    index: int
    cell_id: str
    cell_type: str
    source: str


def _entries(cells: Sequence[Mapping[str, Any]]) -> list[_Entry]:
    """Check and normalise the frontend's cells; a missing id becomes `#<index>`."""
    out: list[_Entry] = []
    seen: set[str] = set()
    for index, cell in enumerate(cells):
        if not isinstance(cell, Mapping):
            raise SliceError(f"cell {index} is not an object", index=index)
        cell_type, cell_id, source = cell.get("cell_type"), cell.get("id"), cell.get("source", "")
        cell_id = f"#{index}" if cell_id in (None, "") else cell_id
        if not isinstance(cell_id, str):
            raise SliceError(f"cell {index} has an id that is not a string", index=index)
        if not isinstance(cell_type, str):
            raise SliceError(f"cell {index} (id {cell_id}) has no cell_type", cell_id, index)
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise SliceError(f"cell {index} (id {cell_id}) has a bad source", cell_id, index)
        if cell_id in seen:
            raise SliceError(f"cell id {cell_id!r} appears twice in the notebook", cell_id, index)
        seen.add(cell_id)
        out.append(_Entry(index, cell_id, cell_type, source))
    return out


def _reason(names: _CellNames, provides: set[str], starred: set[str]) -> str:
    parts = [f"from {module} import *" for module in names.stars] if starred else []
    if starred:
        parts[-1] += f" (may provide {', '.join(sorted(starred))})"
    defined = sorted(provides & names.binds)
    imported = sorted((provides & names.imports) - names.binds)
    changed = sorted(provides - names.binds - names.imports)
    for verb, group in (("imports", imported), ("defines", defined), ("changes", changed)):
        if group:
            parts.append(f"{verb} {', '.join(group)}")
    return "; ".join(parts)


def slice_cells(
    cells: Sequence[Mapping[str, Any]], selected: Sequence[str], given: Iterable[str] = ()
) -> Slice:
    """The selected cells plus the earlier code cells they need, transitively, in order.

    `given` names are sent into the job by value, so no cell is pulled in just to define them.
    Cells after the last selected one are not looked at (not even parsed).
    """
    if isinstance(selected, str):
        raise SliceError("selected must be a list of cell ids, not a single string")
    wanted = list(dict.fromkeys(selected))
    if not wanted:
        raise SliceError("no cells selected")
    entries = _entries(cells)
    by_id = {e.cell_id: e for e in entries}
    for cell_id in wanted:
        entry = by_id.get(cell_id)
        if entry is None:
            raise SliceError(f"no cell with id {cell_id!r} in the notebook", cell_id=cell_id)
        if entry.cell_type != "code":
            raise SliceError(
                f"cell {entry.index} (id {cell_id}) is a {entry.cell_type} cell, not code",
                cell_id,
                entry.index,
            )
    last = max(by_id[c].index for c in wanted)

    # IPython is there wherever ipykernel is; imported here as it is slow to import and untyped.
    manager = importlib.import_module("IPython.core.inputtransformer2").TransformerManager()

    def transform(source: str) -> str:
        return str(manager.transform_cell(source))

    analysed = []
    writers: dict[str, _Effects] = {}
    for e in entries[: last + 1]:
        if e.cell_type == "code":
            where = f"cell {e.index} (id {e.cell_id})"
            code = transform(e.source)
            analysed.append(
                (e, code, _CellAnalyser(transform, writers, where, e.index, e.cell_id).run(code))
            )

    givens, chosen = frozenset(given), set(wanted)
    late: set[str] = set()
    while True:  # until the functions pulled in need no new names
        picked, defines, unresolved = _walk(analysed, chosen, givens, late)
        more = set().union(*(n.late for e, _, n in analysed if e.index in picked)) - late
        if not more:
            break
        late |= more
    return Slice(
        cells=tuple(picked.values())[::-1],
        defines=tuple(sorted(defines)),
        unresolved=tuple(sorted(unresolved)),
    )


def _walk(
    analysed: list[tuple[_Entry, str, _CellNames]],
    chosen: set[str],
    givens: frozenset[str],
    late: set[str],
) -> tuple[dict[int, SlicedCell], set[str], set[str]]:
    """Walk back from the last selected cell, pulling in cells that define what is needed.

    `late` names are used by functions in the slice; a function runs when it is called, which
    may be as late as the last selected cell, so they count as that cell's uses.
    """
    hard: set[str] = set()
    soft: set[str] = set()
    picked: dict[int, SlicedCell] = {}
    defines: set[str] = set()
    modules: set[str] = set()  # imported and never bound otherwise: `time.sleep()` is no result
    bound: set[str] = set()
    for e, code, names in reversed(analysed):  # the first one is the last selected cell
        provides = names.defs & (hard | soft)
        is_selected = e.cell_id in chosen
        star = bool(names.stars) and not is_selected and bool(hard - _PROVIDED)
        if not (is_selected or provides or star):
            continue
        maybe_starred = hard - _PROVIDED if star else set()
        reason = "selected" if is_selected else _reason(names, provides, maybe_starred)
        picked[e.index] = SlicedCell(
            e.index, e.cell_id, e.source, code, is_selected, tuple(sorted(provides)), reason
        )
        if is_selected:
            defines |= names.results
        modules |= names.imports
        bound |= names.binds
        hard = (hard - names.defs - maybe_starred) | names.hard  # maybe-bound: now soft
        if len(picked) == 1:
            hard |= late
        soft = (soft - names.definite) | names.soft | maybe_starred
        hard -= givens
        soft -= givens | hard
    return picked, defines - (modules - bound), hard - _PROVIDED - givens
