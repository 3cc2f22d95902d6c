"""Limits on JSON a client may send or the extension may read back: nesting depth, and strings
(keys and values) without NUL characters or lone surrogates.

`json.loads` accepts ``"\\ud800"`` escapes and nests as deep as the interpreter's stack allows;
what it returns here can then fail to save (UTF-8 refuses surrogates) or to serialise again
(RecursionError). `parse_json` never raises anything but `JSONLimitError` (a `ValueError`), and
`check_json` walks a document without recursion.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 32

#: a NUL, or a surrogate code point (valid UTF-8 never holds one, so it is lone here)
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")


class JSONLimitError(ValueError):
    """A document over a limit; the message names the limit."""


def check_string(value: str, where: str = "a string") -> None:
    """`JSONLimitError` when `value` holds a NUL or a lone surrogate."""
    m = _BAD_CHARS.search(value)
    if m is None:
        return
    if m.group() == "\x00":
        raise JSONLimitError(f"{where} must not contain NUL characters")
    raise JSONLimitError(f"{where} must not contain lone surrogates "
                         f"(U+{ord(m.group()):04X}); send valid Unicode text")


def check_json(doc: Any, max_depth: int = MAX_DEPTH, strings: bool = True) -> None:
    """`JSONLimitError` when `doc` nests deeper than `max_depth` levels or (with `strings`)
    one of its strings (keys included) holds a NUL or a lone surrogate. Iterative: any depth
    is safe to check."""
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if strings:
                check_string(value, "strings in the JSON document")
        elif isinstance(value, (dict, list)):
            if depth >= max_depth:
                raise JSONLimitError(
                    f"JSON nests deeper than the limit of {max_depth} levels")
            if isinstance(value, dict):
                for k, v in value.items():
                    if strings and isinstance(k, str):
                        check_string(k, "keys in the JSON document")
                    stack.append((v, depth + 1))
            else:
                stack.extend((v, depth + 1) for v in value)


def parse_json(raw: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """`raw` parsed and checked; `JSONLimitError` for text that is not JSON or is over a
    limit, never RecursionError or UnicodeDecodeError."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise JSONLimitError("the JSON document is not valid UTF-8") from None
    try:
        doc = json.loads(text)
    except RecursionError:  # the decoder's own guard, far past our limit
        raise JSONLimitError(
            f"JSON nests deeper than the limit of {max_depth} levels") from None
    except ValueError as e:
        raise JSONLimitError(f"not valid JSON: {e}") from None
    # a string holds a NUL or a surrogate only through a backslash-u escape or as a raw
    # character in `text` (the decoder refuses raw control characters in strings, and text
    # decoded from UTF-8 holds no surrogates): without either, the strings need no walk
    check_json(doc, max_depth, strings="\\u" in text or _BAD_CHARS.search(text) is not None)
    return doc
