"""What a call does beyond reading its arguments, from the library table: configuring a module,
changing an argument in place, learning (``fit``), touching files, changing the working
directory, or running code the analysis cannot see.  A mixin of the cell analyser."""

from __future__ import annotations

import ast
import posixpath

from jupyter_costguard.offload.slicing import caveats, files, libraries
from jupyter_costguard.offload.slicing.scopes import owner_name, root_name
from jupyter_costguard.offload.slicing.state import (
    CWD,
    SYS,
    NotebookState,
    generator_of,
    setup_of,
)


class CallRules:
    """Library knowledge applied to calls; the analyser provides the name bookkeeping."""

    state: NotebookState
    caveats: list[str]
    replaced: set[str]  # names changed by a replacing call (`fit`) in this cell
    changed: set[str]  # names changed otherwise

    def _need(self, name: str, soft: bool = False) -> None:
        raise NotImplementedError

    def _load(self, name: str, known: set[str]) -> None:
        raise NotImplementedError

    def _bind(self, name: str, known: set[str]) -> None:
        raise NotImplementedError

    def _mutate(self, name: str, known: set[str]) -> None:
        raise NotImplementedError

    def _redefine(self, name: str, known: set[str]) -> None:
        """Define `name` without reading `name` itself (a replacing `fit`)."""
        raise NotImplementedError

    # -- resolving -------------------------------------------------------------------------
    def _dotted(self, func: ast.expr) -> str | None:
        """`np.random.seed` -> "numpy.random.seed"; a plain name stays as it is; None for a
        method of an object (not an imported name)."""
        attrs: list[str] = []
        node = func
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        if node.id in self.state.aliases:
            base = self.state.aliases[node.id][0]
        elif attrs:
            return None
        else:
            base = node.id
        return ".".join([base, *reversed(attrs)])

    def _is_module(self, name: str) -> bool:
        return name in self.state.aliases and self.state.aliases[name][1]

    def _soft(self, name: str, known: set[str]) -> None:
        if name not in known:
            self._need(name, soft=True)

    def _soft_change(self, name: str, known: set[str]) -> None:
        """Change state that may have had an earlier value (append to a file, `%cd sub`)."""
        self._soft(name, known)
        self._redefine(name, known)
        known.discard(name)  # not surely replaced: earlier values still count

    # -- calls -----------------------------------------------------------------------------
    def _call(self, call: ast.Call, known: set[str]) -> None:
        """Effects of any call, wherever it appears (statement or expression)."""
        dotted = self._dotted(call.func)
        why = caveats.call_caveat(call, dotted)
        if why is None and dotted == "setattr" and call.args and isinstance(call.args[0], ast.Name):
            if self._is_module(call.args[0].id):
                why = "sets an attribute of a module with setattr"
        if why is not None:
            self.caveats.append(why)
        self._draws(call, dotted, known)
        for kw in call.keywords:  # `df.plot(ax=ax)`, `sns.histplot(v, ax=ax)` draw on `ax`
            target = root_name(kw.value) if kw.arg in ("ax", "axes", "fig", "figure") else None
            if target is not None and target in self.state.figures:
                self._mutate(target, known)
        for access in files.file_access(call, dotted):  # reads first: a copy's source
            self._file(access, known)
        if dotted == "os.chdir" and call.args:
            path = files.literal(call.args[0])
            if path is not None and posixpath.isabs(path):
                self._redefine(CWD, known)
                known.add(CWD)
            else:
                self._soft_change(CWD, known)
        if dotted is not None and call.args and libraries.changes_first_argument(dotted):
            root = owner_name(call.args[0])  # `clip_grad_norm_(model.parameters(), 1.0)`
            if root is not None:
                self._mutate(root, known)
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in libraries.LEARNING_METHODS:
            root = root_name(func.value)
            if root is not None and not self._is_module(root):
                if func.attr in libraries.REPLACING_METHODS and root in self.state.estimators:
                    if root not in known:
                        self._need(setup_of(root))
                    self._redefine(root, known)
                    self.replaced.add(root)
                else:
                    self._mutate(root, known)
        if isinstance(func, ast.Attribute) and func.attr == "set_params":
            if any(k.arg == "warm_start" for k in call.keywords):
                self.state.estimators.discard(root_name(func.value) or "")

    def _draws(self, call: ast.Call, dotted: str | None, known: set[str]) -> None:
        """Seeding resets a global random generator; a draw reads and advances it (`dotted`:
        the call's resolved module function, None for a method)."""
        rng = self._rng_of(call, dotted)
        if rng is not None:
            module, reseeds = rng
            if reseeds:
                self._redefine(generator_of(module), known)
                known.add(generator_of(module))
            else:
                self._soft_change(generator_of(module), known)

    def _rng_of(self, call: ast.Call, dotted: str | None) -> tuple[str, bool] | None:
        """(the generator's module, whether the call resets it) when `call` seeds or draws
        from a global generator: itself, or by using an object that draws when used."""
        found = libraries.global_generator(dotted, call)
        if found is not None:
            return found
        func, used = call.func, None
        if isinstance(func, ast.Attribute) and func.attr in libraries.USING_METHODS:
            used = self._random_object(func.value)  # `clf.fit(X, y)`, `ShuffleSplit().split(X)`
        if used is None and dotted is not None and libraries.uses_arguments(dotted):
            used = next(filter(None, map(self._random_object, self._arguments(call))), None)
        return (used, False) if used is not None else None

    def _random_object(self, node: ast.expr) -> str | None:
        """The generator the object `node` stands for draws from when it is used, if any: a
        name bound to one, or a call building one (or a search or pipeline over one)."""
        if isinstance(node, ast.Name):
            return self.state.random_objects.get(node.id)
        if not isinstance(node, ast.Call):
            return None
        dotted = self._dotted(node.func)
        found = libraries.draws_when_used(dotted, node)
        if found is None and dotted is not None and libraries.builds_over_arguments(dotted):
            parts = (
                n for a in self._arguments(node) for n in ast.walk(a) if isinstance(n, ast.expr)
            )
            found = next(filter(None, map(self._random_object, parts)), None)
        return found

    @staticmethod
    def _arguments(call: ast.Call) -> list[ast.expr]:
        return [*call.args, *(k.value for k in call.keywords)]

    def _file(self, access: tuple[str, ast.expr | None, bool], known: set[str]) -> None:
        kind, node, appends = access
        path = files.literal(node)
        if path is None or not posixpath.isabs(path):
            self._soft(CWD, known)
        if path is None:
            if kind == "write":
                self.caveats.append("computed-write")
            else:
                self.caveats.append("computed-read")
            return
        for parent in files.parents(path):
            self._soft(parent, known)
        name = files.file_name(path)
        if kind == "write":
            self.state.written.add(name)
        if kind == "read":
            self._soft(name, known)
        elif appends:
            self._soft_change(name, known)
        else:
            self._redefine(name, known)

    def _module_call_changes(self, call: ast.Call) -> bool:
        """Whether a statement calling a module's function changes the module (see
        `libraries`)."""
        dotted = self._dotted(call.func) or ""
        return libraries.call_changes_module(dotted, self.state.interactive)

    def _chain_changes(self, root: str, chain: str, change: bool) -> bool:
        """Whether a function body's statement `root.<chain>(...)` changes `root`; `change`
        is the answer for an object that is not a module."""
        if root in self.state.figures:  # drawing on a figure or axes kept in a global
            return True
        if not self._is_module(root):
            return change
        dotted = f"{self.state.aliases[root][0]}.{chain}"
        return libraries.call_changes_module(dotted, self.state.interactive)

    def _module_changed(self, name: str, known: set[str]) -> None:
        """A change of module `sys` (`sys.path.append`) changes what imports find."""
        if name in self.state.aliases and self.state.aliases[name][0] in ("sys", "site"):
            self._soft_change(SYS, known)

    # -- imports and magics ----------------------------------------------------------------
    def _import_needs(self, module: str, level: int, known: set[str]) -> None:
        """What importing `module` reads: `sys.path`, the working directory, files written."""
        if level == 0 and libraries.import_is_fixed(module):
            return
        self._soft(SYS, known)
        self._soft(CWD, known)
        if level == 0:
            here = files.module_files(module)
            for name in here:
                self._soft(name, known)
            # `<file:lib/helper.py>` ends in "/helper.py>": written into a folder on sys.path
            suffixes = tuple("/" + name[len("<file:"):] for name in here)
            for name in self.state.written:
                if name.endswith(suffixes):
                    self._soft(name, known)

    def _line_magic(self, name: str, arg: str, known: set[str]) -> None:
        if name == "cd":
            path = arg.strip().strip("'\"")
            if path.startswith(("/", "~")):
                self._redefine(CWD, known)
                known.add(CWD)
            else:
                self._soft_change(CWD, known)
        elif name in caveats.MAGICS:
            self.caveats.append(caveats.MAGICS[name])

    def _cell_magic(self, name: str, arg: str, known: set[str]) -> None:
        if name == "writefile":
            words = arg.split()
            paths = [w for w in words if not w.startswith("-")]
            if paths:
                path = paths[-1].strip("'\"")
                target = files.file_name(path)
                self.state.written.add(target)
                self._soft(CWD, known)
                for parent in files.parents(path):  # the directory must exist
                    self._soft(parent, known)
                if "-a" in words or "--append" in words:
                    self._soft_change(target, known)
                else:
                    self._redefine(target, known)

    def _shell(self, command: str, known: set[str]) -> None:
        """`!mkdir -p out` makes a directory later writers need."""
        words = command.split()
        if words and words[0] == "mkdir":
            self._soft(CWD, known)
            for word in words[1:]:
                if not word.startswith("-"):
                    self._redefine(files.file_name(word.strip("'\"")), known)
