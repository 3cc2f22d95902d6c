/**
 * Which cells "Offload heavy cells" selects when an alert names a notebook:
 * the cell that ran longest, timed by this page (`CellRunTimes`) or by
 * JupyterLab's recorded execution times.
 */
import type * as nbformat from '@jupyterlab/nbformat';

import { formatDuration } from './format';
import { lastRunSeconds } from './sendoffer';

/** The cells "Offload heavy cells" selects, and why (for the tooltip). */
export interface IHeavyCells {
  ids: string[];
  why: string;
}

/** A cell's source as one string. */
function sourceOf(cell: nbformat.ICell): string {
  const source = cell.source as unknown;
  return Array.isArray(source) ? source.join('') : typeof source === 'string' ? source : '';
}

/**
 * The heavy cell of a notebook an alert names: the code cell that ran
 * longest (`ranFor`, this page's own timing, else JupyterLab's recorded
 * `metadata.execution`); with no cell timed, the only code cell when there is
 * one. Null when nothing tells: guessing would offload the wrong cell.
 */
export function heavyCells(
  cells: ReadonlyArray<nbformat.ICell>,
  ranFor: ReadonlyMap<string, number> = new Map()
): IHeavyCells | null {
  const code = cells.filter(
    c => c.cell_type === 'code' && typeof c.id === 'string' && c.id && sourceOf(c).trim()
  );
  let best: { id: string; seconds: number } | null = null;
  for (const cell of code) {
    const id = cell.id as string;
    const seconds = ranFor.get(id) ?? lastRunSeconds(cell);
    if (seconds !== null && seconds !== undefined && (!best || seconds > best.seconds)) {
      best = { id, seconds };
    }
  }
  if (best) {
    return { ids: [best.id], why: `it ran longest (${formatDuration(best.seconds)})` };
  }
  return code.length === 1 ? { ids: [code[0].id as string], why: 'it is the only code cell' } : null;
}

/**
 * How long each cell took when it last ran in this page, by cell id, from
 * JupyterLab's `executionScheduled` and `executed` signals. A cell's run
 * starts when it was scheduled or when the notebook's previous cell finished,
 * whichever is later, so "Run all" does not count the queue as work.
 */
export class CellRunTimes {
  constructor(private _now: () => number = Date.now) {}

  /** A cell of `notebook` was queued to run. */
  scheduled(notebook: object, cellId: string): void {
    this._scheduled.set(cellId, this._now());
  }

  /** A cell of `notebook` finished (or failed). */
  executed(notebook: object, cellId: string): void {
    const now = this._now();
    const scheduled = this._scheduled.get(cellId);
    this._scheduled.delete(cellId);
    const previous = this._lastEnd.get(notebook);
    this._lastEnd.set(notebook, now);
    if (scheduled === undefined) {
      return;
    }
    const start = previous !== undefined && previous > scheduled ? previous : scheduled;
    this._seconds.set(cellId, Math.max(0, (now - start) / 1000));
  }

  /** Seconds by cell id. */
  get seconds(): ReadonlyMap<string, number> {
    return this._seconds;
  }

  private _lastEnd = new WeakMap<object, number>();
  private _scheduled = new Map<string, number>();
  private _seconds = new Map<string, number>();
}
