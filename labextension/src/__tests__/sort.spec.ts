import { compareValues, sortRows, toggleSort } from '../sort';
import {
  DEFAULT_SORT,
  sortKernels,
  sortNotebooks
} from '../costpanelmodel';
import { kernel, notebook } from './fixtures';

describe('toggleSort', () => {
  it('flips the same key and starts a new key in its default direction', () => {
    const s = { key: 'spend', direction: 'descending' as const };
    expect(toggleSort(s, 'spend')).toEqual({ key: 'spend', direction: 'ascending' });
    expect(toggleSort(toggleSort(s, 'spend'), 'spend')).toEqual(s);
    expect(toggleSort(s, 'path', 'ascending')).toEqual({
      key: 'path',
      direction: 'ascending'
    });
    expect(toggleSort(s, 'waste')).toEqual({ key: 'waste', direction: 'descending' });
  });
});

describe('compareValues', () => {
  it('compares numbers numerically and text naturally', () => {
    expect(compareValues(2, 10)).toBeLessThan(0);
    expect(compareValues('nb2.ipynb', 'nb10.ipynb')).toBeLessThan(0);
    expect(compareValues('B', 'a')).toBeGreaterThan(0);
  });
});

describe('sortRows', () => {
  const rows = [
    { id: 'a', v: 2 },
    { id: 'b', v: null },
    { id: 'c', v: 10 },
    { id: 'd', v: 2 },
    { id: 'e', v: NaN }
  ];
  const value = (r: { v: number | null }) => r.v;

  it('sorts descending with missing values last', () => {
    expect(
      sortRows(rows, { key: 'v', direction: 'descending' }, value).map(r => r.id)
    ).toEqual(['c', 'a', 'd', 'b', 'e']);
  });

  it('sorts ascending with missing values still last, stable on ties', () => {
    expect(
      sortRows(rows, { key: 'v', direction: 'ascending' }, value).map(r => r.id)
    ).toEqual(['a', 'd', 'c', 'b', 'e']);
  });

  it('breaks ties with tieBreak and leaves the input alone', () => {
    const copy = rows.slice();
    expect(
      sortRows(
        rows,
        { key: 'v', direction: 'descending' },
        value,
        r => (r.id === 'a' ? 'z' : r.id)
      ).map(r => r.id)
    ).toEqual(['c', 'd', 'a', 'b', 'e']);
    expect(rows).toEqual(copy);
  });
});

describe('panel sorting', () => {
  const notebooks = [
    notebook('b.ipynb', 1, { gpu_utilization_percent: 90, idle_seconds: 5 }),
    notebook('a.ipynb', 3, { gpu_utilization_percent: null, idle_seconds: null }),
    notebook('c.ipynb', 2, { gpu_utilization_percent: 2, idle_seconds: 3600 })
  ];

  it('defaults to most expensive first', () => {
    expect(sortNotebooks(notebooks, DEFAULT_SORT).map(n => n.path)).toEqual([
      'a.ipynb',
      'c.ipynb',
      'b.ipynb'
    ]);
  });

  it('sorts by path, utilisation and idle time', () => {
    expect(
      sortNotebooks(notebooks, { key: 'path', direction: 'ascending' }).map(n => n.path)
    ).toEqual(['a.ipynb', 'b.ipynb', 'c.ipynb']);
    expect(
      sortNotebooks(notebooks, {
        key: 'gpu_utilization_percent',
        direction: 'ascending'
      }).map(n => n.path)
    ).toEqual(['c.ipynb', 'b.ipynb', 'a.ipynb']);
    expect(
      sortNotebooks(notebooks, { key: 'idle_seconds', direction: 'descending' }).map(
        n => n.path
      )
    ).toEqual(['c.ipynb', 'b.ipynb', 'a.ipynb']);
  });

  it('falls back to spend for an unknown key', () => {
    expect(
      sortNotebooks(notebooks, { key: 'bogus', direction: 'descending' }).map(
        n => n.path
      )
    ).toEqual(['a.ipynb', 'c.ipynb', 'b.ipynb']);
  });

  it('sorts kernels, ties by id', () => {
    const kernels = [
      kernel('k2', 'a.ipynb', 1, { gpu_memory_bytes: 5 }),
      kernel('k1', 'b.ipynb', 1, { gpu_memory_bytes: 9 }),
      kernel('k3', null, 4, { gpu_memory_bytes: 0 })
    ];
    expect(sortKernels(kernels, DEFAULT_SORT).map(k => k.kernel_id)).toEqual([
      'k3',
      'k1',
      'k2'
    ]);
    expect(
      sortKernels(kernels, { key: 'gpu_memory_bytes', direction: 'descending' }).map(
        k => k.kernel_id
      )
    ).toEqual(['k1', 'k2', 'k3']);
    expect(
      sortKernels(kernels, { key: 'notebook', direction: 'ascending' }).map(
        k => k.kernel_id
      )
    ).toEqual(['k2', 'k1', 'k3']);
  });
});
