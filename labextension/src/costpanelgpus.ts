/**
 * The cost panel's "GPUs" section: every GPU (or MIG instance) the server
 * sees, with its utilisation, memory and power.
 *
 * Stable DOM hooks: `.jp-costguard-gpus` (table),
 * `.jp-costguard-gpu-row[data-gpu-uuid]` (`data-gpu-index`,
 * `.jp-costguard-faulty`), cells `td[data-key]`. A GPU whose activity is
 * unknown (MIG: no utilisation) shows `unknown` in Util, not `–` or 0%.
 */
import type { IGpuDoc } from './api';
import type { CostPanelModel } from './costpanelmodel';
import { CostPanelSection, emptyRow, emptyText, SECONDARY, tableWrap } from './costpanelsection';
import { el, setText, syncRows } from './dom';
import { formatBytes, formatUtilization, UNKNOWN_ACTIVITY_TITLE } from './format';

/** The columns: key, label, numeric. */
const COLUMNS: [string, string, boolean][] = [
  ['index', '#', true],
  ['name', 'GPU', false],
  ['utilization', 'Util', true],
  ['memory', 'Memory', true],
  ['power', 'Power', true]
];

/** Columns a narrow panel hides (the model is in the row's tooltip). */
const GPU_SECONDARY = new Set(['name']);

function columnClass(key: string, numeric: boolean): string {
  return `${numeric ? 'jp-costguard-num' : ''}${GPU_SECONDARY.has(key) ? ` ${SECONDARY}` : ''}`;
}

function createTable(): HTMLTableElement {
  const table = el('table', 'jp-costguard-table jp-costguard-gpus');
  const head = table.createTHead().insertRow();
  for (const [key, label, numeric] of COLUMNS) {
    const th = el('th', columnClass(key, numeric), label);
    th.dataset.key = key;
    head.appendChild(th);
  }
  table.createTBody();
  return table;
}

function createGpuRow(): HTMLTableRowElement {
  const tr = el('tr', 'jp-costguard-gpu-row');
  for (const [key] of COLUMNS) {
    const td = el('td', columnClass(key, key !== 'name'));
    td.dataset.key = key;
    tr.appendChild(td);
  }
  return tr;
}

function updateGpuRow(tr: HTMLTableRowElement, g: IGpuDoc): void {
  tr.dataset.gpuUuid = g.uuid;
  tr.dataset.gpuIndex = String(g.index);
  tr.classList.toggle('jp-costguard-faulty', !!g.faulty);
  tr.title = `GPU ${g.index}: ${g.name}${g.faulty ? ` (${g.faulty})` : ''}`;
  const cells = tr.children;
  setText(cells[0], String(g.index));
  setText(cells[1], g.name + (g.faulty ? ` (${g.faulty})` : ''));
  setText(cells[2], formatUtilization(g.utilization_percent, g.activity));
  (cells[2] as HTMLElement).title = g.activity === 'unknown' ? UNKNOWN_ACTIVITY_TITLE : '';
  setText(cells[3], `${formatBytes(g.memory_used_bytes)} / ${formatBytes(g.memory_total_bytes)}`);
  setText(cells[4], typeof g.power_watts === 'number' ? `${Math.round(g.power_watts)} W` : '–');
}

/** The "GPUs" section (see the file's header). */
export class GpusSection extends CostPanelSection {
  constructor(model: CostPanelModel) {
    super(model, 'GPUs', 'jp-costguard-gpus-section');
    this._table = createTable();
    this.node.appendChild(tableWrap(this._table));
  }

  render(): void {
    const body = this._table.tBodies[0];
    const list = this.model.gpus;
    const gpus = list?.gpus ?? [];
    if (gpus.length === 0) {
      this._rows = syncRows(body, this._rows, [], () => '', () => el('tr'), () => undefined);
      const ok = list?.detail ? `No GPU (${list.status}: ${list.detail})` : 'No GPU visible';
      emptyRow(body, COLUMNS.length, emptyText(this.model.state, ok));
      return;
    }
    this._rows = syncRows<IGpuDoc>(
      body,
      this._rows,
      gpus,
      g => g.uuid || String(g.index),
      createGpuRow,
      updateGpuRow
    );
  }

  private _rows = new Map<string, HTMLTableRowElement>();
  private _table: HTMLTableElement;
}
