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

from jupyter_costguard.offload.slicing.assembly import slice_cells
from jupyter_costguard.offload.slicing.result import Slice, SlicedCell, SliceError

__all__ = ["Slice", "SliceError", "SlicedCell", "slice_cells"]
