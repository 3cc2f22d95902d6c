"""What well-known libraries' functions and methods do to state later cells see: the slicer's
library knowledge, keyed by full dotted names (``numpy.random.seed``, not ``np.random.seed``;
the analysis resolves import aliases before asking).

Why a table: a statement calling a module's function (``plt.plot(x)``) used to count as a change
of the module, which chained every plotting cell together.  Most module functions only compute or
draw; the few that configure state later cells see (rc/option setters, warning filters) are
listed here.  A module the table does not know keeps the old, safe answer (the call changes it):
``wandb.init()`` must come along with ``wandb.log()``.

Global random generators are state of their own (``<rng:numpy.random>``), not their module's:
the tables say which calls reset one (seeds) and which draw from one, explicitly
(``np.random.rand``) or not (`IMPLICIT_DRAWS`: a torch layer's constructor draws its initial
weights, ``train_test_split`` without ``random_state`` draws from numpy's).  An estimator or
splitter without ``random_state`` draws later, when it is fitted or split: `DRAWS_WHEN_USED`
names those classes, and a name bound to one of their objects (or to a search or pipeline over
one) draws when it is fitted, split or handed to ``cross_val_score`` and the like.
"""

from __future__ import annotations

import ast
import sys

#: Module functions whose call changes state that later cells see (configuration).  Seeds of
#: the global generators below are not here: a seed resets its generator, it does not change
#: the module (`GLOBAL_GENERATORS`).
CONFIGURES = frozenset(
    {
        "numpy.set_printoptions", "numpy.seterr",
        "torch.set_default_dtype", "torch.set_default_device",
        "torch.set_default_tensor_type", "torch.set_num_threads", "torch.set_grad_enabled",
        "torch.set_float32_matmul_precision", "torch.use_deterministic_algorithms",
        "torch.set_printoptions",
        "tensorflow.random.set_seed", "tensorflow.keras.utils.set_random_seed",
        "keras.utils.set_random_seed", "tensorflow.config.experimental.set_memory_growth",
        "tensorflow.config.set_visible_devices",
        "tensorflow.keras.mixed_precision.set_global_policy",
        "matplotlib.rc", "matplotlib.rcdefaults", "matplotlib.use", "matplotlib.style.use",
        "matplotlib.interactive", "matplotlib.pyplot.rc", "matplotlib.pyplot.rcdefaults",
        "matplotlib.pyplot.style.use", "matplotlib.pyplot.ion", "matplotlib.pyplot.ioff",
        "matplotlib.pyplot.interactive", "matplotlib.pyplot.switch_backend",
        "matplotlib.pyplot.xkcd",
        "seaborn.set", "seaborn.set_theme", "seaborn.set_style", "seaborn.set_context",
        "seaborn.set_palette", "seaborn.set_color_codes", "seaborn.reset_defaults",
        "seaborn.reset_orig",
        "pandas.set_option", "pandas.reset_option", "pandas.set_eng_float_format",
        "pandas.plotting.register_matplotlib_converters",
        "warnings.filterwarnings", "warnings.simplefilter", "warnings.resetwarnings",
        "sklearn.set_config", "logging.basicConfig", "logging.disable",
        "sys.setrecursionlimit", "site.addsitedir", "importlib.reload", "os.putenv",
        "os.unsetenv", "tqdm.pandas", "tqdm.auto.tqdm.pandas", "nltk.download",
    }
)
#: Dotted prefixes under which every call configures (``plt.rcParams.update({...})``).
CONFIGURES_UNDER = ("matplotlib.rcParams.", "matplotlib.pyplot.rcParams.", "pandas.options.")

#: Modules whose other functions only compute, read or draw: a statement calling one of them
#: does not change the module.  ``numpy`` covers ``numpy.linalg`` and so on.
KNOWN_MODULES = (
    "numpy", "pandas", "matplotlib", "seaborn", "math", "cmath", "statistics", "json", "os.path",
    "time", "pprint", "IPython.display", "scipy", "torch", "tensorflow", "keras", "sklearn",
    "warnings", "itertools", "functools", "operator", "string", "textwrap", "re", "datetime",
    "collections", "glob", "pathlib", "plotly", "tqdm",
)
#: Functions of known modules that draw on pyplot's current figure.  Under the inline backend a
#: figure does not outlive its cell; in interactive mode (``plt.ion()``, ``%matplotlib qt``)
#: it does, and then these count as changes of the module again.
DRAWS_UNDER = ("matplotlib.pyplot.", "seaborn.")

