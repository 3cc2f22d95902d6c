"""The slicer: which earlier cells a selection needs, and why, on small hand-made notebooks."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import pytest

from jupyter_costguard.offload.slicing import Slice, SlicedCell, SliceError, slice_cells

MD = "md:"  # a source starting with this makes a markdown cell


def nb(*sources: str) -> list[dict[str, Any]]:
    """Cells with ids c0, c1, ...; sources starting with `md:` are markdown."""
    cells = []
    for i, src in enumerate(sources):
        kind = "markdown" if src.startswith(MD) else "code"
        cells.append({"id": f"c{i}", "cell_type": kind, "source": src.removeprefix(MD)})
    return cells


def sl(sources: list[str] | tuple[str, ...], *selected: int, given: tuple[str, ...] = ()) -> Slice:
    return slice_cells(nb(*sources), [f"c{i}" for i in selected], given)


def idx(s: Slice) -> list[int]:
    return [c.index for c in s.cells]


def cell(s: Slice, index: int) -> SlicedCell:
    return next(c for c in s.cells if c.index == index)


# -- chains -----------------------------------------------------------------------------------


def test_linear_chain() -> None:
    s = sl(["a = 1", "b = a + 1", "c = b * 2"], 2)
    assert idx(s) == [0, 1, 2]
    assert cell(s, 0).provides == ("a",) and cell(s, 0).reason == "defines a"
    assert cell(s, 1).provides == ("b",)
    assert cell(s, 2).selected and cell(s, 2).reason == "selected" and cell(s, 2).provides == ()
    assert not cell(s, 0).selected
    assert s.defines == ("c",) and s.unresolved == ()


def test_two_independent_cells_and_an_unrelated_one_between() -> None:
    s = sl(["a = 1", "unrelated = 5", "b = 2", "total = a + b"], 3)
    assert idx(s) == [0, 2, 3]


def test_transitive_dependencies() -> None:
    s = sl(["c = 1", "b = c + 1", "noise = 0", "a = b * 2", "print(a)"], 4)
    assert idx(s) == [0, 1, 3, 4]
    assert [cell(s, i).provides for i in (0, 1, 3)] == [("c",), ("b",), ("a",)]


def test_cells_after_the_selection_are_ignored() -> None:
    s = sl(["a = 1", "print(a)", "a = 2", "b = a"], 1)
    assert idx(s) == [0, 1]


def test_rebinding_cuts_the_chain() -> None:
    s = sl(["x = 1", "x = 2", "print(x)"], 2)
    assert idx(s) == [1, 2]


def test_rebinding_that_reads_the_old_value_keeps_the_chain() -> None:
    s = sl(["x = 1", "x = x + 1", "print(x)"], 2)
    assert idx(s) == [0, 1, 2]


def test_name_bound_and_read_in_the_same_cell_is_not_needed_from_earlier() -> None:
    s = sl(["x = 1", "x = 2\nprint(x)"], 1)
    assert idx(s) == [1]


def test_name_read_before_it_is_bound_in_the_same_cell_is_needed() -> None:
    s = sl(["x = 1", "print(x)\nx = 2"], 1)
    assert idx(s) == [0, 1]


# -- changes (use + def) ----------------------------------------------------------------------


def test_method_call_changes_keep_the_chain() -> None:
    s = sl(["x = []", "x.append(1)", "y = 0", "print(x)"], 3)
    assert idx(s) == [0, 1, 3]
    assert cell(s, 1).reason == "changes x" and cell(s, 1).provides == ("x",)
    assert cell(s, 0).reason == "defines x"


@pytest.mark.parametrize(
    "change",
    [
        "n += 1",
        "n.attr = 1",
        "n.a.b = 1",
        "n[0] = 1",
        "n[1:] = [2]",
        "del n[0]",
        "n.drop(columns=['a'], inplace=True)",
        "n.fit(3)",
        "n.loc[0].update(1)",
        "await n.refresh()",
    ],
)
def test_every_kind_of_change_keeps_the_chain(change: str) -> None:
    s = sl(["n = make()", change, "other = 2", "print(n)"], 3)
    assert idx(s) == [0, 1, 3]
    assert cell(s, 1).reason == "changes n"
    assert s.unresolved == ("make",)


def test_read_only_method_calls_are_not_changes() -> None:
    s = sl(["df = load()", "df.head()", "df.describe()", "print(df)"], 3)
    assert idx(s) == [0, 3]


def test_change_to_a_name_defined_in_the_same_cell_is_a_definition() -> None:
    s = sl(["x = 0", "x = []\nx.append(1)", "print(x)"], 2)
    assert idx(s) == [1, 2]
    assert cell(s, 1).reason == "defines x"


def test_del_uses_and_redefines_the_name() -> None:
    s = sl(["x = 1", "del x", "print(x)"], 2)
    assert idx(s) == [0, 1, 2]
    assert cell(s, 1).reason == "changes x"


def test_deleted_names_are_not_results() -> None:
    s = sl(["tmp = 1", "out = tmp * 2\ndel tmp"], 1)
    assert idx(s) == [0, 1]
    assert s.defines == ("out",)


# -- imports ----------------------------------------------------------------------------------


def test_imports() -> None:
    s = sl(
        [
            "import os",
            "import numpy as np",
            "import os.path",
            "from pkg import thing as alias",
            "import json",
            "r = (np.ones(1), os.path.join('a'), alias)",
        ],
        5,
    )
    assert idx(s) == [1, 2, 3, 5]  # `import os.path` rebinds os, so `import os` is not needed
    assert cell(s, 1).reason == "imports np"
    assert cell(s, 2).reason == "imports os"
    assert cell(s, 3).reason == "imports alias"
    assert s.unresolved == ()


def test_imported_modules_are_not_results() -> None:
    s = sl(["import math\nr = math.pi"], 0)
    assert s.defines == ("r",)


def test_reason_combines_kinds() -> None:
    s = sl(["m = Model()", "import numpy as np\ndf = 1\nm.fit(df)", "print(np, df, m)"], 2)
    assert cell(s, 1).reason == "imports np; defines df; changes m"
    assert cell(s, 1).provides == ("df", "m", "np")


def test_try_import_fallback_binds_surely() -> None:
    src = "try:\n    import ujson as json\nexcept ImportError:\n    import json"
    s = sl(["json = None", src, "json.dumps(1)"], 2)
    assert idx(s) == [1, 2]


def test_star_import_is_included_while_names_are_unresolved() -> None:
    s = sl(["from math import *", "y = 2", "print(sqrt(y))"], 2)
    assert idx(s) == [0, 1, 2]
    assert cell(s, 0).reason == "from math import * (may provide sqrt)"
    assert s.unresolved == ()
    s = sl(["from math import *", "y = 2", "print(y)"], 2)
    assert idx(s) == [1, 2]


# -- functions, classes, scopes ---------------------------------------------------------------


def test_function_body_globals_are_needed_by_the_defining_cell() -> None:
    s = sl(["scale = 2", "x = 10", "def f(x):\n    y = x * scale\n    return y", "f(3)"], 3)
    assert idx(s) == [0, 2, 3]  # x and y are local to f
    assert cell(s, 2).reason == "defines f"


def test_function_may_use_a_global_defined_later_in_its_cell() -> None:
    s = sl(
        [
            "def helper(): return 0",
            "def f():\n    return helper()\n\ndef helper():\n    return 1",
            "f()",
        ],
        2,
    )
    assert idx(s) == [1, 2]


def test_function_globals_may_be_defined_after_the_function() -> None:
    # the body runs when f is called, so `scale` from cell 2 is the one it sees
    s = sl(["scale = 1", "def f(v):\n    return v * scale", "scale = 2", "noise = 0", "f(3)"], 4)
    assert idx(s) == [1, 2, 4]
    s = sl(["def f(v):\n    return v * scale", "f(3)", "scale = 2"], 1)
    assert idx(s) == [0, 1]
    assert s.unresolved == ("scale",)


def test_function_called_before_the_selection_rebinds_a_global_it_uses() -> None:
    s = sl(["def f():\n    return X", "X = 1", "noise = 0", "r = f()\nX = 2"], 3)
    assert idx(s) == [0, 1, 3]


def test_calling_a_function_that_changes_a_global_changes_it() -> None:
    cells = [
        "history = []",
        "def log(v):\n    history.append(v)",
        "def train():\n    for step in range(2):\n        log(step)",
        "unrelated = 1",
        "train()",
        "print(history)",
    ]
    s = sl(cells, 5)
    assert idx(s) == [0, 1, 2, 4, 5]
    assert cell(s, 4).reason == "changes history"


def test_nested_functions_and_closures() -> None:
    src = (
        "def outer(a):\n"
        "    def inner():\n"
        "        nonlocal a\n"
        "        return a + k\n"
        "    return inner"
    )
    s = sl(["a = 5", "k = 1", src, "outer(1)()"], 3)
    assert idx(s) == [1, 2, 3]


def test_classes() -> None:
    model = (
        "class Model(Base):\n"
        "    k = default_k\n"
        "    def fit(self):\n"
        "        return helper(self.k) + k\n"  # a method does not see the class's own `k`
    )
    s = sl(
        [
            "class Base: pass",
            "default_k = 3",
            "def helper(v): return v",
            "k = 0",
            model,
            "Model().fit()",
        ],
        5,
    )
    assert idx(s) == [0, 1, 2, 3, 4, 5]
    s = sl(["class Base: pass", "default_k = 3", "def helper(v): return v", model, "Model"], 4)
    assert s.unresolved == ("k",)


def test_decorators_default_args_and_annotations() -> None:
    src = "@deco(level)\ndef g(a: Kind = default, *, b=other) -> Out:\n    return a"
    s = sl(
        [
            "deco = d",
            "level = 1",
            "default = 3",
            "other = 4",
            "Kind = int",
            "Out = int",
            "unused = 1",
            src,
        ],
        7,
    )
    assert idx(s) == [0, 1, 2, 3, 4, 5, 7]
    assert s.unresolved == ("d",)


def test_lambdas() -> None:
    s = sl(["k = 2", "v = 100", "f = lambda v, w=base: v * k + w", "base = 1", "print(f(1))"], 4)
    assert idx(s) == [0, 2, 4]
    assert s.unresolved == ("base",)  # the default is evaluated when the lambda is made


def test_comprehension_variables_are_local() -> None:
    s = sl(["i = 99", "n = 3", "sq = [i * i for i in range(n)]"], 2)
    assert idx(s) == [1, 2]


def test_comprehension_first_iterable_is_outside() -> None:
    s = sl(["x = [1, 2]", "y = [x for x in x]", "z = {k: v for k, v in pairs if k > lim}"], 1, 2)
    assert idx(s) == [0, 1, 2]
    assert s.unresolved == ("lim", "pairs")


def test_walrus() -> None:
    s = sl(["m = 0", "if (m := 5) > 3:\n    pass", "print(m)"], 2)
    assert idx(s) == [1, 2]
    # inside a comprehension it binds in the cell, but only maybe (the loop may not run)
    s = sl(["last = None", "data = [1, 2]", "_ = [(last := v) for v in data]", "print(last)"], 3)
    assert idx(s) == [0, 1, 2, 3]
    assert cell(s, 2).reason == "defines last"


def test_global_assigned_in_a_function() -> None:
    setup = "def setup():\n    global cfg\n    cfg = {'a': 1}"
    s = sl([setup, "unrelated = 1", "setup()", "print(cfg)"], 3)
    assert idx(s) == [0, 2, 3]
    assert cell(s, 2).reason == "defines cfg"
    assert s.unresolved == ()


def test_conditional_binding_keeps_the_earlier_value() -> None:
    s = sl(["flag = True", "x = 1", "if flag:\n    x = 2", "print(x)"], 3)
    assert idx(s) == [0, 1, 2, 3]
    s = sl(["flag = True", "x = 1", "if flag:\n    x = 2\nelse:\n    x = 3", "print(x)"], 3)
    assert idx(s) == [0, 2, 3]


def test_loop_binding_is_not_reported_unresolved() -> None:
    s = sl(["items = [1]", "for i in items:\n    total = i", "print(total, i)"], 2)
    assert idx(s) == [0, 1, 2]
    assert s.unresolved == ()


def test_except_name_is_not_a_definition() -> None:
    s = sl(["e = 1", "try:\n    pass\nexcept Exception as e:\n    print(e)", "print(e)"], 2)
    assert idx(s) == [0, 2]


def test_with() -> None:
    s = sl(["ctx = open", "with ctx('f') as fh:\n    text = fh.read()", "print(text)"], 2)
    assert idx(s) == [0, 1, 2]


@pytest.mark.skipif(sys.version_info < (3, 10), reason="match needs Python 3.10")
def test_match() -> None:
    src = (
        "match cmd:\n    case [Point(x=px), *rest]:\n        got = px\n    case _:\n        got = 0"
    )
    s = sl(["cmd = []", "class Point: pass", src, "print(got)"], 3)
    assert idx(s) == [0, 1, 2, 3]


# -- magics -----------------------------------------------------------------------------------


def test_line_magics_and_shell() -> None:
    s = sl(["%matplotlib inline", "!pip list", "x = !ls", "y = 1", "print(x)"], 4)
    assert idx(s) == [2, 4]
    assert cell(s, 2).code == "x = get_ipython().getoutput('ls')\n"
    assert cell(s, 2).source == "x = !ls"


def test_time_line_magic_defines_and_uses() -> None:
    s = sl(["def f(): return 1", "other = 0", "%time y = f()", "print(y)"], 3)
    assert idx(s) == [0, 2, 3]
    assert cell(s, 2).reason == "defines y"


def test_timeit_uses_but_does_not_define() -> None:
    s = sl(["a = 1", "def g(v): return v", "z = 5", "%timeit -n 10 -r3 z = g(a)"], 3)
    assert idx(s) == [0, 1, 3]
    assert s.defines == ()


def test_prun_and_timeit_cell_magic() -> None:
    s = sl(["def train(): pass", "n = 1", "%prun -s cumulative -q train()"], 2)
    assert idx(s) == [0, 2]
    src = "%%timeit -n 3 data = make(n)\nuse(data)"
    s = sl(["data = 0", "n = 1", "def use(v): pass", src], 3)
    assert idx(s) == [1, 2, 3]  # data comes from the setup line, not from cell 0
    assert s.unresolved == ("make",)


def test_time_cell_magic_body_is_analysed() -> None:
    s = sl(["a = 1", "b = 2", "%%time\nr = a * 2", "print(r)"], 3)
    assert idx(s) == [0, 2, 3]


def test_capture_cell_magic_defines_its_output() -> None:
    s = sl(["q = 1", "%%capture --no-stderr out\nprint(q)\nw = q", "print(out, w)"], 2)
    assert idx(s) == [0, 1, 2]
    assert cell(s, 1).provides == ("out", "w")


def test_other_cell_magics_are_opaque() -> None:
    s = sl(["x = 1", "%%bash\necho $x\npython -c 'print(x)'", "%%writefile f.py\nprint(x)"], 1, 2)
    assert idx(s) == [1, 2]
    assert s.unresolved == ()


def test_shell_expansion_is_a_weak_use() -> None:
    s = sl(["path = 'data'", "n = 3", "!ls {path} | head -$n $HOME"], 2)
    assert idx(s) == [0, 1, 2]
    assert s.unresolved == ()  # $HOME is an environment variable, not a missing name


def test_syntax_error_in_a_time_body_names_the_cell() -> None:
    with pytest.raises(SliceError, match=r"cell 0 \(id c0\).*%%time body at line 3"):
        sl(["%%time\nx = 1\nx = (", "print(1)"], 1)


# -- inputs -----------------------------------------------------------------------------------


def test_given_names_need_no_cell() -> None:
    s = sl(["data = load()", "k = 2", "result = data.sum() * k"], 2, given=("data",))
    assert idx(s) == [1, 2]
    assert s.unresolved == ()


def test_unresolved_names_include_those_only_defined_later() -> None:
    s = sl(["a = 1", "print(a, later, missing, len, get_ipython, _)", "later = 2"], 1)
    assert idx(s) == [0, 1]
    assert s.unresolved == ("later", "missing")


def test_several_selected_cells() -> None:
    s = sl(["base = 1", "a = 0", "a = base + 1", "noise = 2", "b = a * 2"], 2, 4)
    assert idx(s) == [0, 2, 4]
    assert cell(s, 2).selected and cell(s, 2).provides == ("a",)
    assert s.defines == ("a", "b")


def test_selected_cell_that_changes_a_name_needs_its_definition() -> None:
    s = sl(["a = []", "a.append(1)", "print(a)"], 1, 2)
    assert idx(s) == [0, 1, 2]
    assert cell(s, 1).reason == "selected" and cell(s, 1).provides == ("a",)


def test_markdown_is_ignored_but_counted() -> None:
    s = sl(["x = 1", MD + "# x = 2", "y = x"], 2)
    assert idx(s) == [0, 2]


def test_source_as_a_list_of_lines_and_missing_ids() -> None:
    cells = [
        {"cell_type": "code", "source": ["a = 1\n", "b = a\n"]},
        {"cell_type": "code", "source": ["print(b)"]},
    ]
    s = slice_cells(cells, ["#1"])
    assert [c.cell_id for c in s.cells] == ["#0", "#1"]
    assert s.cells[0].source == "a = 1\nb = a\n"


# -- errors -----------------------------------------------------------------------------------


def test_errors() -> None:
    cells = nb("x = 1", MD + "text", "y = x")
    with pytest.raises(SliceError, match="no cells selected"):
        slice_cells(cells, [])
    with pytest.raises(SliceError, match="'nope'") as info:
        slice_cells(cells, ["c0", "nope"])
    assert info.value.cell_id == "nope"
    with pytest.raises(SliceError, match="markdown") as info:
        slice_cells(cells, ["c1"])
    assert (info.value.index, info.value.cell_id) == (1, "c1")
    with pytest.raises(SliceError, match="list of cell ids"):
        slice_cells(cells, "c0")
    with pytest.raises(SliceError, match="twice"):
        slice_cells([*cells, {"id": "c0", "cell_type": "code", "source": ""}], ["c2"])


def test_syntax_error_before_the_selection_names_the_cell() -> None:
    with pytest.raises(SliceError) as info:
        sl(["a = 1", "b = 2\ndef f(:\n    pass", "print(a)"], 2)
    message = str(info.value)
    assert "cell 1 (id c1)" in message and "line 2" in message
    assert (info.value.index, info.value.cell_id) == (1, "c1")


def test_syntax_error_after_the_selection_is_ignored() -> None:
    s = sl(["a = 1", "print(a)", "def broken(:"], 1)
    assert idx(s) == [0, 1]


# -- output -----------------------------------------------------------------------------------


def test_code_runs() -> None:
    s = sl(
        [
            "import math",
            "values = []",
            "def add(v):\n    values.append(v)",
            "unused = 1 / 0",  # would raise if it were included
            "for k in range(3):\n    add(k * math.pi)",
            "values.append(1)",
            "result = sum(values)",
        ],
        6,
    )
    assert idx(s) == [0, 1, 2, 4, 5, 6]
    assert cell(s, 4).reason == "changes values"  # add() appends to it
    assert s.code.startswith("# cell 0 (id c0)\nimport math\n# cell 1 (id c1)\nvalues = []\n")
    namespace: dict[str, Any] = {}
    exec(compile(s.code, "<slice>", "exec"), namespace)
    assert namespace["result"] == pytest.approx(1 + 3 * math.pi)


def test_code_keeps_each_header_on_one_line() -> None:
    cells = [{"id": "a\nb = 1", "cell_type": "code", "source": "b = 2"}]
    code = slice_cells(cells, ["a\nb = 1"]).code
    assert code == "# cell 0 (id a b = 1)\nb = 2\n"


def test_to_json_round_trips() -> None:
    s = sl(["import os", "p = os.sep", "print(p)"], 2)
    data = json.loads(json.dumps(s.to_json()))
    assert data == {
        "cells": [
            {
                "index": 0,
                "cell_id": "c0",
                "selected": False,
                "provides": ["os"],
                "reason": "imports os",
                "source": "import os",
            },
            {
                "index": 1,
                "cell_id": "c1",
                "selected": False,
                "provides": ["p"],
                "reason": "defines p",
                "source": "p = os.sep",
            },
            {
                "index": 2,
                "cell_id": "c2",
                "selected": True,
                "provides": [],
                "reason": "selected",
                "source": "print(p)",
            },
        ],
        "defines": [],
        "unresolved": [],
    }


def test_data_science_notebook() -> None:
    cells = [
        MD + "# Churn model",
        "import numpy as np\nimport pandas as pd\n"
        "import matplotlib.pyplot as plt\n%matplotlib inline",
        "import torch\nfrom torch import nn",
        "df = pd.read_csv('churn.csv')\ndf.head()",
        "df = df.dropna()\ndf['tenure'] = df['tenure'].clip(0, 72)",
        "plt.hist(df['tenure'])\nplt.show()",
        "def features(frame):\n"
        "    x = frame[FEATURES].to_numpy(dtype=np.float32)\n"
        "    return torch.tensor(x)",
        "FEATURES = ['tenure', 'charges']",
        "class Net(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
        "        self.lin = nn.Linear(d, 1)\n    def forward(self, x):\n        return self.lin(x)",
        "EPOCHS = 5\nLR = 1e-3",
        MD + "## Train",
        "X = features(df)\ny = torch.tensor(df['churn'].values)\nmodel = Net(X.shape[1])\n"
        "opt = torch.optim.Adam(model.parameters(), lr=LR)\n"
        "for epoch in range(EPOCHS):\n    opt.zero_grad()\n    loss = loss_fn(model(X), y)\n"
        "    loss.backward()\n    opt.step()",
        "plt.plot(losses)",
    ]
    cells.insert(11, "loss_fn = nn.BCEWithLogitsLoss()")
    s = sl(cells, 12)
    assert idx(s) == [1, 2, 3, 4, 6, 7, 8, 9, 11, 12]  # not the histogram, not the last plot
    assert cell(s, 1).reason == "imports np, pd"
    assert cell(s, 2).reason == "imports nn, torch"
    assert cell(s, 3).reason == "defines df"
    assert cell(s, 4).reason == "defines df"  # df = df.dropna() rebinds, reading the old df
    assert cell(s, 6).reason == "defines features"
    assert cell(s, 9).provides == ("EPOCHS", "LR")
    assert s.unresolved == ()
    assert {"model", "opt", "loss", "X", "y", "epoch"} <= set(s.defines)
    assert "plt" not in s.defines


def test_modules_a_cell_calls_into_are_not_results():
    """`time.sleep(1)` counts as a change of `time` for slicing, but a module is no result."""
    cells = [
        {"id": "np", "cell_type": "code", "source": "import random"},
        {"id": "x", "cell_type": "code",
         "source": "import time\nrandom.seed(0)\nanswer = random.random()\ntime.sleep(0)"},
    ]
    sl = slice_cells(cells, ["x"])
    assert [c.cell_id for c in sl.cells] == ["np", "x"]
    assert sl.defines == ("answer",)
