"""A submit (or slice preview) request, checked and read: which notebook, which cells, which
kernel, and the options a job is asked for. The fields, their types and limits are the API
document's (`SubmitRequest`, through `common/apischema`); only rules that span fields or reach
the disk are written here. Every refusal is a `JobError` that says what to change."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_costguard.common.apischema import RequestSchema, SchemaError
from jupyter_costguard.common.jsonlimits import JSONLimitError, check_string
from jupyter_costguard.offload.errors import JobError
from jupyter_costguard.offload.settings import JobSettings
from jupyter_costguard.offload.slicing import Slice, SliceError, slice_cells
from jupyter_costguard.offload.slicing.later import follows, used_later
from jupyter_costguard.offload.spec import (
    JobSpec,
    Resources,
    SpecCell,
    SpecError,
    parse_names,
    parse_retries,
)

SUBMIT_REQUEST = RequestSchema("SubmitRequest")
ESTIMATE_REQUEST = RequestSchema("EstimateRequest")
#: names a job brings back (a limit the spec parser applies too, so read from the document)
MAX_BRING_BACK: int = SUBMIT_REQUEST.limit(["bring_back"], "maxItems")
#: cells sent or saved (the saved notebook's too, which no request schema sees)
MAX_CELLS = 5000
#: the code a slice or a submit may carry: the sum of the code cells' sources (UTF-8)
MAX_CODE_BYTES = 1 << 20


def _plain(value: str, where: str) -> None:
    """No NUL and no lone surrogate in a string that becomes a file name or a path."""
    try:
        check_string(value, where)
    except JSONLimitError as e:
        raise JobError(str(e)) from None


def code_bytes(cells: list[Any]) -> int:
    """The UTF-8 size of the code cells' sources (strings or lists of lines)."""
    total = 0
    for c in cells:
        if c.get("cell_type") != "code":
            continue
        src = c.get("source", "")
        parts = src if isinstance(src, list) else [src]
        total += sum(len(p.encode("utf-8", "surrogatepass")) for p in parts
                     if isinstance(p, str))
    return total


def check_request(body: Any) -> dict[str, Any]:
    """The body as a request the document accepts (`SubmitRequest`), or a JobError naming
    the field."""
    try:
        SUBMIT_REQUEST.check(body)
    except SchemaError as e:
        raise JobError(str(e)) from None
    checked: dict[str, Any] = body
    return checked


@dataclass(frozen=True)
class SubmitOptions:
    """What the request asks of the job, defaults applied."""

    resources: Resources
    retries: int
    send: tuple[str, ...]
    #: None: chosen by `default_bring_back`
    bring_back: tuple[str, ...] | None
    inputs: tuple[str, ...]
    backend: str
    #: the kernel the `send` variables live in
    kernel_id: str | None


def parse_options(body: Mapping[str, Any], settings: JobSettings,
                  backends: Collection[str]) -> SubmitOptions:
    try:
        resources = Resources.parse(body.get("resources"))
        if body.get("resources") is None:
            resources = settings.resources
        retries = parse_retries(body.get("retries", settings.retries))
        send = parse_names(body.get("send"), "send")
    except SpecError as e:
        raise JobError(str(e)) from None
    bring_back = asked_bring_back(body)
    inputs: list[str] = body.get("inputs") or []
    for i in inputs:
        _plain(i, "inputs")
    backend = body.get("backend") or settings.backend
    if backend not in backends:
        raise JobError(f"unknown backend {backend!r}; configured: "
                       f"{', '.join(sorted(backends))}")
    kernel_id = body.get("kernel_id")
    if send and kernel_id is None:
        raise JobError("send needs kernel_id: the kernel the variables live in")
    return SubmitOptions(resources, retries, send, bring_back, tuple(inputs), backend,
                         kernel_id)


def estimate_request(body: Any, settings: JobSettings,
                     backends: Collection[str]) -> tuple[str, Resources]:
    """(backend, resources) of an estimate request (`EstimateRequest`: the submit's
    ``backend`` and ``resources``), the server's defaults applied as a submit applies them."""
    try:
        ESTIMATE_REQUEST.check(body)
    except SchemaError as e:
        raise JobError(str(e)) from None
    doc: Mapping[str, Any] = body
    try:
        resources = Resources.parse(doc.get("resources")) \
            if doc.get("resources") is not None else settings.resources
    except SpecError as e:
        raise JobError(str(e)) from None
    backend = doc.get("backend") or settings.backend
    if backend not in backends:
        raise JobError(f"unknown backend {backend!r}; configured: "
                       f"{', '.join(sorted(backends))}")
    return backend, resources


def notebook_file(root: Path, path: Any) -> Path:
    """The notebook's file: `path` relative to the server's `root`, and inside it."""
    if not isinstance(path, str) or not path.strip():
        raise JobError("notebook must be the notebook's path relative to the server root")
    _plain(path, "notebook")
    try:
        full = (root / path.lstrip("/")).resolve()
        if not full.is_relative_to(root):
            raise JobError("notebook path is outside the server's root directory")
        found = full.is_file()
    except OSError as e:  # a name too long for the filesystem, a loop of links
        raise JobError(f"notebook path cannot be used: {e.strerror or e}") from None
    if not found:
        raise JobError(f"notebook not found: {path[:200]}", 404)
    return full