#: Module functions that change their first argument in place (``random.shuffle(deck)``).
CHANGES_FIRST_ARGUMENT = frozenset(
    {
        "random.shuffle", "numpy.random.shuffle", "numpy.copyto", "numpy.fill_diagonal",
        "numpy.put", "numpy.place", "numpy.putmask", "numpy.random.Generator.shuffle",
    }
)
CHANGES_FIRST_ARGUMENT_UNDER = ("torch.nn.init.",)

#: Method calls that only read their object: as a statement they change nothing.
READ_ONLY_METHODS = frozenset(
    {"head", "tail", "describe", "info", "summary", "value_counts", "nunique", "unique"}
    | {"isna", "isnull", "keys", "values", "items", "count", "to_string", "memory_usage"}
    | {"predict", "predict_proba", "predict_log_proba", "decision_function", "score"}
    | {"transform", "inverse_transform", "get_params", "evaluate", "get_feature_names_out"}
    | {"reshape", "copy", "mean", "sum", "std", "var", "min", "max", "argmax", "argmin"}
    | {"median", "mode", "quantile", "corr", "cov", "plot", "hist", "boxplot", "groupby"}
    | {"to_numpy", "astype", "tolist", "numpy", "detach", "item", "size", "dim"}
    | {"any", "all", "round", "abs", "cumsum", "prod", "sample", "sort_values", "to_dict"}
    | {"show", "display", "print", "format", "join", "split", "strip", "lower", "upper"}
    | {"startswith", "endswith", "replace", "dropna", "fillna", "merge", "pivot_table"}
    | {"map", "agg", "aggregate", "rolling", "resample", "drop_duplicates"}
    | {"select_dtypes", "isin", "corrwith", "describe_option", "nlargest", "nsmallest"}
    | {"__repr__", "__str__", "state_dict", "parameters", "named_parameters", "eval_shape"}
)
#: Keywords that turn a read-only pandas method into an in-place change.
IN_PLACE_KEYWORDS = frozenset({"inplace"})

#: Methods that change their object even inside an expression (``xs = scaler.fit_transform(X)``).
LEARNING_METHODS = frozenset(
    {"fit", "fit_transform", "fit_predict", "fit_resample", "partial_fit", "load_state_dict"}
)
#: Of those, the ones that replace what an earlier call learned, so earlier fits are not needed
#: (scikit-learn style, unless ``warm_start=True``; ``load_state_dict`` replaces the weights).
REPLACING_METHODS = frozenset({"fit", "fit_transform", "fit_predict", "fit_resample"})
#: Libraries whose estimators' ``fit`` replaces (Keras' ``fit`` continues training: not listed).
REPLACING_LIBRARIES = ("sklearn", "xgboost", "lightgbm", "catboost", "imblearn")

#: Functions and methods that write a file: name -> index of the path argument.  Methods are
#: matched by name on any object (``df.to_csv("x.csv")``).
WRITER_FUNCTIONS = {
    "numpy.save": 0, "numpy.savez": 0, "numpy.savez_compressed": 0, "numpy.savetxt": 0,
    "joblib.dump": 1, "torch.save": 1, "os.makedirs": 0, "os.mkdir": 0,
    "shutil.copy": 1, "shutil.copyfile": 1, "shutil.move": 1, "urllib.request.urlretrieve": 1,
}
WRITER_METHODS = {
    "to_csv": 0, "to_parquet": 0, "to_json": 0, "to_excel": 0, "to_pickle": 0, "to_feather": 0,
    "to_hdf": 0, "to_netcdf": 0, "save": 0, "save_model": 0, "save_pretrained": 0,
    "save_weights": 0,
}
#: Functions and methods that read a file: name -> index of the path argument.
READER_FUNCTIONS = {
    "numpy.load": 0, "numpy.loadtxt": 0, "numpy.genfromtxt": 0, "numpy.fromfile": 0,
    "joblib.load": 0, "torch.load": 0, "PIL.Image.open": 0, "cv2.imread": 0,
    "tensorflow.keras.models.load_model": 0, "keras.models.load_model": 0,
    "shutil.copy": 0, "shutil.copyfile": 0, "shutil.move": 0, "os.listdir": 0,
    "glob.glob": 0, "h5py.File": 0, "xarray.open_dataset": 0,
}
READER_PREFIXES = ("pandas.read_",)
READER_METHODS = {"load_model": 0, "load_weights": 0, "from_pretrained": 0}
#: Modules whose import never depends on ``sys.path`` edits or the working directory.
_THIRD_PARTY = (
    "numpy", "pandas", "matplotlib", "seaborn", "scipy", "sklearn", "torch", "tensorflow",
    "keras", "IPython", "tqdm", "joblib", "plotly", "xgboost", "lightgbm", "PIL", "cv2",
)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p.rstrip(".") or name.startswith(p.rstrip(".") + ".") for p in prefixes)


