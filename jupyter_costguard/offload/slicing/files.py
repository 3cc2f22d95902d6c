"""Files as names: a cell that writes a file whose path is a string literal defines
``<file:PATH>`` (normalised), a cell that reads one uses it, and an import uses the files that
could hold the module, so ``%%writefile util.py`` comes along with ``import util``."""

from __future__ import annotations

import ast
import posixpath

from jupyter_costguard.offload.slicing import libraries


def file_name(path: str) -> str:
    """The pseudo-name of the file at `path` (relative to the working directory)."""
    return f"<file:{posixpath.normpath(path.replace(chr(92), '/'))}>"


def parents(path: str) -> list[str]:
    """Pseudo-names of the directories `path` lies in (``os.makedirs("out")`` defines one)."""
    parts = posixpath.normpath(path).split("/")[:-1]
    return [
        file_name("/".join(parts[: i + 1]))
        for i in range(len(parts))
        if parts[i] not in ("", ".", "..")
    ]


def module_files(module: str) -> list[str]:
    """The files an `import` of dotted `module` may load from the working directory."""
    parts = module.split(".")
    out = []
    for i in range(1, len(parts) + 1):
        base = "/".join(parts[:i])
        out += [file_name(base + ".py"), file_name(base + "/__init__.py")]
    return out


def literal(node: ast.expr | None) -> str | None:
    """The string a path argument surely is, or None when it is computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _argument(call: ast.Call, index: int, keywords: tuple[str, ...]) -> ast.expr | None:
    head = call.args[: index + 1]
    if len(call.args) > index and not any(isinstance(a, ast.Starred) for a in head):
        return call.args[index]
    for kw in call.keywords:
        if kw.arg in keywords:
            return kw.value
    return None


_PATH_KEYWORDS = ("path", "path_or_buf", "filepath_or_buffer", "fname", "file", "f", "filename",
                  "io", "name", "filepath", "dst", "src", "save_directory",
                  "pretrained_model_name_or_path")


def file_access(call: ast.Call, dotted: str | None) -> list[tuple[str, ast.expr | None, bool]]:
    """Each ("read" | "write", the path argument, whether it appends) of the files `call`
    touches: a copy reads its source and writes its destination.

    `dotted` is the call's resolved module function (None for a method call or unknown)."""
    func = call.func
    if dotted == "open" or dotted == "io.open":
        mode = literal(_argument(call, 1, ("mode",))) or "r"
        kind = "write" if any(c in mode for c in "wax+") else "read"
        return [(kind, _argument(call, 0, ("file",)), "a" in mode or "+" in mode)]
    out: list[tuple[str, ast.expr | None, bool]] = []
    if dotted is not None:
        reader = libraries.reader_argument(dotted)
        if reader is not None:
            out.append(("read", _argument(call, reader, _PATH_KEYWORDS), False))
        if dotted in libraries.WRITER_FUNCTIONS:
            index = libraries.WRITER_FUNCTIONS[dotted]
            out.append(("write", _argument(call, index, _PATH_KEYWORDS), False))
        return out
    if isinstance(func, ast.Attribute):
        if func.attr in libraries.WRITER_METHODS:
            mode = literal(_argument(call, 99, ("mode",))) or "w"
            arg = _argument(call, libraries.WRITER_METHODS[func.attr], _PATH_KEYWORDS)
            out.append(("write", arg, "a" in mode))
        if func.attr in libraries.READER_METHODS:
            index = libraries.READER_METHODS[func.attr]
            out.append(("read", _argument(call, index, _PATH_KEYWORDS), False))
    return out
