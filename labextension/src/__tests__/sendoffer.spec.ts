import type * as nbformat from '@jupyterlab/nbformat';

import type { ISlice } from '../jobsapi';
import {
  lastRunSeconds,
  lastRunTimes,
  parseValueSizes,
  providedNames,
  sendOffers,
  valueSizesExpression
} from '../sendoffer';

const slice: ISlice = {
  cells: [
    { cell_id: 'data', index: 0, selected: false, provides: ['X', 'y'], reason: 'defines X, y', source: 'X, y = load()' },
    { cell_id: 'fit', index: 1, selected: false, provides: ['model'], reason: 'defines model', source: 'model = fit(X, y)' },
    { cell_id: 'seed', index: 2, selected: false, provides: [], reason: 'changes np', source: 'np.random.seed(0)' },
    { cell_id: 'eval', index: 3, selected: true, provides: [], reason: 'selected', source: 'print(model.score(X, y))' }
  ],
  defines: [],
  unresolved: []
};

describe('send instead of re-running', () => {
  it('asks the kernel about what the earlier cells provide, as a safe expression', () => {
    expect(providedNames(slice)).toEqual(['X', 'y', 'model']);
    const expr = valueSizesExpression(['X', 'bad name', "x'); import os; ('"]);
    expect(expr).toContain("'names': ['X']");
    expect(expr).not.toContain('import os;');
    expect(expr.startsWith('(lambda ns: (exec(')).toBe(true);
  });

  it("reads the kernel's answer, or says it cannot", () => {
    const reply = { status: 'ok', data: { 'text/plain': `'{"X": 8000, "y": 800, "model": null}'` } };
    expect(parseValueSizes(reply, ['X', 'y', 'model', 'gone'])).toEqual(
      new Map<string, number | null>([['X', 8000], ['y', 800], ['model', null]])
    );
    expect(parseValueSizes({ status: 'error' }, ['X'])).toBeNull();
    expect(parseValueSizes({ status: 'ok', data: { 'text/plain': 'nonsense' } }, ['X'])).toBeNull();
    expect(parseValueSizes(undefined, ['X'])).toBeNull();
  });

  it('offers the cells whose every provided value is in the kernel and fits', () => {
    const sizes = new Map<string, number | null>([['X', 8000], ['y', 800], ['model', null]]);
    // `fit` makes a model that cannot be measured; `seed` provides nothing to send.
    expect(sendOffers(slice, sizes, 100 << 20)).toEqual([
      { cellId: 'data', names: ['X', 'y'], bytes: 8800 }
    ]);
    expect(sendOffers(slice, sizes, 8000)).toEqual([]); // too big for the server's limit
    expect(sendOffers(slice, sizes, 10_000, 2000)).toEqual([]); // with what is already sent
    expect(sendOffers(slice, new Map([['X', 1]]), null)).toEqual([]); // y not in the kernel
  });

  it("reads JupyterLab's recorded timing", () => {
    const cell = (execution?: { [key: string]: string }): nbformat.ICodeCell => ({
      id: 'data',
      cell_type: 'code',
      source: '',
      metadata: execution ? { execution } : {},
      outputs: [],
      execution_count: 1
    });
    const timed = cell({
      'iopub.execute_input': '2026-12-02T08:00:00.000Z',
      'shell.execute_reply': '2026-12-02T08:03:20.500Z'
    });
    expect(lastRunSeconds(timed)).toBe(200.5);
    expect(lastRunSeconds(cell())).toBeNull();
    expect(lastRunSeconds(cell({ 'iopub.execute_input': 'not a date', 'shell.execute_reply': 'x' }))).toBeNull();
    expect(lastRunTimes(slice, [timed, { ...cell(), id: 'fit' }])).toEqual(new Map([['data', 200.5]]));
  });
});