#: Global random generators: module -> (functions that reset it, functions of the module that
#: do not draw from it).  Every other function of the module draws, and a draw anywhere (also
#: inside an expression: ``x = np.random.rand(3)``) changes what the next draw returns.  A seed
#: is the generator's fact alone: it resets the generator (earlier seeds and draws are not
#: needed after it) and does not change the module (``np.mean`` does not need it).
GLOBAL_GENERATORS = {
    "numpy.random": (
        frozenset({"seed", "set_state", "set_bit_generator"}),
        frozenset({"RandomState", "default_rng", "Generator", "SeedSequence", "BitGenerator",
                   "PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64", "get_state",
                   "get_bit_generator"}),
    ),
    "random": (
        frozenset({"seed", "setstate"}),
        frozenset({"Random", "SystemRandom", "getstate"}),
    ),
    "torch": (
        frozenset({"manual_seed", "set_rng_state", "seed"}),
        frozenset(),
    ),
}
#: The drawing functions of torch (its other functions do not draw, except those below).
TORCH_DRAWS = frozenset(
    {"rand", "randn", "randint", "randperm", "normal", "bernoulli", "multinomial", "poisson",
     "rand_like", "randn_like", "randint_like"}
)
#: Seeds of the GPUs' generators only: they change what later draws return (on a GPU) but
#: leave the CPU generator as it was, so they do not cut earlier draws (``<rng:torch>`` stands
#: for all of torch's default generators).
PARTIAL_SEEDS = {
    "torch.cuda.manual_seed": "torch", "torch.cuda.manual_seed_all": "torch",
    "torch.cuda.seed": "torch", "torch.cuda.seed_all": "torch",
    "torch.cuda.set_rng_state": "torch", "torch.cuda.set_rng_state_all": "torch",
}

#: Calls that draw from a library's global generator though their names do not say so:
#: dotted name -> the generator's module.  A torch layer's constructor draws its initial
#: weights (``reset_parameters``), so a model built earlier changes a later model's weights;
#: ``nn.init`` fills a tensor with draws; ``random_split`` and functional dropout draw.
#: scikit-learn's helpers draw from numpy's global ``RandomState`` when ``random_state`` is not
#: given.  Estimators and splitters (``RandomForestClassifier()``, ``KFold(shuffle=True)``)
#: draw later, when they are fitted or split: `DRAWS_WHEN_USED`.
IMPLICIT_DRAWS = {
    **{f"torch.nn.init.{f}{u}": "torch" for u in ("_", "") for f in (
        "uniform", "normal", "trunc_normal", "xavier_uniform", "xavier_normal",
        "kaiming_uniform", "kaiming_normal", "orthogonal", "sparse")},
    **{f"torch.nn.functional.{f}": "torch" for f in (
        "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
        "feature_alpha_dropout", "gumbel_softmax")},
    "torch.utils.data.random_split": "torch",
    "sklearn.model_selection.train_test_split": "numpy.random",
    "sklearn.utils.shuffle": "numpy.random",
    "sklearn.utils.resample": "numpy.random",
}
#: Dotted prefixes under which every call draws: torch layers with randomly initialised
#: weights, by class name (``torch.nn.Conv`` covers ``Conv2d`` and ``ConvTranspose1d``; layers
#: without random weights, ``ReLU``, ``BatchNorm2d``, ``MSELoss``, do not draw), and
#: scikit-learn's dataset generators.
IMPLICIT_DRAWS_UNDER = {
    **{f"torch.nn.{layer}": "torch" for layer in (
        "Linear", "Bilinear", "Conv", "Embedding", "RNN", "LSTM", "GRU",
        "MultiheadAttention", "Transformer")},
    "sklearn.datasets.make_": "numpy.random",
}
#: Tensor methods that fill their tensor with draws from torch's generator
#: (``w.data.normal_(0, 0.02)``), on whatever object they are called.
TORCH_DRAWING_METHODS = frozenset(
    {"uniform_", "normal_", "random_", "bernoulli_", "exponential_", "geometric_",
     "log_normal_", "cauchy_"}
)
#: Keywords that give a call its own generator instead of the global one.
OWN_GENERATOR_KEYWORDS = frozenset({"generator", "random_state"})


