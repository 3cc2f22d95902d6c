/**
 * The cost panel's "Notebooks" section: every notebook that has spent
 * anything, sortable, with its spend-rate sparkline; the notebook the panel
 * was opened for is highlighted and scrolled to.
 *
 * Stable DOM hooks: `.jp-costguard-notebooks` (table) with
 * `.jp-costguard-sort[data-table][data-key]` headers (`aria-sort`),
 * `.jp-costguard-notebook-row[data-path]` (`data-costguard-severity`,
 * `.jp-costguard-alert`, `.jp-mod-highlighted`), cells `td[data-key]`, the
 * `.jp-costguard-open-notebook` link, `.jp-costguard-sparkline`.
 */
import type { INotebookDoc } from './api';
import { notebookSeverity } from './alerts';
import { CostPanelModel, NOTEBOOK_COLUMNS } from './costpanelmodel';
import {
  CostPanelSection,
  emptyRow,
  emptyText,
  renderSortHeaders,
  ROW_DETAIL,
  SECONDARY,
  setDetail,
  sortableTable,
  tableRow,
  tableWrap
} from './costpanelsection';
import { el, setAttr, setText, syncRows } from './dom';
import {
  formatBytes,
  formatDuration,
  formatMoney,
  formatRate,
  formatUtilization
} from './format';
import { sparklinePath, spendRates } from './sparkline';

/** Sparkline size, in CSS pixels. */
export const SPARKLINE_WIDTH = 80;
export const SPARKLINE_HEIGHT = 18;

const SVG_NS = 'http://www.w3.org/2000/svg';

/** The trend cell: an empty sparkline. */
function sparklineCell(): HTMLTableCellElement {
  const td = el('td', `jp-costguard-trend ${SECONDARY}`);
  td.dataset.key = 'trend';
  const svg = document.createElementNS(SVG_NS, 'svg');
  svg.setAttribute('class', 'jp-costguard-sparkline');
  svg.setAttribute('width', String(SPARKLINE_WIDTH));
  svg.setAttribute('height', String(SPARKLINE_HEIGHT));
  svg.setAttribute('viewBox', `0 0 ${SPARKLINE_WIDTH} ${SPARKLINE_HEIGHT}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  svg.appendChild(document.createElementNS(SVG_NS, 'title'));
  const path = document.createElementNS(SVG_NS, 'path');
  path.setAttribute('class', 'jp-costguard-sparkline-line');
  svg.appendChild(path);
  td.appendChild(svg);
  return td;
}

function createNotebookRow(): HTMLTableRowElement {
  const tr = tableRow('jp-costguard-notebook-row', NOTEBOOK_COLUMNS, 'jp-costguard-path', (td, key) => {
    if (key === 'path') {
      const a = el('a', 'jp-costguard-open-notebook');
      a.dataset.action = 'open-notebook';
      a.href = '#';
      td.appendChild(a);
      td.appendChild(el('div', ROW_DETAIL));
    }
  });
  tr.appendChild(sparklineCell());
  return tr;
}

/** Draw a notebook's spend rate over its recent history (up to `end`). */
function updateSparkline(svg: SVGElement, n: INotebookDoc, end: number | null, currency: string): void {
  const values = spendRates(n.history, { end }).map(r => r.rate);
  setAttr(svg.querySelector('path')!, 'd', sparklinePath(values, SPARKLINE_WIDTH, SPARKLINE_HEIGHT));
  const peak = values.length ? Math.max(...values) : 0;
  const last = values.length ? values[values.length - 1] : 0;
  setAttr(svg, 'data-points', String(values.length));
  setText(
    svg.querySelector('title')!,
    `Spend rate over the last ${values.length} min: peak ${formatRate(
      peak,
      currency
    )}, last ${formatRate(last, currency)}`
  );
  setAttr(svg, 'aria-label', `spend rate sparkline of ${n.path}`);
}

/** The "Notebooks" section (see the file's header). */
export class NotebooksSection extends CostPanelSection {
  constructor(model: CostPanelModel) {
    super(model, 'Notebooks', 'jp-costguard-notebooks-section');
    this._table = sortableTable('notebooks', NOTEBOOK_COLUMNS, [['Spend rate, last 30 min', true]]);
    this.node.appendChild(tableWrap(this._table));
  }

  render(): void {
    const model = this.model;
    const data = model.data;
    const body = this._table.tBodies[0];
    const rows = model.notebookRows;
    renderSortHeaders(this._table, model.sortState('notebooks'));
    setText(this.heading, `Notebooks (${rows.length})`);
    this._rows = syncRows<INotebookDoc>(
      body,
      this._rows,
      rows,
      n => n.path,
      createNotebookRow,
      (tr, n) => this._updateRow(tr, n)
    );
    if (rows.length === 0) {
      emptyRow(
        body,
        NOTEBOOK_COLUMNS.length + 1,
        emptyText(data.state, 'No notebook has spent anything yet.')
      );
    }
    const highlight = model.highlightPath;
    if (highlight && highlight !== this._scrolledTo) {
      const row = this._rows.get(highlight);
      if (row) {
        this._scrolledTo = highlight;
        row.scrollIntoView?.({ block: 'nearest' });
      }
    }
  }

  private _updateRow(tr: HTMLTableRowElement, n: INotebookDoc): void {
    const model = this.model;
    const data = model.data;
    const currency = model.currency;
    tr.dataset.path = n.path;
    const severity = notebookSeverity(data.alerts, n.path, n, data.alertsState === 'ok');
    tr.classList.toggle('jp-costguard-alert', !!severity);
    setAttr(tr, 'data-costguard-severity', severity);
    tr.classList.toggle('jp-mod-highlighted', model.highlightPath === n.path);
    const cells = tr.children;
    const link = cells[0].firstElementChild as HTMLElement;
    setText(link, n.path);
    link.title = `Open ${n.path}`;
    setText(cells[1], formatMoney(n.spend, currency));
    setText(cells[2], formatMoney(n.waste, currency));
    setText(
      cells[3],
      typeof n.spend_rate_per_hour === 'number' ? formatRate(n.spend_rate_per_hour, currency) : '–'
    );
    setText(cells[4], formatUtilization(n.gpu_utilization_percent, n.gpu_activity));
    setText(cells[5], formatBytes(n.gpu_memory_bytes));
    setText(cells[6], formatDuration(n.idle_seconds));
    setDetail(tr, cells[0], NOTEBOOK_COLUMNS, n.path);
    const end = typeof model.status?.time === 'number' ? (model.status.time as number) : null;
    updateSparkline(cells[7].firstElementChild as SVGElement, n, end, currency);
  }

  private _rows = new Map<string, HTMLTableRowElement>();
  private _scrolledTo: string | null = null;
  private _table: HTMLTableElement;
}
