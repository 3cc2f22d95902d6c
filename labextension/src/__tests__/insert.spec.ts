import type * as nbformat from '@jupyterlab/nbformat';

import {
  applyPlan,
  ICellModelLike,
  isLabelOutput,
  labelOutput,
  planInsert,
  validOutputs
} from '../insert';
import { results } from './jobfixtures';

const label = 'ran as job 12 on local · 3m12s · USD 0.41';

const jobResults = {
  job: 12,
  label,
  cells: [
    {
      cell_id: 'c3',
      outputs: [
        { output_type: 'stream', name: 'stdout', text: 'epoch 1\n' },
        { output_type: 'execute_result', data: { 'text/plain': '0.93' }, metadata: {}, execution_count: 4 }
      ] as nbformat.IOutput[],
      execution_count: 4
    },
    { cell_id: 'm1', outputs: [{ output_type: 'stream', name: 'stdout', text: 'x' }] as nbformat.IOutput[], execution_count: null },
    { cell_id: 'gone', outputs: [], execution_count: null }
  ]
};

describe('insert outputs', () => {
  it('makes the label output', () => {
    expect(labelOutput(label, 12)).toEqual({
      output_type: 'display_data',
      data: { 'text/plain': label, 'text/markdown': `*${label}*` },
      metadata: { costguard: { job: 12 } }
    });
    expect(isLabelOutput(labelOutput(label, 12))).toBe(true);
    expect(isLabelOutput({ output_type: 'display_data', data: {}, metadata: {} })).toBe(false);
  });

  it('plans the job outputs plus the label for code cells of the notebook only', () => {
    const plan = planInsert(
      [
        { id: 'c1', cell_type: 'code' },
        { id: 'm1', cell_type: 'markdown' },
        { id: 'c3', cell_type: 'code' }
      ],
      jobResults
    );
    expect([...plan.keys()]).toEqual(['c3']);
    expect(plan.get('c3')).toEqual([
      jobResults.cells[0].outputs[0],
      jobResults.cells[0].outputs[1],
      labelOutput(label, 12)
    ]);
    // Copies: editing the notebook never edits the cached results.
    expect(plan.get('c3')![0]).not.toBe(jobResults.cells[0].outputs[0]);
  });

  it('labels a cell the job left without outputs, and drops what is not an output', () => {
    const r = results(3, {
      cells: [{ cell_id: 'c3', outputs: [{ nope: 1 } as any, null as any], execution_count: null }]
    });
    expect(planInsert([{ id: 'c3', cell_type: 'code' }], r).get('c3')).toEqual([labelOutput(r.label, 3)]);
    expect(validOutputs('x')).toEqual([]);
  });

  it('replaces the outputs of the planned code cells', () => {
    const calls: string[] = [];
    const outputs = (id: string) => ({
      clear: () => calls.push(`${id}:clear`),
      fromJSON: (values: nbformat.IOutput[]) => calls.push(`${id}:set ${values.length}`)
    });
    const cells: ICellModelLike[] = [
      { id: 'c1', type: 'code', outputs: outputs('c1') },
      { id: 'm1', type: 'markdown' },
      { id: 'c3', type: 'code', outputs: outputs('c3') }
    ];
    const plan = planInsert(cells.map(c => ({ id: c.id, cell_type: c.type })), jobResults);
    expect(applyPlan(cells, plan)).toBe(1);
    expect(calls).toEqual(['c3:clear', 'c3:set 3']);
    // A markdown cell is never touched even when planned by mistake.
    expect(applyPlan(cells, new Map([['m1', []]]))).toBe(0);
  });
});