#: scikit-learn classes whose objects draw from numpy's global generator later, when they are
#: used (fitted, split), unless given ``random_state``: class name -> whether only with
#: ``shuffle=True`` (``KFold`` does not shuffle by default).  Estimators that draw only under
#: some option (``LogisticRegression(solver="saga")``, ``SVC(probability=True)``) are not
#: listed.
DRAWS_WHEN_USED = {
    **dict.fromkeys((
        "RandomForestClassifier", "RandomForestRegressor", "ExtraTreesClassifier",
        "ExtraTreesRegressor", "RandomTreesEmbedding", "GradientBoostingClassifier",
        "GradientBoostingRegressor", "HistGradientBoostingClassifier",
        "HistGradientBoostingRegressor", "BaggingClassifier", "BaggingRegressor",
        "AdaBoostClassifier", "AdaBoostRegressor", "IsolationForest", "DecisionTreeClassifier",
        "DecisionTreeRegressor", "ExtraTreeClassifier", "ExtraTreeRegressor", "SGDClassifier",
        "SGDRegressor", "SGDOneClassSVM", "Perceptron", "PassiveAggressiveClassifier",
        "PassiveAggressiveRegressor", "MLPClassifier", "MLPRegressor", "KMeans",
        "MiniBatchKMeans", "BisectingKMeans", "GaussianMixture", "BayesianGaussianMixture",
        "TSNE", "SpectralClustering", "SpectralEmbedding", "TruncatedSVD", "FastICA",
        "LatentDirichletAllocation", "RandomizedSearchCV", "ShuffleSplit",
        "StratifiedShuffleSplit", "GroupShuffleSplit", "RepeatedKFold",
        "RepeatedStratifiedKFold"), False),
    **dict.fromkeys(("KFold", "StratifiedKFold", "GroupKFold", "StratifiedGroupKFold"), True),
}
#: Methods that use such an object: calling one draws.
USING_METHODS = (LEARNING_METHODS - {"load_state_dict"}) | {"split"}
#: scikit-learn functions that fit or split the objects they are given (they draw), and those
#: that build an object over them (it draws when it is used: ``GridSearchCV(clf)``, a pipeline).
USING_FUNCTIONS = frozenset(
    {"cross_val_score", "cross_validate", "cross_val_predict", "learning_curve",
     "validation_curve", "permutation_test_score", "permutation_importance"}
)
BUILDING_FUNCTIONS = frozenset({"make_pipeline", "make_union", "clone"})


def draws_when_used(dotted: str | None, call: ast.Call) -> str | None:
    """The global generator that the object `call` builds (with constructor `dotted`) draws
    from when it is used; None if it draws from none (or from its own ``random_state``)."""
    if dotted is None or not _under(dotted, ("sklearn",)) or _own_generator(call):
        return None
    shuffle_only = DRAWS_WHEN_USED.get(dotted.rsplit(".", 1)[-1])
    if shuffle_only is None:
        return None
    shuffles = any(
        kw.arg == "shuffle" and not (isinstance(kw.value, ast.Constant) and not kw.value.value)
        for kw in call.keywords
    )
    return "numpy.random" if shuffles or not shuffle_only else None


def uses_arguments(dotted: str) -> bool:
    """Whether module function `dotted` fits or splits the objects it is given."""
    return _under(dotted, ("sklearn",)) and dotted.rsplit(".", 1)[-1] in USING_FUNCTIONS


def builds_over_arguments(dotted: str) -> bool:
    """Whether `dotted` builds an object that uses the objects it is given (a search, a
    pipeline, an ensemble over estimators)."""
    name = dotted.rsplit(".", 1)[-1]
    return _under(dotted, ("sklearn",)) and (name[:1].isupper() or name in BUILDING_FUNCTIONS)


def _implicit(dotted: str) -> str | None:
    if dotted in IMPLICIT_DRAWS:
        return IMPLICIT_DRAWS[dotted]
    return next((m for p, m in IMPLICIT_DRAWS_UNDER.items() if dotted.startswith(p)), None)


def _own_generator(call: ast.Call) -> bool:
    """Whether `call` passes its own generator (``random_state=0``, ``generator=g``) or says
    it does not shuffle (``shuffle=False``): then it does not draw from the global one."""
    for kw in call.keywords:
        const = kw.value if isinstance(kw.value, ast.Constant) else None
        if kw.arg in OWN_GENERATOR_KEYWORDS and (const is None or const.value is not None):
            return True
        if kw.arg == "shuffle" and const is not None and const.value is False:
            return True
    return False