def read_cells(body: Mapping[str, Any], file: Path) -> list[Any]:
    """The cells sent (the UI's, unsaved edits included), else the saved notebook's."""
    cells = body.get("cells")
    if cells is None:  # not sent: the saved notebook
        try:
            cells = json.loads(file.read_text()).get("cells", [])
        except (OSError, ValueError, AttributeError) as e:
            raise JobError(f"cannot read the notebook {body['notebook']}: {e}") from None
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        raise JobError("cells must be a list of notebook cells")
    if len(cells) > MAX_CELLS:
        raise JobError(f"a notebook of more than {MAX_CELLS} cells")
    size = code_bytes(cells)
    if size > MAX_CODE_BYTES:
        raise JobError(f"the code cells hold {size} bytes of source, over the limit of "
                       f"1 MiB ({MAX_CODE_BYTES} bytes) a job or a slice may carry", 413)
    return cells


def slice_request(body: Mapping[str, Any], file: Path) -> tuple[list[Any], Slice]:
    """The notebook's cells, and the slice the selected ones need."""
    cells = read_cells(body, file)
    selected: list[str] = body["selected"]
    given = parse_names(body.get("send"), "send")
    try:
        return cells, slice_cells(cells, selected, given=given)
    except SliceError as e:
        raise JobError(str(e)) from None


#: how a job's `bring_back` was chosen (the record's ``bring_back_from``)
BRING_BACK_ASKED = "request"
BRING_BACK_LATER = "later_cells"
BRING_BACK_ALL = "selected_cells"


def default_bring_back(cells: list[Any], selected: list[str], sl: Slice
                       ) -> tuple[tuple[str, ...], str]:
    """What a job brings back when the request names nothing, and why: the names the
    selected cells define that later cells read (`slicing.later`), so a loop's leftovers stay
    in the job and the results stay small; when no code cell follows the selection yet,
    nothing says which names matter, so every name the selected cells define."""
    if not follows(cells, selected):
        return sl.defines, BRING_BACK_ALL
    return used_later(cells, selected, sl.defines), BRING_BACK_LATER


def choose_bring_back(asked: tuple[str, ...] | None, cells: list[Any], selected: list[str],
                      sl: Slice) -> tuple[tuple[str, ...], str]:
    """What the job brings back, and why (`BRING_BACK_*`): the names the request asked for,
    else `default_bring_back`'s. The submit and the slice preview both ask here, so the
    confirm dialog says what the job will really bring back."""
    if asked is not None:
        return asked, BRING_BACK_ASKED
    return default_bring_back(cells, selected, sl)


def asked_bring_back(body: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The names the request's `bring_back` asks for; None when it names none."""
    if body.get("bring_back") is None:
        return None
    try:
        return parse_names(body.get("bring_back"), "bring_back", MAX_BRING_BACK)
    except SpecError as e:
        raise JobError(str(e)) from None


def kernel_name(body: Mapping[str, Any], file: Path, kernel_manager: Any,
                known: Callable[[], set[str]]) -> str:
    """The kernelspec the job runs in: asked for, else the one of the notebook's kernel,
    else the notebook's metadata, else python3; it must be one the server has."""
    name = body.get("kernel_name")
    if name is None and isinstance(body.get("kernel_id"), str) and kernel_manager:
        try:
            name = kernel_manager.get_kernel(body["kernel_id"]).kernel_name
        except KeyError:
            name = None
    if name is None:
        try:
            meta = json.loads(file.read_text()).get("metadata", {})
            name = meta.get("kernelspec", {}).get("name")
        except (OSError, ValueError, AttributeError):
            name = None
    name = name or "python3"
    if not isinstance(name, str) or name not in known():
        raise JobError(f"unknown kernel {name!r}; known: {', '.join(sorted(known()))}")
    return name


def job_spec(options: SubmitOptions, notebook: str, cwd: Path, kernel: str, sl: Slice,
             settings: JobSettings, bring_back: tuple[str, ...] | None = None) -> JobSpec:
    """The spec of the job the request asked for; `bring_back` when the request names none
    (default: what the selected cells define)."""
    return JobSpec(
        notebook=notebook, cwd=str(cwd), kernel_name=kernel,
        cells=tuple(SpecCell(c.cell_id, c.index, c.selected, c.code, c.source,
                             c.provides, c.reason) for c in sl.cells),
        resources=options.resources, retries=options.retries,
        retry_backoff_seconds=settings.retry_backoff_seconds, backend=options.backend,
        send=options.send,
        bring_back=options.bring_back if options.bring_back is not None
        else bring_back if bring_back is not None else sl.defines,
        inputs=options.inputs,
    )
