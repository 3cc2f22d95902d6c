"""What analysing the earlier cells tells the analysis of a later one: what each function does
when called, what each imported name stands for, which names hold estimators whose ``fit``
replaces, and whether pyplot runs in interactive mode.  Cells are analysed in notebook order."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: What calling a function does to the cell's names: (globals it assigns, names it changes).
Effects = tuple[frozenset[str], frozenset[str]]

#: `plt.ion()`, `matplotlib.interactive(True)`, or a `%matplotlib` backend other than inline.
_INTERACTIVE = re.compile(
    r"\bion\s*\(|\binteractive\s*\(\s*True|^\s*%matplotlib\s+(?!inline\b)\w", re.MULTILINE
)


@dataclass
class NotebookState:
    """Shared by the analysers of one notebook's cells, in order."""

    writers: dict[str, Effects] = field(default_factory=dict)
    #: name -> (the dotted name it was imported as, whether it surely is a module)
    aliases: dict[str, tuple[str, bool]] = field(default_factory=dict)
    #: names holding an estimator whose `fit` replaces what it learned before
    estimators: set[str] = field(default_factory=set)
    #: names holding a matplotlib figure or axes: drawing on one (`ax.plot`) changes it
    figures: set[str] = field(default_factory=set)
    #: name -> the names whose objects it changes when it is changed: an optimizer built over
    #: `model.parameters()` changes `model` (`opt.step()`), an axes taken from a grid its grid
    links: dict[str, set[str]] = field(default_factory=dict)
    #: name -> the global generator its object draws from when it is used (fitted, split):
    #: an estimator or splitter built without `random_state`, or a search over one
    random_objects: dict[str, str] = field(default_factory=dict)
    #: pseudo-names of the files written so far, at literal paths: an import may load one
    #: from a directory put on `sys.path` (`sys.path.append("lib")` ... `import helper`)
    written: set[str] = field(default_factory=set)
    #: pyplot figures outlive their cell (figure-drawing calls change pyplot again)
    interactive: bool = False

    @classmethod
    def for_sources(cls, sources: list[str], writers: dict[str, Effects] | None = None
                    ) -> NotebookState:
        """A fresh state; interactive if any of the sources turns interactive plotting on."""
        state = cls(writers if writers is not None else {})
        state.interactive = any(_INTERACTIVE.search(s) for s in sources)
        return state


#: Pseudo-names: state outside Python, tracked like names (they are not identifiers, so they
#: never clash with one, and they are never results).
CWD = "<cwd>"
SYS = "<sys>"


def generator_of(module: str) -> str:
    """The pseudo-name of a module's global random generator (``<rng:numpy.random>``)."""
    return f"<rng:{module}>"


def is_generator(name: str) -> bool:
    return name.startswith("<rng:")


def setup_of(name: str) -> str:
    """The pseudo-name for how `name`'s object was built and configured (not what it learned)."""
    return f"<setup:{name}>"


def is_pseudo(name: str) -> bool:
    return name.startswith("<")


def shown(name: str) -> str:
    """A pseudo-name as the user reads it in a reason."""
    if name.startswith("<setup:"):
        return name[len("<setup:"):-1]
    return name