def global_generator(dotted: str | None, call: ast.Call | None = None
                     ) -> tuple[str, bool] | None:
    """(the generator's module, whether the call resets it) when a call of module function
    `dotted` (None for a method of an object) seeds or draws from a global random generator,
    explicitly or not; None otherwise.  With the `call`, its keywords are read: a call given
    its own generator does not draw from the global one."""
    found = _generator_call(dotted, call.func if call is not None else None)
    if found is not None and not found[1] and call is not None and _own_generator(call):
        return None
    return found


def _generator_call(dotted: str | None, func: ast.expr | None) -> tuple[str, bool] | None:
    if dotted is None:
        if isinstance(func, ast.Attribute) and func.attr in TORCH_DRAWING_METHODS:
            return "torch", False
        return None
    implicit = _implicit(dotted)
    if implicit is not None or dotted in PARTIAL_SEEDS:
        return implicit or PARTIAL_SEEDS[dotted], False
    module, _, func_name = dotted.rpartition(".")
    if module == "torch.random":
        module = "torch"
    if module not in GLOBAL_GENERATORS or func_name.startswith("_"):
        return None
    seeds, others = GLOBAL_GENERATORS[module]
    if func_name in seeds:
        return module, True
    if func_name in others or (module == "torch" and func_name not in TORCH_DRAWS):
        return None
    return module, False


def configures(dotted: str) -> bool:
    """Whether calling module function `dotted` changes state later cells see."""
    return dotted in CONFIGURES or any(dotted.startswith(p) for p in CONFIGURES_UNDER)


def call_changes_module(dotted: str, interactive: bool) -> bool:
    """Whether a statement calling module function `dotted` changes its module.

    Unknown modules keep the old answer (yes); under interactive pyplot, drawing does too.
    Seeding or drawing from a global generator changes the generator, not the module.
    """
    if global_generator(dotted) is not None:
        return False
    if configures(dotted):
        return True
    if not _under(dotted, KNOWN_MODULES):
        return True
    return interactive and _under(dotted, DRAWS_UNDER)


#: Calls that return matplotlib figures or axes (``fig, ax = plt.subplots()``,
#: ``ax = fig.add_subplot()``): drawing on what they return changes it, though ``plot`` and
#: ``hist`` are read-only methods of a DataFrame.
FIGURE_FUNCTIONS_UNDER = ("matplotlib.", "seaborn.")
FIGURE_METHODS = frozenset(
    {"add_subplot", "add_axes", "subplots", "subplot_mosaic", "twinx", "twiny", "gca", "gcf",
     "subfigures", "inset_axes"}
)


def makes_figure(dotted: str | None, func: ast.expr) -> bool:
    """Whether a call of `func` (resolved to module function `dotted`, or None) returns a
    figure or axes."""
    if dotted is not None:
        return _under(dotted, FIGURE_FUNCTIONS_UNDER) and dotted.rsplit(".", 1)[-1] in (
            FIGURE_METHODS | {"figure", "axes", "subplot", "FacetGrid", "PairGrid", "JointGrid"}
        )
    return isinstance(func, ast.Attribute) and func.attr in FIGURE_METHODS


#: Methods that hand out an object's parts to share (a torch module's parameters): what is
#: built over them (an optimizer) changes the object when it is changed (``opt.step()``).
SHARING_METHODS = frozenset({"parameters", "named_parameters", "children", "modules"})
#: Constructors whose object changes what it was built over (a scheduler its optimizer).
SHARES_ARGUMENTS_UNDER = ("torch.optim.",)


def changes_first_argument(dotted: str) -> bool:
    """Also torch's in-place functions, whose names end in ``_`` (``clip_grad_norm_``)."""
    if _under(dotted, ("torch",)) and dotted.endswith("_") and not dotted.endswith("__"):
        return True
    return dotted in CHANGES_FIRST_ARGUMENT or _under(dotted, CHANGES_FIRST_ARGUMENT_UNDER)


def shares_arguments(dotted: str) -> bool:
    """Whether the object `dotted` builds changes what it is given (a scheduler)."""
    return _under(dotted, SHARES_ARGUMENTS_UNDER)


def replacing_library(dotted: str) -> bool:
    """Whether `dotted` (a constructor) comes from a library whose `fit` replaces."""
    return _under(dotted, REPLACING_LIBRARIES)


def import_is_fixed(module: str) -> bool:
    """Whether importing `module` cannot depend on the notebook's `sys.path` or directory."""
    top = module.split(".")[0]
    return top in _STDLIB or top in _THIRD_PARTY


def reader_argument(dotted: str) -> int | None:
    if dotted in READER_FUNCTIONS:
        return READER_FUNCTIONS[dotted]
    return 0 if any(dotted.startswith(p) for p in READER_PREFIXES) else None
