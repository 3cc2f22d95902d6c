/**
 * Pure table sorting for the cost panel. No DOM.
 */

export type SortDirection = 'ascending' | 'descending';

/** Which column a table is sorted by, and how. */
export interface ISortState<K extends string = string> {
  key: K;
  direction: SortDirection;
}

/**
 * The sort state after clicking a column header: the same column flips
 * direction; another column starts in its default direction (numbers
 * descending, so the most expensive comes first; text ascending).
 */
export function toggleSort<K extends string>(
  state: ISortState<K>,
  key: K,
  defaultDirection: SortDirection = 'descending'
): ISortState<K> {
  if (state.key === key) {
    return {
      key,
      direction: state.direction === 'ascending' ? 'descending' : 'ascending'
    };
  }
  return { key, direction: defaultDirection };
}

function isMissing(value: unknown): boolean {
  return (
    value === null ||
    value === undefined ||
    value === '' ||
    (typeof value === 'number' && !Number.isFinite(value))
  );
}

/** Ascending comparison of two cell values (numbers numerically, text naturally). */
export function compareValues(a: unknown, b: unknown): number {
  if (typeof a === 'number' && typeof b === 'number') {
    return a - b;
  }
  return String(a).localeCompare(String(b), undefined, {
    numeric: true,
    sensitivity: 'base'
  });
}

/**
 * Rows sorted by `state` (a new array; the input is left alone). Missing
 * values (null, undefined, NaN, '') always sort last, whatever the direction;
 * ties are broken by `tieBreak` ascending, then by input order.
 */
export function sortRows<T, K extends string>(
  rows: ReadonlyArray<T>,
  state: ISortState<K>,
  value: (row: T, key: K) => unknown,
  tieBreak?: (row: T) => string
): T[] {
  const sign = state.direction === 'ascending' ? 1 : -1;
  return rows
    .map((row, index) => ({ row, index, v: value(row, state.key) }))
    .sort((x, y) => {
      const mx = isMissing(x.v);
      const my = isMissing(y.v);
      if (mx !== my) {
        return mx ? 1 : -1;
      }
      if (!mx) {
        const c = compareValues(x.v, y.v);
        if (c !== 0) {
          return sign * c;
        }
      }
      if (tieBreak) {
        const t = compareValues(tieBreak(x.row), tieBreak(y.row));
        if (t !== 0) {
          return t;
        }
      }
      return x.index - y.index;
    })
    .map(entry => entry.row);
}
