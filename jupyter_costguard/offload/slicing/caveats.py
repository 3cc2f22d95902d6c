"""Where the slicer cannot decide: code whose effect on names or files it cannot see.  Each
becomes a warning on the slice naming the cell by its first line, instead of a silent guess."""

from __future__ import annotations

import ast

#: Builtins that run code or write names the analysis cannot read.
_DYNAMIC_CALLS = {
    "exec": "runs code from a string (exec)",
    "eval": "evaluates code from a string (eval)",
    "compile": "compiles code from a string",
    "__import__": "imports a module by a computed name",
    "importlib.import_module": "imports a module by a computed name",
    "dill.load_session": "restores a whole session (dill.load_session)",
}
#: Line magics whose effect is not visible in the cell's code.
MAGICS = {
    "run": "runs another file (%run), whose names and effects are not seen",
    "store": "restores stored names (%store)",
    "load": "loads code from elsewhere (%load)",
    "env": "changes environment variables (%env), which are not tracked",
    "load_ext": "loads an extension (%load_ext), which may define magics and names",
    "autoreload": "reloads modules automatically (%autoreload)",
}


def call_caveat(call: ast.Call, dotted: str | None) -> str | None:
    """Why `call` makes the cell's effect undecidable, or None."""
    if dotted in _DYNAMIC_CALLS:
        if dotted in ("__import__", "importlib.import_module") and call.args and isinstance(
            call.args[0], ast.Constant
        ):
            return None
        return _DYNAMIC_CALLS[dotted]
    if dotted == "setattr" and call.args:
        target = call.args[0]
        if (
            isinstance(target, ast.Call)
            and isinstance(target.func, ast.Name)
            and target.func.id in ("globals", "locals", "vars")
        ):
            return "sets names through setattr on a namespace"
    if dotted == "setattr:module":
        return "sets an attribute of a module with setattr"
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr in ("update", "__setitem__", "setdefault", "pop")
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id in ("globals", "locals", "vars")
    ):
        return f"writes names through {func.value.func.id}().{func.attr}"
    return None


def namespace_write(target: ast.expr) -> str | None:
    """Why an assignment target like `globals()["x"]` is undecidable, or None."""
    if (
        isinstance(target, ast.Subscript)
        and isinstance(target.value, ast.Call)
        and isinstance(target.value.func, ast.Name)
        and target.value.func.id in ("globals", "locals", "vars")
    ):
        return f"writes names through {target.value.func.id}()[...]"
    return None


def first_line(source: str) -> str:
    """How a warning names a cell: its first non-blank line, shortened."""
    line = next((ln.strip() for ln in source.splitlines() if ln.strip()), "(empty)")
    return line if len(line) <= 60 else line[:57] + "..."

