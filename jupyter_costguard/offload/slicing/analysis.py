"""What one cell binds, changes and needs, in statement order: the def/use analysis of the
cell's module-level code (nested scopes are `scopes`' job, magics' bodies are read as IPython
runs them)."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from jupyter_costguard.offload.slicing import caveats, libraries
from jupyter_costguard.offload.slicing.calls import CallRules
from jupyter_costguard.offload.slicing.ipython import EXEC_MAGICS, SCOPED_MAGICS, strip_options
from jupyter_costguard.offload.slicing.result import SliceError
from jupyter_costguard.offload.slicing.scopes import (
    COMPREHENSIONS,
    Scope,
    changed_by_call,
    owner_name,
    root_name,
)
from jupyter_costguard.offload.slicing.state import (
    Effects,
    NotebookState,
    generator_of,
    is_generator,
    is_pseudo,
    setup_of,
)

__all__ = ["CellAnalyser", "CellNames", "Effects"]


def _replace(known: set[str], after: set[str]) -> None:
    """Set `known` (shared with the caller) to what is surely bound after a branch."""
    known.clear()
    known.update(after)


@dataclass
class CellNames:
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
    maybe: set[str] = field(default_factory=set)  # bound only conditionally (if, loop, try)
    refits: set[str] = field(default_factory=set)  # changed only by a replacing `fit`
    caveats: list[str] = field(default_factory=list)  # why its effect cannot be decided

    @property
    def defs(self) -> set[str]:
        return self.binds | self.imports | self.mutates

    @property
    def provides_all(self) -> set[str]:
        """`defs`, plus the setup (construction, configuration) of each object it binds or
        changes other than by a replacing `fit`: what a later `fit` of it needs."""
        built = {setup_of(n) for n in (self.binds | self.mutates) - self.refits if not is_pseudo(n)}
        return self.defs | built

    @property
    def results(self) -> set[str]:
        """Values worth bringing back: modules are not, deleted names cannot be."""
        return {n for n in (self.binds | self.mutates) - self.deleted if not is_pseudo(n)}


class CellAnalyser(CallRules):
    """Module-level names of one cell, in statement order, tracking what is surely bound."""

    def __init__(
        self,
        transform: Callable[[str], str],
        writers: dict[str, Effects],
        where: str,
        index: int,
        cell_id: str,
        state: NotebookState | None = None,
    ) -> None:
        self.transform = transform
        self.state = state if state is not None else NotebookState(writers)
        self.writers = self.state.writers  # what calling each function defined so far does
        self.caveats, self.replaced, self.changed = [], set(), set()
        self.where, self.index, self.cell_id = where, index, cell_id
        self.out = CellNames()
        self.bound: set[str] = set()  # bound anywhere so far, even conditionally
        self.later: set[str] = set()  # free names of functions: resolved when the cell ends
        self.weak = 0  # >0 while reading names IPython expands only if they exist

    def run(self, code: str) -> CellNames:
        known: set[str] = set()
        self._stmts(self._parse(code, "", 0).body, known)
        out = self.out
        for name in self.later - known:
            if name in self.bound or self.out.stars:
                out.soft.add(name)
            else:
                out.late.add(name)
        out.definite = known
        # conditional bindings keep earlier values, if something after the cell reads them
        out.maybe = (out.binds - known) - out.hard
        out.soft -= out.hard
        out.refits = self.replaced - self.changed - out.binds
        out.caveats = list(dict.fromkeys(self.caveats))
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
        self.state.aliases.pop(name, None)  # no longer what it was imported as
        self.state.estimators.discard(name)
        self.state.figures.discard(name)
        self.state.links.pop(name, None)
        self.state.random_objects.pop(name, None)

    def _mutate(self, name: str, known: set[str]) -> None:
        self._load(name, known)
        self.out.mutates.add(name)
        self.changed.add(name)
        self._module_changed(name, known)
        for other in self.state.links.get(name, set()) - self.out.mutates - {name}:
            self._mutate(other, known)  # `opt.step()` changes the model it was built over

    def _redefine(self, name: str, known: set[str]) -> None:
        self.out.mutates.add(name)
        self.bound.add(name)
        known.add(name)

    def _target(self, node: ast.expr, known: set[str]) -> None:
        if isinstance(node, ast.Name):
            self._bind(node.id, known)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                self._target(elt, known)
        elif isinstance(node, ast.Starred):
            self._target(node.value, known)
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            why = caveats.namespace_write(node)
            if why is not None:
                self.caveats.append(why)
            if isinstance(node, ast.Attribute) and node.attr == "warm_start":
                self.state.estimators.discard(root_name(node) or "")
            self._expr(node.value, known)
            if isinstance(node, ast.Subscript):
                self._expr(node.slice, known)
            root = root_name(node)
            if root is not None:
                self._mutate(root, known)
        else:
            self._expr(node, known)

    def _nested(self, node: ast.AST, known: set[str]) -> Scope:
        scope = Scope.of(node)
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
        elif isinstance(node, COMPREHENSIONS):
            self._expr(node.generators[0].iter, known)
            self._nested(node, known)
            for call in ast.walk(node):  # it runs now: `[random.random() for _ in range(3)]`
                if isinstance(call, ast.Call):
                    self._draws(call, self._dotted(call.func), known)
        elif isinstance(node, ast.BoolOp):  # later operands may not be evaluated
            self._expr(node.values[0], known)
            for value in node.values[1:]:
                self._expr(value, set(known))
        elif isinstance(node, ast.IfExp):
            self._expr(node.test, known)
            self._expr(node.body, set(known))
            self._expr(node.orelse, set(known))
        elif not (isinstance(node, ast.Call) and self._magic(node, known)):
            if isinstance(node, ast.Call):
                self._call(node, known)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                stores, changes = self.writers.get(node.func.id, (frozenset(), frozenset()))
                for name in stores:  # calling it may assign these globals
                    self._bind(name, set())
                for name in changes:  # ... and change these in place
                    if is_generator(name):  # draws (or seeds) in its body: not surely reset
                        self._soft_change(name, known)
                    else:
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
            if name in EXEC_MAGICS or name in SCOPED_MAGICS:
                self._python(name, strip_options(arg, name), known, f" in %{name}", line)
            else:
                self._expanded(arg, known)
                self._line_magic(name, arg, known)
        elif func.attr == "run_cell_magic" and len(args) == 3:
            name, arg, body = args
            if name == "capture":
                outputs = [w for w in arg.split() if not w.startswith("-")]
                if outputs and outputs[0].isidentifier():
                    self._bind(outputs[0], known)
            if name == "timeit":  # setup code after the options, then the body, in one function
                setup = strip_options(arg, name)
                self._python(name, f"{setup}\n{body}", known, " in %%timeit", line)
            elif name in EXEC_MAGICS:
                self._python(name, body, known, f" in the %%{name} body", line + 1)
            else:
                self._expanded(arg, known)
                self._cell_magic(name, arg, known)
        elif func.attr in ("system", "getoutput") and len(args) == 1:
            self._expanded(args[0], known)
            self._shell(args[0], known)
        return True

    def _python(self, magic: str, source: str, known: set[str], what: str, line: int) -> None:
        tree = self._parse(self.transform(source), what, line)
        if magic in SCOPED_MAGICS:  # runs inside a function: only its free names matter
            scope = Scope("function")
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
            self._function_def(s, known)
        elif isinstance(s, ast.ClassDef):
            for expr in [*s.decorator_list, *s.bases, *(k.value for k in s.keywords)]:
                self._expr(expr, known)
            scope = self._nested(s, known)
            self._bind(s.name, known)
            self._class_draws(s, scope)
        elif isinstance(s, ast.Assign):
            self._expr(s.value, known)
            for target in s.targets:
                self._target(target, known)
            self._assigned(s)
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
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            self._import_stmt(s, known)
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
            self._match(s, known)
        elif isinstance(s, ast.Expr):
            self._expr_stmt(s, known)
        elif not isinstance(s, (ast.Global, ast.Nonlocal)):
            for child in ast.iter_child_nodes(s):
                if isinstance(child, ast.stmt):
                    self._stmt(child, known)
                else:
                    self._expr(child, known)

    def _function_def(self, s: ast.FunctionDef | ast.AsyncFunctionDef, known: set[str]) -> None:
        """What the signature reads now, and what a call will do later (`writers`): the
        globals the body assigns and the names it changes, with those of what it calls."""
        a = s.args
        for expr in [*s.decorator_list, *a.defaults, *a.kw_defaults, s.returns]:
            self._expr(expr, known)
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            self._expr(arg.annotation if arg else None, known)
        scope = self._nested(s, known)
        self._bind(s.name, known)
        stores, changes = set(scope.global_stores), scope.changes() | self._drawn_in(s.body)
        changes |= {
            r for r, chain, change in scope.free_method_calls()
            if self._chain_changes(r, chain, change)
        }
        for callee in scope.free_calls() - {s.name}:  # what the functions it calls do
            callee_stores, callee_changes = self.writers.get(callee, (frozenset(), frozenset()))
            stores |= callee_stores
            changes |= callee_changes
        self.writers[s.name] = (frozenset(stores), frozenset(changes))

    def _drawn_in(self, body: Iterable[ast.stmt]) -> set[str]:
        """The global generators the calls in `body` seed or draw from (as the module's
        names stand now): a call of the function that holds it changes them."""
        return {
            generator_of(rng[0]) for stmt in body for call in ast.walk(stmt)
            if isinstance(call, ast.Call)
            and (rng := self._rng_of(call, self._dotted(call.func))) is not None
        }

    def _class_draws(self, s: ast.ClassDef, scope: Scope) -> None:
        """Building an instance (`Net()`) draws what its methods draw (``__init__`` builds
        torch layers, or calls a method or function that does), and what its bases' do."""
        drawn = self._drawn_in(s.body)
        for callee in scope.free_calls() | {b.id for b in s.bases if isinstance(b, ast.Name)}:
            drawn |= {n for n in self.writers.get(callee, ((), ()))[1] if is_generator(n)}
        self.writers[s.name] = (frozenset(), frozenset(drawn))

    def _import_stmt(self, s: ast.Import | ast.ImportFrom, known: set[str]) -> None:
        """Each imported name bound, with what it stands for; a star import noted."""
        if isinstance(s, ast.Import):
            for alias in s.names:
                self._import_needs(alias.name, 0, known)
                name = alias.asname or alias.name.split(".")[0]
                self._import(name, known, alias.name if alias.asname else name, True)
            return
        self._import_needs(s.module or "", s.level, known)
        for alias in s.names:
            if alias.name == "*":
                self.out.stars.append("." * s.level + (s.module or ""))
                self.caveats.append("star-import")
            else:
                dotted = "." * s.level + f"{s.module or ''}.{alias.name}".lstrip(".")
                sub = alias.name[:1].islower() and libraries.import_is_fixed(dotted)
                self._import(alias.asname or alias.name, known, dotted, sub)

    def _match(self, s: ast.Match, known: set[str]) -> None:
        """Each case a branch of its own: its pattern's captures bound only inside it."""
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

    def _expr_stmt(self, s: ast.Expr, known: set[str]) -> None:
        """A bare call may change what it is called on: a module's by the library table, else
        the object's (`x.append`, an in-place method, drawing on a figure)."""
        self._expr(s.value, known)
        call = s.value.value if isinstance(s.value, ast.Await) else s.value
        module = root_name(call.func.value) if (
            isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
        ) else None
        if module is not None and self._is_module(module):  # the table decides
            if isinstance(call, ast.Call) and self._module_call_changes(call):
                self._mutate(module, known)
        else:
            root = changed_by_call(s.value)
            if root is None and isinstance(call, ast.Call):
                root = self._figure_drawn(call)
            if root is not None:
                self._mutate(root, known)

    def _import(self, name: str, known: set[str], dotted: str, module: bool) -> None:
        self.out.imports.add(name)
        self.out.deleted.discard(name)
        self.bound.add(name)
        known.add(name)
        self.state.aliases[name] = (dotted, module)
        self.state.estimators.discard(name)

    def _owners(self, value: ast.Call, dotted: str | None) -> set[str]:
        """Names whose objects a call's result shares: `model` for
        `torch.optim.SGD(model.parameters())`, `opt` for `StepLR(opt)`."""
        owners = {
            owner_name(n.func.value) for n in ast.walk(value)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in libraries.SHARING_METHODS
        }
        if dotted is not None and libraries.shares_arguments(dotted):
            owners |= {owner_name(a) for a in [*value.args, *(k.value for k in value.keywords)]}
        return {o for o in owners if o is not None and not self._is_module(o)}

    def _link(self, targets: Iterable[ast.expr], owners: set[str]) -> None:
        for target in targets:
            for n in ast.walk(target):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and owners - {n.id}:
                    self.state.links.setdefault(n.id, set()).update(owners - {n.id})

    def _figure_drawn(self, call: ast.Call) -> str | None:
        """`ax.plot(x)` changes `ax` when `ax` holds a figure or axes (`df.plot()` does not
        change `df`)."""
        if isinstance(call.func, ast.Attribute):
            root = root_name(call.func.value)
            if root is not None and root in self.state.figures:
                return root
        return None

    def _assigned(self, s: ast.Assign) -> None:
        """What an assignment's value says of its targets: figures and axes (`fig, ax =
        plt.subplots()`), objects that change others (an optimizer over `model.parameters()`),
        estimators whose later `fit` replaces what they learned (`clf = LogisticRegression()`)."""
        value = s.value
        dotted = self._dotted(value.func) if isinstance(value, ast.Call) else None
        part = isinstance(value, (ast.Attribute, ast.Subscript)) and (
            root_name(value) in self.state.figures  # `ax = axes[0]`, `ax = grid.ax`
        )
        if part or (isinstance(value, ast.Call) and libraries.makes_figure(dotted, value.func)):
            names = {
                n.id for target in s.targets for n in ast.walk(target)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
            self.state.figures |= names
            whole = owner_name(value)  # `ax = fig.add_subplot()`, `ax = axes[0]`
            # drawing on `ax` changes `fig` too, and the other way round
            self._link(s.targets, names | ({whole} if whole and not self._is_module(whole)
                                           else set()))
        if not isinstance(value, ast.Call):
            return
        self._link(s.targets, self._owners(value, dotted))
        if len(s.targets) != 1 or not isinstance(s.targets[0], ast.Name):
            return
        rng = self._random_object(value)  # `clf = RandomForestClassifier()` draws when fitted
        if rng is not None:
            self.state.random_objects[s.targets[0].id] = rng
        warm = any(
            k.arg == "warm_start" and not (isinstance(k.value, ast.Constant) and not k.value.value)
            for k in value.keywords
        )
        if dotted is not None and libraries.replacing_library(dotted) and not warm:
            self.state.estimators.add(s.targets[0].id)

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
            grids = {
                n.id for n in ast.walk(s.iter)
                if isinstance(n, ast.Name) and n.id in self.state.figures
            }
            if grids:  # `for ax in axes.flat:` draws on `axes`
                self._link([s.target], grids)
                self.state.figures |= {
                    n.id for n in ast.walk(s.target) if isinstance(n, ast.Name)
                }
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
