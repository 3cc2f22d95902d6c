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

Library knowledge (:mod:`.libraries`, keyed by full dotted names: the analysis resolves
``import numpy as np`` / ``from numpy import random`` first):

* a statement calling a function of a known module (numpy, pandas, pyplot, seaborn, torch,
  sklearn, ...) does not change the module unless the table says it configures
  (``plt.rcParams``/``rc``/``style.use``, ``sns.set*``, ``pd.set_option``,
  ``warnings.filterwarnings``, ``tf.random.set_seed``); a module the table does not know keeps
  the old answer (``wandb.init()`` changes ``wandb``).  Seeds and draws of the global
  generators below change the generator, not the module.  pyplot/seaborn drawing counts as a change
  again if any cell turns interactive plotting on (``plt.ion()``, ``%matplotlib qt``);
* read-only methods (``predict``, ``score``, ``transform``, ``reshape``, ``mean``, ...) are not
  changes unless ``inplace=`` is passed; ``fit``/``fit_transform``/``partial_fit``/
  ``load_state_dict`` change their object wherever they are called, and on an object built by a
  scikit-learn-style library (sklearn, xgboost, lightgbm, catboost, imblearn) without
  ``warm_start`` a ``fit`` replaces what earlier fits learned: it needs the object's setup (the
  cell that built it, cells that configured it) but not earlier fit cells;
* ``random.shuffle(x)``, ``np.random.shuffle(x)``, torch's in-place ``*_`` functions
  (``clip_grad_norm_(model.parameters())``) change their argument (the object it comes from);
* global random generators (``numpy.random``, ``random``, torch's) as pseudo-names: a draw
  anywhere in a cell, also inside an expression or a comprehension (``x = np.random.rand(3)``),
  reads and advances ``<rng:numpy.random>``; a seed resets it, cutting earlier draws and seeds
  (``np.random.seed(0)`` needs no earlier seed, and ``np.mean(x)`` needs no seed).  Calls that
  draw without saying so count as draws too (``IMPLICIT_DRAWS``): building a torch layer with
  random initial weights (``nn.Linear``, ``nn.Conv2d``, ``nn.LSTM``, ...), ``nn.init``'s random
  fills, ``w.normal_()``, functional dropout, ``random_split``, and scikit-learn's
  ``train_test_split``, ``shuffle``, ``resample`` and ``make_*`` without ``random_state``; a
  call given its own generator (``random_state=0``, ``generator=g``) or ``shuffle=False`` does
  not draw.  Calling a function or building a class whose body draws or seeds (``Net()`` whose
  ``__init__`` builds layers) reads and advances the generator; ``torch.cuda.manual_seed_all``
  changes torch's without cutting earlier draws (it leaves the CPU's as it was).  A
  scikit-learn estimator or splitter built without ``random_state`` (``RandomForestClassifier()``,
  ``KFold(shuffle=True)``; ``DRAWS_WHEN_USED``), or a search or pipeline over one, draws from
  numpy's where it is fitted or split, or handed to ``cross_val_score`` and the like;
* ``df.plot(ax=ax)``, ``sns.histplot(v, ax=ax)``: a figure given as ``ax=``/``fig=`` changes;
* objects that change others: names bound from ``plt.subplots()``/``fig.add_subplot()``/
  ``axes[0]`` hold figures, and drawing on one (``ax.plot``) changes it and its figure; an
  object built over ``model.parameters()`` (an optimizer) or by ``torch.optim.*`` over another
  (a scheduler) changes what it was built over when it is changed (``opt.step()``).

State outside Python, as pseudo-names (never results, never unresolved): an import needs cells
that changed ``sys`` (``<sys>``) or the working directory (``<cwd>``: ``os.chdir``, ``%cd``) and
files that could hold the module (``%%writefile util.py``), except standard and well-known
libraries; a write to a literal path (``to_csv``, ``np.save``, ``open(.., "w")``,
``joblib.dump``, ``torch.save``, ``%%writefile``, ``os.makedirs``, ``!mkdir``, ``shutil.copy``'s
destination) defines
``<file:PATH>`` (normalised), a read of it uses it; the last full write cuts earlier writers,
appends do not.

Loops: a name bound in a loop body (or a branch) only maybe keeps its earlier binding alive only
if something after it reads it -- a later statement of the cell or a later cell in the slice --
since the loop may run zero times; uses inside the body after the assignment need nothing.

Warnings (``Slice.warnings``, naming the cell by its first line) where it cannot decide:
``exec``/``eval``/``compile``, writes through ``globals()``/``locals()``, ``setattr`` on a
module, an included star import, ``%run``/``%store``/``%load``/``%env``/``%load_ext``, and a
file written under a computed path that is not in the job when the job reads a computed path.

Known limits -- the slice can still miss a dependency through:

* draws the tables do not know: estimators that draw only under some option
  (``LogisticRegression(solver="saga")``), an estimator reached through an alias or a
  container (``models["rf"].fit``), a ``DataLoader(shuffle=True)`` when it is iterated, a
  module's forward pass (dropout) when it is called; TensorFlow's generators are not tracked
  (``tf.random.set_seed`` counts as a change of ``tensorflow``); a function or class body is
  read with the imports known when it is defined;
* files whose names are computed or that a shell command makes (``!wget``, ``!unzip``),
  environment variables, databases; ``!pip install`` cells are not included for imports;
* changes through an alias (``y = x; y.append(1)``), through a function's argument (``f(x)``
  that appends to ``x``), or through a method not called by plain name;
* a read-only method that does change an object not known to be a figure (``ax.plot`` on an
  Axes handed in by a function the slicer cannot see into);
* magics inside function bodies, which are only seen as calls to ``get_ipython``;
* a function called between two definitions of a name its body uses: only the later definition is
  taken (the call may happen as late as the last selected cell).

It errs the other way too: slices are whole cells, so a needed cell's dead assignment
(``cv = KFold()`` later rebound) still pulls in what it uses, and a function that assigns a
``global`` defines it in its own cell even if it is never called.
"""

from jupyter_costguard.offload.slicing.assembly import slice_cells
from jupyter_costguard.offload.slicing.result import Slice, SlicedCell, SliceError

__all__ = ["Slice", "SliceError", "SlicedCell", "slice_cells"]
