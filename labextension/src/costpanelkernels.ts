/**
 * The cost panel's "Kernels" section: every running kernel with its
 * resources and spend, sortable, with Interrupt and Shut down buttons, and
 * Hibernate on the kernels that hold GPUs (the panel routes their clicks,
 * `data-action`).
 *
 * Stable DOM hooks: `.jp-costguard-kernels` (table) with
 * `.jp-costguard-sort[data-table][data-key]` headers (`aria-sort`),
 * `.jp-costguard-kernel-row[data-kernel-id]` (`data-execution-state`),
 * cells `td[data-key]`, `.jp-costguard-kernel-interrupt`,
 * `.jp-costguard-kernel-shutdown`, `.jp-costguard-kernel-hibernate` (`hidden`
 * unless the kernel holds GPUs).
 */
import type { IKernelDoc } from './api';
import { CostPanelModel, KERNEL_COLUMNS } from './costpanelmodel';
import {
  button,
  CostPanelSection,
  emptyRow,
  emptyText,
  renderSortHeaders,
  ROW_DETAIL,
  setDetail,
  sortableTable,
  tableRow,
  tableWrap
} from './costpanelsection';
import { el, setAttr, setText, syncRows } from './dom';
import { hibernateActionLabel } from './hibernatemodel';
import {
  formatBytes,
  formatDuration,
  formatMoney,
  formatRate,
  formatUtilization
} from './format';

function shortId(id: string): string {
  return id.length > 8 ? id.slice(0, 8) : id;
}

/** The actions cell: Interrupt, Shut down and Hibernate. */
function actionsCell(): HTMLTableCellElement {
  const td = el('td', 'jp-costguard-actions');
  td.dataset.key = 'actions';
  const hibernate = button('jp-costguard-button jp-costguard-kernel-hibernate', 'Hibernate', '☾');
  hibernate.type = 'button';
  hibernate.dataset.action = 'hibernate';
  const interrupt = button('jp-costguard-button jp-costguard-kernel-interrupt', 'Interrupt', '■');
  interrupt.type = 'button';
  interrupt.dataset.action = 'interrupt';
  const shutdown = button(
    'jp-costguard-button jp-mod-warn jp-costguard-kernel-shutdown',
    'Shut down',
    '✕'
  );
  shutdown.type = 'button';
  shutdown.dataset.action = 'shutdown';
  td.appendChild(interrupt);
  td.appendChild(shutdown);
  td.appendChild(hibernate);
  return td;
}

function createKernelRow(): HTMLTableRowElement {
  const tr = tableRow('jp-costguard-kernel-row', KERNEL_COLUMNS, '', (td, key) => {
    if (key === 'notebook') {
      td.appendChild(el('span', 'jp-costguard-kernel-notebook'));
      td.appendChild(el('div', ROW_DETAIL));
    }
  });
  tr.appendChild(actionsCell());
  return tr;
}

function updateKernelRow(tr: HTMLTableRowElement, k: IKernelDoc, currency: string): void {
  tr.dataset.kernelId = k.kernel_id;
  tr.dataset.executionState = k.execution_state;
  const cells = tr.children;
  setText(cells[0], `${k.name} ${shortId(k.kernel_id)}`);
  (cells[0] as HTMLElement).title = `${k.name} ${k.kernel_id}${
    k.attribution ? ` — GPU attribution: ${k.attribution}` : ''
  }`;
  setText(cells[1].firstElementChild!, k.notebook ?? '–');
  setText(cells[2], k.execution_state);
  setText(cells[3], formatMoney(k.spend, currency));
  setText(cells[4], formatMoney(k.waste, currency));
  setText(cells[5], formatRate(k.spend_rate_per_hour, currency));
  setText(cells[6], formatUtilization(k.gpu_utilization_percent, k.gpu_activity));
  setText(cells[7], formatBytes(k.gpu_memory_bytes));
  setText(cells[8], formatDuration(k.idle_seconds));
  setDetail(tr, cells[1], KERNEL_COLUMNS, k.notebook ?? k.name);
  const label = `${k.name} ${shortId(k.kernel_id)}${k.notebook ? ` (${k.notebook})` : ''}`;
  const buttons = cells[9].children;
  for (const [b, verb] of [[buttons[0], 'Interrupt'], [buttons[1], 'Shut down']] as const) {
    (b as HTMLElement).title = `${verb} kernel ${label}`;
    setAttr(b, 'aria-label', `${verb} kernel ${label}`);
  }
  const hibernate = buttons[2] as HTMLElement;
  const gpus = holdsGpus(k);
  hibernate.hidden = gpus === 0;
  hibernate.title = `${hibernateActionLabel(gpus || null)} (kernel ${label})`;
  setAttr(hibernate, 'aria-label', `Hibernate kernel ${label}`);
}

/** How many GPUs a kernel holds (its `gpus`; 1 when it only has GPU memory), 0 for none. */
export function holdsGpus(k: IKernelDoc): number {
  const listed = Array.isArray(k.gpus) ? k.gpus.length : 0;
  return listed || ((k.gpu_memory_bytes ?? 0) > 0 ? 1 : 0);
}

/** The "Kernels" section (see the file's header). */
export class KernelsSection extends CostPanelSection {
  constructor(model: CostPanelModel) {
    super(model, 'Kernels', 'jp-costguard-kernels-section');
    this._table = sortableTable('kernels', KERNEL_COLUMNS, [['Actions', false]]);
    this.node.appendChild(tableWrap(this._table));
  }

  render(): void {
    const model = this.model;
    const body = this._table.tBodies[0];
    const rows = model.kernelRows;
    const currency = model.currency;
    renderSortHeaders(this._table, model.sortState('kernels'));
    setText(this.heading, `Kernels (${rows.length})`);
    this._rows = syncRows<IKernelDoc>(
      body,
      this._rows,
      rows,
      k => k.kernel_id,
      createKernelRow,
      (tr, k) => updateKernelRow(tr, k, currency)
    );
    if (rows.length === 0) {
      emptyRow(body, KERNEL_COLUMNS.length + 1, emptyText(model.state, 'No running kernels.'));
    }
  }

  private _rows = new Map<string, HTMLTableRowElement>();
  private _table: HTMLTableElement;
}
