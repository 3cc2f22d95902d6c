/**
 * "Send instead of re-running", without the DOM or a kernel: which earlier
 * cells of a slice the job could skip because the values they make already
 * live in the user's kernel and are small enough to send by value, and how
 * long each cell took when it last ran (JupyterLab's recorded timing).
 *
 * The plugin asks the kernel once, silently, with the user expression
 * `valueSizesExpression(names)`; its answer (`parseValueSizes`) gives each
 * name's estimated size in bytes, or null for what cannot be sent (modules,
 * functions, classes, or a size the kernel could not tell). Nothing runs in
 * the user's namespace and nothing is pickled: the server checks the real
 * pickle's size against its limit when the job is submitted.
 */
import type * as nbformat from '@jupyterlab/nbformat';

import type { ISlice, ISliceCell } from './jobsapi';
import type { IExpressionReply } from './loadresults';
import { validNames } from './loadresults';

/**
 * Python run by `exec` in a private namespace (`g` is the kernel's globals,
 * `names` the names asked about): each name's estimated size in bytes, or
 * null for code, modules and what it cannot measure. Arrays and tensors by
 * `nbytes`, pandas objects by `memory_usage(deep=True)`, containers by their
 * items (up to 10,000), anything else by `sys.getsizeof`.
 */
const SIZES_CODE = `import inspect, json, sys
def size(v, depth=0):
    if inspect.ismodule(v) or inspect.isroutine(v) or inspect.isclass(v) or depth > 4:
        return None
    b = getattr(v, 'nbytes', None)
    if isinstance(b, int):
        return b
    m = getattr(v, 'memory_usage', None)
    if callable(m):
        u = m(deep=True)
        return int(u.sum()) if hasattr(u, 'sum') else int(u)
    if isinstance(v, (list, tuple, set, frozenset, dict)):
        items = list(v.values()) + list(v.keys()) if isinstance(v, dict) else list(v)
        if len(items) > 10000:
            return None
        parts = [size(i, depth + 1) for i in items]
        return None if None in parts else sys.getsizeof(v) + sum(parts)
    return sys.getsizeof(v)
out = {}
for n in names:
    if n in g:
        try:
            out[n] = size(g[n])
        except Exception:
            out[n] = None
result = json.dumps(out)
`;

/**
 * A Python expression (a kernel's user expression) whose value is the JSON
 * object `{name: bytes | null}` of those of `names` the kernel defines.
 */
export function valueSizesExpression(names: ReadonlyArray<string>): string {
  const list = validNames(names)
    .map(n => `'${n}'`)
    .join(', ');
  // JSON's string syntax is Python's too (JSON.stringify never writes `\/`).
  return (
    `(lambda ns: (exec(${JSON.stringify(SIZES_CODE)}, ns), ns['result'])[1])` +
    `({'g': globals(), 'names': [${list}]})`
  );
}

/** Each asked name's size in bytes (null: cannot be sent); null when the kernel could not say. */
export function parseValueSizes(
  reply: IExpressionReply | undefined | null,
  asked: ReadonlyArray<string>
): Map<string, number | null> | null {
  if (!reply || reply.status !== 'ok') {
    return null;
  }
  const text = reply.data?.['text/plain'];
  if (typeof text !== 'string') {
    return null;
  }
  let parsed: unknown;
  try {
    // The repr of a Python str holding JSON: strip the quotes, then read the JSON.
    const inner = text.trim().replace(/^'(.*)'$/s, '$1').replace(/\\'/g, "'").replace(/\\\\/g, '\\');
    parsed = JSON.parse(inner);
  } catch {
    return null;
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
    return null;
  }
  const sizes = new Map<string, number | null>();
  for (const name of asked) {
    if (Object.prototype.hasOwnProperty.call(parsed, name)) {
      const value = (parsed as Record<string, unknown>)[name];
      sizes.set(
        name,
        typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : null
      );
    }
  }
  return sizes;
}

/** An earlier cell the job could skip by sending what it makes. */
export interface ISendOffer {
  cellId: string;
  /** What the later cells need from it (`provides`), all sendable. */
  names: string[];
  /** Their estimated size together, bytes. */
  bytes: number;
}

/** The names the slice's earlier cells provide (what to ask the kernel about). */
export function providedNames(slice: ISlice): string[] {
  const names: string[] = [];
  for (const cell of Array.isArray(slice.cells) ? slice.cells : []) {
    if (!cell.selected) {
      names.push(...(Array.isArray(cell.provides) ? cell.provides : []));
    }
  }
  return validNames(names);
}

/**
 * The earlier cells whose every provided name lives in the kernel, can be
 * sent, and fits (with what is already sent) under `maxBytes`. A cell that
 * provides nothing nameable (it only changes state) is never offered.
 */
export function sendOffers(
  slice: ISlice,
  sizes: ReadonlyMap<string, number | null>,
  maxBytes: number | null,
  alreadySentBytes = 0
): ISendOffer[] {
  const offers: ISendOffer[] = [];
  for (const cell of Array.isArray(slice.cells) ? slice.cells : []) {
    const names = Array.isArray(cell.provides) ? validNames(cell.provides) : [];
    if (cell.selected || names.length === 0 || names.length !== (cell.provides ?? []).length) {
      continue;
    }
    const each = names.map(n => sizes.get(n));
    if (each.some(b => typeof b !== 'number')) {
      continue;
    }
    const bytes = (each as number[]).reduce((a, b) => a + b, 0);
    if (maxBytes !== null && alreadySentBytes + bytes > maxBytes) {
      continue;
    }
    offers.push({ cellId: cell.cell_id, names, bytes });
  }
  return offers;
}

/**
 * How long a cell took when it last ran, in seconds, from JupyterLab's
 * recorded timing (`metadata.execution`, written when the notebook setting
 * "Record timing" is on); null when not recorded.
 */
export function lastRunSeconds(cell: nbformat.ICell | undefined): number | null {
  const execution = (cell?.metadata as { execution?: Record<string, unknown> } | undefined)
    ?.execution;
  if (!execution || typeof execution !== 'object') {
    return null;
  }
  const start = execution['iopub.execute_input'] ?? execution['shell.execute_request'];
  const end = execution['shell.execute_reply'] ?? execution['iopub.status.idle'];
  if (typeof start !== 'string' || typeof end !== 'string') {
    return null;
  }
  const seconds = (Date.parse(end) - Date.parse(start)) / 1000;
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : null;
}

/** Seconds each slice cell last took, by cell id (only those recorded). */
export function lastRunTimes(
  slice: ISlice,
  cells: ReadonlyArray<nbformat.ICell>
): Map<string, number> {
  const byId = new Map<string, nbformat.ICell>();
  for (const cell of cells) {
    const id = (cell as { id?: unknown }).id;
    if (typeof id === 'string') {
      byId.set(id, cell);
    }
  }
  const times = new Map<string, number>();
  for (const cell of (Array.isArray(slice.cells) ? slice.cells : []) as ISliceCell[]) {
    const seconds = lastRunSeconds(byId.get(cell.cell_id));
    if (seconds !== null) {
      times.set(cell.cell_id, seconds);
    }
  }
  return times;
}
