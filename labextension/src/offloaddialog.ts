/**
 * Body of the "Run as batch job" confirm dialog: the slice (each cell the job
 * runs, named as the notebook shows it: its execution count `[n]` (`[ ]` when
 * never run) and first line, then why; the selected ones marked), the names it leaves
 * unresolved and brings back, and editable resources. `getValue()` returns
 * the typed form; `applyForm` (offloadmodel.ts) checks it.
 *
 * DOM hooks: `.jp-costguard-offload-dialog`, `.jp-costguard-slice-cell[data-cell-id][data-selected]`
 * (fields `[data-field=prompt|reason|source]`; the prompt's title gives the position), `.jp-costguard-slice-unresolved`,
 * `.jp-costguard-slice-defines`, inputs `input[name=gpus|cpus|memory_gib|time_limit_seconds|retries|send]`.
 */
import { Widget } from '@lumino/widgets';

import { el } from './dom';
import type { ISlice, ISubmitRequest } from './jobsapi';
import { firstLine, formFromRequest, IOffloadForm } from './offloadmodel';

/**
 * The prompt JupyterLab shows left of a code cell: `[3]` after its third run,
 * `[ ]` when it has not run (or the count is unknown). Positions are not shown:
 * they are not on screen, so the user cannot match them to cells.
 */
export function cellPrompt(executionCount: unknown): string {
  return typeof executionCount === 'number' && Number.isInteger(executionCount) && executionCount > 0
    ? `[${executionCount}]`
    : '[ ]';
}

/** Each request cell's execution count, by cell id. */
function executionCounts(request: ISubmitRequest): Map<string, unknown> {
  const counts = new Map<string, unknown>();
  for (const cell of Array.isArray(request.cells) ? request.cells : []) {
    const id = (cell as { id?: unknown }).id;
    if (typeof id === 'string') {
      counts.set(id, (cell as { execution_count?: unknown }).execution_count);
    }
  }
  return counts;
}

/** Fields of the form: name, label, placeholder, tooltip. */
const FIELDS: ReadonlyArray<[keyof IOffloadForm, string, string, string]> = [
  ['gpus', 'GPUs', 'backend default', 'Whole number of GPUs; empty for the backend\'s default'],
  ['cpus', 'CPUs', 'backend default', 'CPU cores; empty for the backend\'s default'],
  ['memory_gib', 'Memory (GiB)', 'backend default', 'Memory in GiB; empty for the backend\'s default'],
  ['time_limit_seconds', 'Time limit (s)', 'none', 'Stop the job after this many seconds; empty for none'],
  ['retries', 'Retries', '0', 'Attempts after the first one fails (0 to 10)'],
  [
    'send',
    'Send variables',
    'e.g. df, model',
    'Variables of the notebook\'s kernel to send to the job by value (comma-separated)'
  ]
];

/** "The job runs 3 cells: 1 selected and 2 cells before it that it needs." */
export function sliceSummary(total: number, selected: number): string {
  const earlier = total - selected;
  const cells = (n: number): string => `${n} ${n === 1 ? 'cell' : 'cells'}`;
  if (earlier <= 0) {
    return `The job runs the ${selected === 1 ? 'selected cell' : `${selected} selected cells`} alone.`;
  }
  return `The job runs ${cells(total)}: ${selected} selected and ${cells(earlier)} before ${
    selected === 1 ? 'it' : 'them'
  } that ${selected === 1 ? 'it needs' : 'they need'}.`;
}

/** The dialog body. */
export class OffloadDialogBody extends Widget {
  constructor(slice: ISlice, request: ISubmitRequest) {
    super();
    this.addClass('jp-costguard-offload-dialog');
    this._build(slice, request);
  }

  /** The form as typed. */
  getValue(): IOffloadForm {
    const value = {} as IOffloadForm;
    for (const [name] of FIELDS) {
      value[name] = this._inputs.get(name)?.value ?? '';
    }
    return value;
  }

  private _build(slice: ISlice, request: ISubmitRequest): void {
    const cells = Array.isArray(slice.cells) ? slice.cells : [];
    const selected = cells.filter(c => c.selected).length;
    this.node.appendChild(
      el('p', 'jp-costguard-slice-summary', sliceSummary(cells.length, selected))
    );
    const list = el('ol', 'jp-costguard-slice');
    const counts = executionCounts(request);
    for (const cell of cells) {
      const item = el('li', 'jp-costguard-slice-cell');
      item.dataset.cellId = cell.cell_id;
      item.dataset.selected = cell.selected ? 'true' : 'false';
      const count = counts.get(cell.cell_id);
      const prompt = el('span', 'jp-costguard-slice-prompt', cellPrompt(count));
      prompt.dataset.field = 'prompt';
      prompt.title =
        cellPrompt(count) === '[ ]'
          ? `Not run yet in this kernel (cell ${cell.index + 1} of the notebook)`
          : `Last run as ${cellPrompt(count)} (cell ${cell.index + 1} of the notebook)`;
      item.appendChild(prompt);
      const source = el('code', 'jp-costguard-slice-source', firstLine(cell.source));
      source.dataset.field = 'source';
      source.title = cell.source;
      item.appendChild(source);
      if (cell.selected) {
        item.appendChild(el('span', 'jp-costguard-slice-selected', 'selected'));
      }
      // A selected cell's reason is "selected": the badge says it already.
      const reason = el(
        'span',
        'jp-costguard-slice-reason',
        cell.selected && cell.reason === 'selected' ? '' : cell.reason
      );
      reason.dataset.field = 'reason';
      reason.title = cell.reason;
      item.appendChild(reason);
      list.appendChild(item);
    }
    this.node.appendChild(list);

    const unresolved = Array.isArray(slice.unresolved) ? slice.unresolved : [];
    if (unresolved.length) {
      this.node.appendChild(
        el(
          'p',
          'jp-costguard-slice-unresolved',
          `No cell defines ${unresolved.join(', ')}: send ${
            unresolved.length === 1 ? 'it' : 'them'
          } from the kernel below, or the job may fail.`
        )
      );
    }
    const defines = Array.isArray(slice.defines) ? slice.defines : [];
    if (defines.length) {
      this.node.appendChild(
        el('p', 'jp-costguard-slice-defines', `Brings back: ${defines.join(', ')}`)
      );
    }

    const form = el('div', 'jp-costguard-offload-form');
    const values = formFromRequest(request);
    for (const [name, label, placeholder, caption] of FIELDS) {
      const field = el('label', 'jp-costguard-offload-field');
      field.title = caption;
      field.appendChild(el('span', 'jp-costguard-offload-field-label', label));
      const input = el('input', 'jp-mod-styled');
      input.name = name;
      input.type = 'text';
      input.value = values[name];
      input.placeholder = placeholder;
      if (name === 'send' && !request.kernel_id) {
        input.disabled = true;
        input.placeholder = 'needs a running kernel';
      }
      if (name !== 'send') {
        input.inputMode = 'decimal';
      }
      this._inputs.set(name, input);
      field.appendChild(input);
      form.appendChild(field);
    }
    this.node.appendChild(form);
  }

  private _inputs = new Map<keyof IOffloadForm, HTMLInputElement>();
}
