/**
 * "Insert outputs": put a finished job's outputs into the notebook's code
 * cells, each followed by one display_data output with the job's label
 * (`metadata.costguard.job` = the job id). Pure functions, plus `applyPlan`
 * over a minimal view of the notebook's cell models.
 */
import type * as nbformat from '@jupyterlab/nbformat';

import type { IJobResults } from './jobsapi';

/** Output types nbformat 4 knows. */
const OUTPUT_TYPES = new Set(['stream', 'display_data', 'execute_result', 'error']);

/** The output naming the job under a cell's outputs. */
export function labelOutput(label: string, jobId: number): nbformat.IDisplayData {
  return {
    output_type: 'display_data',
    data: { 'text/plain': label, 'text/markdown': `*${label}*` },
    metadata: { costguard: { job: jobId } }
  };
}

/** Whether an output is a costguard job label (from an earlier insert). */
export function isLabelOutput(output: nbformat.IOutput): boolean {
  const meta = output.metadata as { [key: string]: unknown } | undefined;
  const costguard = meta?.costguard as { [key: string]: unknown } | undefined;
  return typeof costguard?.job === 'number';
}

/** Outputs that look like nbformat outputs, copied. */
export function validOutputs(outputs: unknown): nbformat.IOutput[] {
  if (!Array.isArray(outputs)) {
    return [];
  }
  return outputs
    .filter(
      (o): o is nbformat.IOutput =>
        !!o &&
        typeof o === 'object' &&
        OUTPUT_TYPES.has((o as { output_type?: unknown }).output_type as string)
    )
    .map(o => JSON.parse(JSON.stringify(o)) as nbformat.IOutput);
}

/** A cell as far as inserting goes. */
export interface ICellRef {
  id: string;
  cell_type: string;
}

/**
 * New outputs by cell id: for each `results.cells` entry whose cell is a code
 * cell of the notebook, the job's outputs then the label output. Other cells
 * (gone, or no longer code) are left out.
 */
export function planInsert(
  cells: Iterable<ICellRef>,
  results: Pick<IJobResults, 'job' | 'label' | 'cells'>
): Map<string, nbformat.IOutput[]> {
  const code = new Set<string>();
  for (const cell of cells) {
    if (cell.cell_type === 'code' && cell.id) {
      code.add(cell.id);
    }
  }
  const plan = new Map<string, nbformat.IOutput[]>();
  for (const entry of Array.isArray(results.cells) ? results.cells : []) {
    if (!entry || !code.has(entry.cell_id) || plan.has(entry.cell_id)) {
      continue;
    }
    plan.set(entry.cell_id, [
      ...validOutputs(entry.outputs),
      labelOutput(results.label, results.job)
    ]);
  }
  return plan;
}

/** The outputs list of a cell model (JupyterLab's IOutputAreaModel). */
export interface IOutputsLike {
  clear(wait?: boolean): void;
  fromJSON(values: nbformat.IOutput[]): void;
}

/** A cell model, as far as inserting goes. */
export interface ICellModelLike {
  readonly id: string;
  readonly type: string;
  readonly outputs?: IOutputsLike;
}

/** Replace the outputs of the planned code cells; returns how many changed. */
export function applyPlan(
  cells: Iterable<ICellModelLike>,
  plan: ReadonlyMap<string, nbformat.IOutput[]>
): number {
  let changed = 0;
  for (const cell of cells) {
    const outputs = plan.get(cell.id);
    if (cell.type !== 'code' || !outputs || !cell.outputs) {
      continue;
    }
    cell.outputs.clear();
    cell.outputs.fromJSON(outputs);
    changed++;
  }
  return changed;
}
