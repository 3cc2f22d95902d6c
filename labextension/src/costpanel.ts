/**
 * The cost panel (right sidebar): renders a CostPanelModel, nothing else.
 * Rows are keyed (notebook path, kernel id, GPU uuid) and updated in place,
 * so buttons and hover survive the refreshes.
 *
 * Stable DOM hooks: `#jp-costguard-panel`, `#jp-costguard-panel-simulated`
 * (`.jp-costguard-simulated`), `.jp-costguard-owner` (whose server, under
 * JupyterHub; `hidden` otherwise), `.jp-costguard-instance-details [data-field]`,
 * `.jp-costguard-totals [data-field]`, `.jp-costguard-gpu-row[data-gpu-uuid]`,
 * `.jp-costguard-notebooks` / `.jp-costguard-kernels` tables with
 * `.jp-costguard-sort[data-table][data-key]` headers (`aria-sort`),
 * `.jp-costguard-notebook-row[data-path]`, `.jp-costguard-kernel-row[data-kernel-id]`,
 * cells `td[data-key]`, `.jp-costguard-sparkline`, `.jp-costguard-kernel-interrupt`,
 * `.jp-costguard-kernel-shutdown`, `.jp-costguard-price-tried` (the `<details>`
 * listing how the price was decided), `dd.jp-costguard-warn` (a stale price),
 * `.jp-costguard-detail-note` (a row's second line); under JupyterHub with
 * budgets, `.jp-costguard-hub-budgets-section` (`hidden` without budgets) with
 * one `.jp-costguard-hub-budget[data-scope][data-name][data-period]` per
 * budget (`data-costguard-level` `ok`/`warning`/`critical`, classes
 * `.jp-costguard-hub-budget-warning` from 80% used and
 * `.jp-costguard-hub-budget-critical` once spent), its
 * `.jp-costguard-hub-budget-bar` (`role="progressbar"`) and its
 * `-who`, `-period`, `-used`, `-remaining`, `-reset`, `-note` parts (the bar
 * and `-used` hidden for a group budget known only by what is left of it).
 */
import type { IGpuDoc, IHubBudget, IKernelDoc, INotebookDoc } from './api';
import { notebookSeverity } from './alerts';
import { budgetBarFraction, budgetLevel, hasBudgetBar, isBudgetSpent } from './budgets';
import {
  BUDGET_SPENT_TEXT,
  formatBudgetLine,
  formatBudgetPeriod,
  formatBudgetRemaining,
  formatBudgetReset,
  formatBudgetUsed,
  formatBudgetWho,
  formatBytes,
  formatContainerShare,
  formatDuration,
  formatMarket,
  formatMoney,
  formatPercent,
  formatPriceDate,
  formatPriceSource,
  formatRate,
  formatRegion,
  formatStale,
  formatTime,
  formatUtcDate
} from './format';
import {
  CostPanelModel,
  IColumn,
  KERNEL_COLUMNS,
  NOTEBOOK_COLUMNS,
  PanelTable,
  rowDetail
} from './costpanelmodel';
import { el, setAttr, setText, syncRows } from './dom';
import { priceOf } from './price';
import { SidePanel } from './sidepanel';
import { sparklinePath, spendRates } from './sparkline';

/** DOM id of the panel. */
export const PANEL_ID = 'jp-costguard-panel';

/** DOM id of the panel's "simulated" pill (the status bar's is `jp-costguard-simulated`). */
export const PANEL_SIMULATED_ID = 'jp-costguard-panel-simulated';

/** Sparkline size, in CSS pixels. */
export const SPARKLINE_WIDTH = 80;
export const SPARKLINE_HEIGHT = 18;

/** Kernel actions the panel offers. */
export type KernelAction = 'shutdown' | 'interrupt';

export namespace CostPanel {
  export interface IOptions {
    model: CostPanelModel;
    /** Run a kernel action (the plugin confirms and calls the REST API). */
    onKernelAction?: (action: KernelAction, kernel: IKernelDoc) => void;
    /** Open a notebook (the plugin asks the document manager). */
    onOpenNotebook?: (path: string) => void;
    /**
     * Sections other plugins' widgets render (e.g. the spend chart), placed
     * after Totals; each is told when the panel is shown or hidden.
     */
    sections?: ReadonlyArray<IPanelSection>;
  }

  /** A section the panel hosts but does not render. */
  export interface IPanelSection {
    readonly node: HTMLElement;
    /** Called when the panel is shown (true) or hidden (false). */
    setShown?(shown: boolean): void;
  }
}

const SVG_NS = 'http://www.w3.org/2000/svg';

/** What a details row may carry besides its text. */
interface IDetailExtra {
  /** Warning style (`jp-costguard-warn`), e.g. an out-of-date price. */
  warn?: boolean;
  /** A second line (`.jp-costguard-detail-note`), e.g. the region note. */
  note?: string | null;
}

/** A row of a details list: field, label, text, link, extras. */
type DetailItem = [string, string, string, string?, IDetailExtra?];

/**
 * Class of the columns a narrow panel hides (`IColumn.secondary`): their
 * figures move to the row's detail line (`.jp-costguard-row-detail`), shown
 * only then (style/panel.css, a container query on the panel's width).
 */
const SECONDARY = 'jp-costguard-col-secondary';
const ROW_DETAIL = 'jp-costguard-row-detail';

/** GPU table columns a narrow panel hides (the model is in the row's tooltip). */
const GPU_SECONDARY = new Set(['name']);

function cellClass(column: { numeric: boolean; secondary?: boolean }, text: string): string {
  return `${column.numeric ? 'jp-costguard-num' : text}${
    column.secondary ? ` ${SECONDARY}` : ''
  }`.trim();
}

/** A button with its word, and a symbol for a narrow panel (the word in its tooltip). */
function button(className: string, word: string, symbol: string): HTMLButtonElement {
  const b = el('button', className);
  b.type = 'button';
  b.appendChild(el('span', 'jp-costguard-button-word', word));
  const short = el('span', 'jp-costguard-button-symbol', symbol);
  setAttr(short, 'aria-hidden', 'true');
  b.appendChild(short);
  return b;
}

/**
 * Fill a row's detail line (in `cell`) from its secondary cells, and give the
 * row the same text as a tooltip: what a narrow panel does not show in columns.
 */
function setDetail<T>(
  tr: HTMLElement,
  cell: Element,
  columns: ReadonlyArray<IColumn<T>>,
  name: string
): void {
  const text = (key: string): string =>
    tr.querySelector(`:scope > td[data-key="${key}"]`)?.textContent ?? '';
  const detail = rowDetail(columns, text);
  setText(cell.querySelector(`.${ROW_DETAIL}`)!, detail);
  setAttr(tr, 'title', `${name}: ${detail}`);
}

function shortId(id: string): string {
  return id.length > 8 ? id.slice(0, 8) : id;
}

/**
 * The cost panel widget.
 */
export class CostPanel extends SidePanel<CostPanelModel> {
  constructor(options: CostPanel.IOptions) {
    super(options.model, ['click', 'keydown']);
    this._onKernelAction = options.onKernelAction;
    this._onOpenNotebook = options.onOpenNotebook;
    this._extraSections = options.sections ?? [];
    this.id = PANEL_ID;
    this.addClass('jp-costguard-panel');
    this.title.caption = 'Costguard: GPU spend';
    this._build();
    this.render();
  }

  handleEvent(event: Event): void {
    if (event.type === 'click') {
      this._onClick(event as MouseEvent);
    } else if (event.type === 'keydown') {
      const key = (event as KeyboardEvent).key;
      const target = event.target as HTMLElement;
      if ((key === 'Enter' || key === ' ') && target.closest('.jp-costguard-sort')) {
        event.preventDefault();
        this._onClick(event as unknown as MouseEvent);
      }
    }
  }

  /** Polls `kernels` and `gpus` only while shown. */
  protected setShown(shown: boolean): void {
    this.model.active = shown;
    for (const section of this._extraSections) {
      section.setShown?.(shown);
    }
  }

  private _onClick(event: MouseEvent): void {
    const target = event.target as HTMLElement | null;
    if (!target) {
      return;
    }
    const sort = target.closest<HTMLElement>('.jp-costguard-sort');
    if (sort && this.node.contains(sort)) {
      const table = sort.dataset.table as PanelTable;
      const key = sort.dataset.key;
      if (key && (table === 'notebooks' || table === 'kernels')) {
        this.model.sortBy(table, key);
      }
      return;
    }
    const button = target.closest<HTMLElement>('[data-action]');
    if (button && this.node.contains(button)) {
      const action = button.dataset.action;
      if (action === 'shutdown' || action === 'interrupt') {
        const row = button.closest<HTMLElement>('.jp-costguard-kernel-row');
        const id = row?.dataset.kernelId;
        const kernel = this.model.kernels.find(k => k.kernel_id === id);
        if (kernel && this._onKernelAction) {
          this._onKernelAction(action, kernel);
        }
      } else if (action === 'open-notebook') {
        const row = button.closest<HTMLElement>('.jp-costguard-notebook-row');
        const path = row?.dataset.path;
        if (path && this._onOpenNotebook) {
          event.preventDefault();
          this._onOpenNotebook(path);
        }
      }
    }
  }

  // ---- construction -------------------------------------------------------

  private _build(): void {
    const node = this.node;
    const header = el('div', 'jp-costguard-panel-header');
    header.appendChild(el('h2', 'jp-costguard-panel-title', 'Costguard'));
    this._owner = el('span', 'jp-costguard-owner');
    this._owner.title = 'JupyterHub user (server)';
    this._owner.hidden = true;
    header.appendChild(this._owner);
    this._simulated = el('span', 'jp-costguard-simulated', 'simulated');
    this._simulated.id = PANEL_SIMULATED_ID;
    this._simulated.title = 'Numbers come from a replayed trace, not this machine';
    header.appendChild(this._simulated);
    this._stateNode = el('span', 'jp-costguard-panel-state');
    header.appendChild(this._stateNode);
    node.appendChild(header);

    const body = el('div', 'jp-costguard-panel-body');
    node.appendChild(body);

    this._budgetSection = this._section('Budget', 'jp-costguard-hub-budgets-section');
    this._budgetSection.title =
      "Your JupyterHub budgets, with this server's spend since it started " +
      "(other servers' later spend is on the hub's page); periods are in UTC";
    this._budgetSection.hidden = true;
    this._budgetList = el('div', 'jp-costguard-hub-budgets');
    this._budgetSection.appendChild(this._budgetList);
    body.appendChild(this._budgetSection);

    body.appendChild(this._section('Instance', 'jp-costguard-instance-section'));
    this._instance = el('dl', 'jp-costguard-details jp-costguard-instance-details');
    body.lastElementChild!.appendChild(this._instance);
    this._tried = el('details', 'jp-costguard-price-tried');
    this._tried.appendChild(
      el('summary', 'jp-costguard-price-tried-summary', 'How the price was decided')
    );
    this._triedList = el('ol', 'jp-costguard-price-tried-list');
    this._tried.appendChild(this._triedList);
    this._tried.hidden = true;
    body.lastElementChild!.appendChild(this._tried);

    body.appendChild(this._section('Totals', 'jp-costguard-totals-section'));
    this._totals = el('dl', 'jp-costguard-details jp-costguard-totals');
    body.lastElementChild!.appendChild(this._totals);

    for (const section of this._extraSections) {
      body.appendChild(section.node);
    }

    body.appendChild(this._section('GPUs', 'jp-costguard-gpus-section'));
    this._gpuTable = this._table('jp-costguard-gpus', [
      ['index', '#', true],
      ['name', 'GPU', false],
      ['utilization', 'Util', true],
      ['memory', 'Memory', true],
      ['power', 'Power', true]
    ]);
    body.lastElementChild!.appendChild(this._wrap(this._gpuTable));

    const nbSection = this._section('Notebooks', 'jp-costguard-notebooks-section');
    this._notebookCount = nbSection.querySelector('h3')!;
    body.appendChild(nbSection);
    this._notebookTable = this._sortableTable('notebooks', NOTEBOOK_COLUMNS, [
      ['Spend rate, last 30 min', true]
    ]);
    nbSection.appendChild(this._wrap(this._notebookTable));

    const kSection = this._section('Kernels', 'jp-costguard-kernels-section');
    this._kernelCount = kSection.querySelector('h3')!;
    body.appendChild(kSection);
    this._kernelTable = this._sortableTable('kernels', KERNEL_COLUMNS, [
      ['Actions', false]
    ]);
    kSection.appendChild(this._wrap(this._kernelTable));
  }

  private _section(title: string, className: string): HTMLElement {
    const section = el('section', `jp-costguard-section ${className}`);
    section.appendChild(el('h3', 'jp-costguard-section-title', title));
    return section;
  }

  private _wrap(table: HTMLTableElement): HTMLElement {
    const wrap = el('div', 'jp-costguard-table-wrap');
    wrap.appendChild(table);
    return wrap;
  }

  private _table(
    className: string,
    columns: [string, string, boolean][]
  ): HTMLTableElement {
    const table = el('table', `jp-costguard-table ${className}`);
    const head = table.createTHead().insertRow();
    for (const [key, label, numeric] of columns) {
      const th = el(
        'th',
        `${numeric ? 'jp-costguard-num' : ''}${GPU_SECONDARY.has(key) ? ` ${SECONDARY}` : ''}`,
        label
      );
      th.dataset.key = key;
      head.appendChild(th);
    }
    table.createTBody();
    return table;
  }

  private _sortableTable<T>(
    table: PanelTable,
    columns: ReadonlyArray<IColumn<T>>,
    extra: [string, boolean][]
  ): HTMLTableElement {
    const node = el('table', `jp-costguard-table jp-costguard-${table}`);
    node.dataset.table = table;
    const head = node.createTHead().insertRow();
    for (const column of columns) {
      const th = el(
        'th',
        `jp-costguard-sort${column.numeric ? ' jp-costguard-num' : ''}${
          column.secondary ? ` ${SECONDARY}` : ''
        }`
      );
      th.dataset.key = column.key;
      th.dataset.table = table;
      th.tabIndex = 0;
      th.title = column.caption
        ? `${column.caption} (click to sort)`
        : `Sort by ${column.label.toLowerCase()}`;
      th.appendChild(el('span', 'jp-costguard-sort-label', column.label));
      th.appendChild(el('span', 'jp-costguard-sort-indicator'));
      head.appendChild(th);
    }
    for (const [label, secondary] of extra) {
      head.appendChild(
        el('th', `jp-costguard-extra${secondary ? ` ${SECONDARY}` : ''}`, label)
      );
    }
    node.createTBody();
    return node;
  }

  // ---- rendering ----------------------------------------------------------

  protected render(): void {
    const model = this.model;
    const data = model.data;
    this._simulated.hidden = !model.simulated;
    const owner = model.owner;
    this._owner.hidden = owner === null;
    setText(this._owner, owner ?? '');
    this.node.dataset.costguardSimulated = model.simulated ? 'true' : 'false';
    let stateText = '';
    if (data.state === 'offline') {
      stateText = 'costguard: offline';
    } else if (data.state === 'loading') {
      stateText = 'loading…';
    }
    setText(this._stateNode, stateText);
    this.node.dataset.costguardState = data.state;
    this._renderBudgets();
    this._renderInstance();
    this._renderTotals();
    this._renderGpus();
    this._renderSortHeaders(this._notebookTable, 'notebooks');
    this._renderSortHeaders(this._kernelTable, 'kernels');
    this._renderNotebooks();
    this._renderKernels();
  }

  private _details(dl: HTMLElement, items: DetailItem[]): void {
    // items: [field, label, text, href?, extra?]
    const fields = items.map(i => i[0]).join(',');
    if (dl.dataset.fields !== fields) {
      dl.textContent = '';
      for (const [field, label] of items) {
        const dt = el('dt', '', label);
        dt.dataset.field = field;
        const dd = el('dd');
        dd.dataset.field = field;
        dl.appendChild(dt);
        dl.appendChild(dd);
      }
      dl.dataset.fields = fields;
    }
    for (const [field, , text, href, extra] of items) {
      const dd = dl.querySelector<HTMLElement>(`dd[data-field="${field}"]`)!;
      const note = extra?.note || null;
      if (note) {
        let main = dd.querySelector('.jp-costguard-detail-text');
        let second = dd.querySelector('.jp-costguard-detail-note');
        if (!main || !second) {
          dd.textContent = '';
          main = el('span', 'jp-costguard-detail-text');
          second = el('span', 'jp-costguard-detail-note');
          dd.appendChild(main);
          dd.appendChild(second);
        }
        setText(main, text);
        setText(second, note);
      } else if (href) {
        let a = dd.querySelector('a');
        if (!a) {
          dd.textContent = '';
          a = el('a');
          a.target = '_blank';
          a.rel = 'noopener noreferrer';
          dd.appendChild(a);
        }
        setAttr(a, 'href', href);
        setText(a, text);
      } else {
        if (dd.querySelector('.jp-costguard-detail-note')) {
          dd.textContent = '';
        }
        setText(dd, text);
      }
      dd.classList.toggle('jp-costguard-warn', extra?.warn === true);
      setAttr(dd, 'title', note ? `${text}\n${note}` : text);
    }
  }

  /** The JupyterHub budgets: one row each, the section only when there are any. */
  private _renderBudgets(): void {
    const budgets = this.model.hubBudgets;
    const currency = this.model.currency;
    this._budgetSection.hidden = budgets.length === 0;
    this._budgetRows = syncRows<IHubBudget, HTMLElement>(
      this._budgetList,
      this._budgetRows,
      budgets,
      b => `${b.scope}\u0000${b.name}\u0000${b.period}`,
      () => {
        const row = el('div', 'jp-costguard-hub-budget');
        const head = el('div', 'jp-costguard-hub-budget-head');
        head.appendChild(el('span', 'jp-costguard-hub-budget-who'));
        head.appendChild(el('span', 'jp-costguard-hub-budget-period'));
        head.appendChild(el('span', 'jp-costguard-hub-budget-used'));
        row.appendChild(head);
        const bar = el('div', 'jp-costguard-hub-budget-bar');
        bar.setAttribute('role', 'progressbar');
        bar.setAttribute('aria-valuemin', '0');
        bar.setAttribute('aria-valuemax', '100');
        bar.appendChild(el('div', 'jp-costguard-hub-budget-fill'));
        row.appendChild(bar);
        const figures = el('div', 'jp-costguard-hub-budget-figures');
        figures.appendChild(el('span', 'jp-costguard-hub-budget-remaining'));
        figures.appendChild(el('span', 'jp-costguard-hub-budget-reset'));
        row.appendChild(figures);
        const note = el('div', 'jp-costguard-hub-budget-note', BUDGET_SPENT_TEXT);
        note.hidden = true;
        row.appendChild(note);
        return row;
      },
      (row, b) => {
        const level = budgetLevel(b);
        row.dataset.scope = b.scope;
        row.dataset.name = b.name;
        row.dataset.period = b.period;
        row.dataset.costguardLevel = level;
        row.classList.toggle('jp-costguard-hub-budget-warning', level === 'warning');
        row.classList.toggle('jp-costguard-hub-budget-critical', level === 'critical');
        const who = formatBudgetWho(b);
        const period = formatBudgetPeriod(b.period);
        const used = formatBudgetUsed(b);
        // a budget known only by what is left of it has no share used, so no bar
        const withBar = hasBudgetBar(b);
        setText(row.querySelector('.jp-costguard-hub-budget-who')!, who);
        setText(row.querySelector('.jp-costguard-hub-budget-period')!, period);
        const usedPart = row.querySelector<HTMLElement>('.jp-costguard-hub-budget-used')!;
        setText(usedPart, withBar ? `${used} used` : '');
        usedPart.hidden = !withBar;
        const percent = Math.round(budgetBarFraction(b) * 1000) / 10;
        const bar = row.querySelector<HTMLElement>('.jp-costguard-hub-budget-bar')!;
        bar.hidden = !withBar;
        setAttr(bar, 'aria-valuenow', String(percent));
        setAttr(bar, 'aria-label', `${who}, ${period}: ${used} of the budget used`);
        const fill = row.querySelector<HTMLElement>('.jp-costguard-hub-budget-fill')!;
        if (fill.style.width !== `${percent}%`) {
          fill.style.width = `${percent}%`;
        }
        setText(
          row.querySelector('.jp-costguard-hub-budget-remaining')!,
          formatBudgetRemaining(b, currency)
        );
        setText(
          row.querySelector('.jp-costguard-hub-budget-reset')!,
          formatBudgetReset(b) ?? ''
        );
        const note = row.querySelector<HTMLElement>('.jp-costguard-hub-budget-note')!;
        note.hidden = !isBudgetSpent(b);
        const since = Number.isFinite(b.period_start)
          ? ` since ${formatUtcDate(b.period_start)}`
          : '';
        const spentLine =
          b.spent === null
            ? ''
            : `\nSpent ${formatMoney(b.spent, currency)} (${used})${since}`;
        setAttr(
          row,
          'title',
          `${formatBudgetLine(b, currency)}${spentLine}${
            isBudgetSpent(b) ? `\n${BUDGET_SPENT_TEXT}` : ''
          }`
        );
      }
    );
  }

  private _renderInstance(): void {
    const status = this.model.status;
    const currency = this.model.currency;
    if (!status) {
      this._details(this._instance, [['instance-type', 'Type', '–']]);
      this._renderTried([]);
      return;
    }
    const i = status.instance;
    const price = priceOf(status);
    const items: DetailItem[] = [];
    const owner = this.model.owner;
    if (owner) {
      items.push(['owner', 'Owner', owner]);
    }
    items.push(['instance-type', 'Type', i?.instance_type ? String(i.instance_type) : 'unknown']);
    items.push(['provider', 'Provider', i?.provider ? String(i.provider) : '–']);
    let gpus = 'none';
    if (i && typeof i.gpu_count === 'number' && i.gpu_count > 0) {
      const memory =
        typeof i.gpu_memory_gib === 'number' ? ` (${i.gpu_memory_gib} GiB)` : '';
      gpus = `${i.gpu_count} × ${i.gpu_model ?? 'GPU'}${memory}`;
    } else if (typeof status.gpu_count === 'number' && status.gpu_count > 0) {
      gpus = `${status.gpu_count} visible`;
    }
    items.push(['gpus', 'GPUs', gpus]);
    if (i && (i.vcpus || i.memory_gib)) {
      items.push(['host', 'Host', `${i.vcpus ?? '?'} vCPU, ${i.memory_gib ?? '?'} GiB RAM`]);
    }
    items.push([
      'rate',
      'Rate',
      typeof status.rate_per_hour === 'number'
        ? formatRate(status.rate_per_hour, currency)
        : 'unpriced'
    ]);
    items.push([
      'market',
      'Market',
      price ? formatMarket(price) : status.market ? String(status.market) : '–'
    ]);
    items.push(['price-source', 'Price source', formatPriceSource(status.price_source)]);
    items.push(['price-detail', 'Price detail', status.price_detail ? String(status.price_detail) : '–']);
    if (price) {
      items.push([
        'price-date',
        'Price date',
        formatPriceDate(price) ?? 'unknown',
        undefined,
        { warn: price.stale, note: formatStale(price) }
      ]);
      items.push([
        'region',
        'Region',
        formatRegion(price) ?? 'unknown',
        undefined,
        { note: price.region_note }
      ]);
      const share = formatContainerShare(price, currency);
      if (share) {
        items.push([
          'share',
          'Container share',
          share,
          undefined,
          { note: price.share?.detail }
        ]);
      }
    }
    const retrieved = i?.retrieved ? String(i.retrieved) : '–';
    const url =
      i?.source_url && /^https?:\/\//i.test(String(i.source_url))
        ? String(i.source_url)
        : undefined;
    items.push(['retrieved', 'Catalog retrieved', retrieved, url]);
    if (status.gpu_status && status.gpu_status !== 'ok') {
      items.push([
        'gpu-telemetry',
        'GPU telemetry',
        `${status.gpu_status}${status.gpu_detail ? ` (${status.gpu_detail})` : ''}`
      ]);
    }
    this._details(this._instance, items);
    this._renderTried(price?.tried ?? []);
  }

  /** The `<details>` list of how the server decided on the price. */
  private _renderTried(steps: ReadonlyArray<string>): void {
    this._tried.hidden = steps.length === 0;
    const list = this._triedList;
    while (list.children.length > steps.length) {
      list.lastElementChild!.remove();
    }
    steps.forEach((step, index) => {
      const li = list.children[index] ?? list.appendChild(el('li'));
      setText(li, step);
    });
  }

  private _renderTotals(): void {
    const status = this.model.status;
    const currency = this.model.currency;
    const t = status?.totals;
    const money = (v: unknown): string =>
      typeof v === 'number' ? formatMoney(v, currency) : '–';
    const items: [string, string, string][] = [
      ['spend', 'Spend', money(t?.spend)],
      ['waste', 'Waste', money(t?.waste)],
      ['unattributed', 'Unattributed', money(t?.unattributed)],
      [
        'since',
        'Since',
        typeof t?.since === 'number' ? formatTime(t.since) : '–'
      ]
    ];
    this._details(this._totals, items);
  }

  private _renderGpus(): void {
    const body = this._gpuTable.tBodies[0];
    const list = this.model.gpus;
    const gpus = list?.gpus ?? [];
    if (gpus.length === 0) {
      this._gpuRows = syncRows(body, this._gpuRows, [], () => '', () => el('tr'), () => undefined);
      const text =
        this.model.state === 'ok'
          ? list?.detail
            ? `No GPU (${list.status}: ${list.detail})`
            : 'No GPU visible'
          : this.model.state === 'offline'
            ? 'costguard: offline'
            : 'Loading…';
      this._emptyRow(body, 5, text);
      return;
    }
    this._gpuRows = syncRows<IGpuDoc>(
      body,
      this._gpuRows,
      gpus,
      g => g.uuid || String(g.index),
      g => {
        const tr = el('tr', 'jp-costguard-gpu-row');
        for (const key of ['index', 'name', 'utilization', 'memory', 'power']) {
          const td = el(
            'td',
            `${key === 'name' ? '' : 'jp-costguard-num'}${
              GPU_SECONDARY.has(key) ? ` ${SECONDARY}` : ''
            }`
          );
          td.dataset.key = key;
          tr.appendChild(td);
        }
        return tr;
      },
      (tr, g) => {
        tr.dataset.gpuUuid = g.uuid;
        tr.dataset.gpuIndex = String(g.index);
        tr.classList.toggle('jp-costguard-faulty', !!g.faulty);
        tr.title = `GPU ${g.index}: ${g.name}${g.faulty ? ` (${g.faulty})` : ''}`;
        const cells = tr.children;
        setText(cells[0], String(g.index));
        setText(cells[1], g.name + (g.faulty ? ` (${g.faulty})` : ''));
        setText(cells[2], formatPercent(g.utilization_percent));
        setText(
          cells[3],
          `${formatBytes(g.memory_used_bytes)} / ${formatBytes(g.memory_total_bytes)}`
        );
        setText(
          cells[4],
          typeof g.power_watts === 'number' ? `${Math.round(g.power_watts)} W` : '–'
        );
      }
    );
  }

  private _emptyRow(body: HTMLTableSectionElement, span: number, text: string): void {
    let tr = body.querySelector<HTMLTableRowElement>('.jp-costguard-empty');
    if (!tr) {
      tr = el('tr', 'jp-costguard-empty');
      const td = el('td');
      td.colSpan = span;
      tr.appendChild(td);
      body.appendChild(tr);
    }
    setText(tr.firstElementChild!, text);
  }

  private _renderSortHeaders(table: HTMLTableElement, name: PanelTable): void {
    const state = this.model.sortState(name);
    table.querySelectorAll<HTMLElement>('.jp-costguard-sort').forEach(th => {
      const sorted = th.dataset.key === state.key;
      setAttr(th, 'aria-sort', sorted ? state.direction : 'none');
      th.classList.toggle('jp-mod-sorted', sorted);
      setText(
        th.querySelector('.jp-costguard-sort-indicator')!,
        sorted ? (state.direction === 'ascending' ? '▲' : '▼') : ''
      );
    });
  }

  private _renderNotebooks(): void {
    const model = this.model;
    const data = model.data;
    const body = this._notebookTable.tBodies[0];
    const rows = model.notebookRows;
    setText(this._notebookCount, `Notebooks (${rows.length})`);
    const currency = model.currency;
    const end =
      typeof model.status?.time === 'number' ? (model.status.time as number) : null;
    const alertsKnown = data.alertsState === 'ok';
    const columns = NOTEBOOK_COLUMNS.length + 1;
    this._notebookRows = syncRows<INotebookDoc>(
      body,
      this._notebookRows,
      rows,
      n => n.path,
      () => {
        const tr = el('tr', 'jp-costguard-notebook-row');
        for (const column of NOTEBOOK_COLUMNS) {
          const td = el('td', cellClass(column, 'jp-costguard-path'));
          td.dataset.key = column.key;
          if (column.key === 'path') {
            const a = el('a', 'jp-costguard-open-notebook');
            a.dataset.action = 'open-notebook';
            a.href = '#';
            td.appendChild(a);
            td.appendChild(el('div', ROW_DETAIL));
          }
          tr.appendChild(td);
        }
        const td = el('td', `jp-costguard-trend ${SECONDARY}`);
        td.dataset.key = 'trend';
        const svg = document.createElementNS(SVG_NS, 'svg');
        svg.setAttribute('class', 'jp-costguard-sparkline');
        svg.setAttribute('width', String(SPARKLINE_WIDTH));
        svg.setAttribute('height', String(SPARKLINE_HEIGHT));
        svg.setAttribute('viewBox', `0 0 ${SPARKLINE_WIDTH} ${SPARKLINE_HEIGHT}`);
        svg.setAttribute('preserveAspectRatio', 'none');
        svg.setAttribute('role', 'img');
        const title = document.createElementNS(SVG_NS, 'title');
        svg.appendChild(title);
        const path = document.createElementNS(SVG_NS, 'path');
        path.setAttribute('class', 'jp-costguard-sparkline-line');
        svg.appendChild(path);
        td.appendChild(svg);
        tr.appendChild(td);
        return tr;
      },
      (tr, n) => {
        tr.dataset.path = n.path;
        const severity = notebookSeverity(data.alerts, n.path, n, alertsKnown);
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
          typeof n.spend_rate_per_hour === 'number'
            ? formatRate(n.spend_rate_per_hour, currency)
            : '–'
        );
        setText(cells[4], formatPercent(n.gpu_utilization_percent));
        setText(cells[5], formatBytes(n.gpu_memory_bytes));
        setText(cells[6], formatDuration(n.idle_seconds));
        setDetail(tr, cells[0], NOTEBOOK_COLUMNS, n.path);
        const rates = spendRates(n.history, { end });
        const values = rates.map(r => r.rate);
        const svg = cells[7].firstElementChild as SVGElement;
        setAttr(
          svg.querySelector('path')!,
          'd',
          sparklinePath(values, SPARKLINE_WIDTH, SPARKLINE_HEIGHT)
        );
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
    );
    if (rows.length === 0) {
      this._emptyRow(
        body,
        columns,
        data.state === 'ok'
          ? 'No notebook has spent anything yet.'
          : data.state === 'offline'
            ? 'costguard: offline'
            : 'Loading…'
      );
    }
    const highlight = model.highlightPath;
    if (highlight && highlight !== this._scrolledTo) {
      const row = this._notebookRows.get(highlight);
      if (row) {
        this._scrolledTo = highlight;
        row.scrollIntoView?.({ block: 'nearest' });
      }
    }
  }

  private _renderKernels(): void {
    const model = this.model;
    const body = this._kernelTable.tBodies[0];
    const rows = model.kernelRows;
    setText(this._kernelCount, `Kernels (${rows.length})`);
    const currency = model.currency;
    const columns = KERNEL_COLUMNS.length + 1;
    this._kernelRows = syncRows<IKernelDoc>(
      body,
      this._kernelRows,
      rows,
      k => k.kernel_id,
      () => {
        const tr = el('tr', 'jp-costguard-kernel-row');
        for (const column of KERNEL_COLUMNS) {
          const td = el('td', cellClass(column, ''));
          td.dataset.key = column.key;
          if (column.key === 'notebook') {
            td.appendChild(el('span', 'jp-costguard-kernel-notebook'));
            td.appendChild(el('div', ROW_DETAIL));
          }
          tr.appendChild(td);
        }
        const td = el('td', 'jp-costguard-actions');
        td.dataset.key = 'actions';
        const interrupt = button(
          'jp-costguard-button jp-costguard-kernel-interrupt',
          'Interrupt',
          '■'
        );
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
        tr.appendChild(td);
        return tr;
      },
      (tr, k) => {
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
        setText(cells[6], formatPercent(k.gpu_utilization_percent));
        setText(cells[7], formatBytes(k.gpu_memory_bytes));
        setText(cells[8], formatDuration(k.idle_seconds));
        setDetail(tr, cells[1], KERNEL_COLUMNS, k.notebook ?? k.name);
        const label = `${k.name} ${shortId(k.kernel_id)}${
          k.notebook ? ` (${k.notebook})` : ''
        }`;
        const buttons = cells[9].children;
        for (const [b, verb] of [[buttons[0], 'Interrupt'], [buttons[1], 'Shut down']] as const) {
          (b as HTMLElement).title = `${verb} kernel ${label}`;
          setAttr(b, 'aria-label', `${verb} kernel ${label}`);
        }
      }
    );
    if (rows.length === 0) {
      this._emptyRow(
        body,
        columns,
        model.state === 'ok'
          ? 'No running kernels.'
          : model.state === 'offline'
            ? 'costguard: offline'
            : 'Loading…'
      );
    }
  }

  private _budgetList!: HTMLElement;
  private _budgetRows = new Map<string, HTMLElement>();
  private _budgetSection!: HTMLElement;
  private _extraSections: ReadonlyArray<CostPanel.IPanelSection>;
  private _gpuRows = new Map<string, HTMLTableRowElement>();
  private _gpuTable!: HTMLTableElement;
  private _instance!: HTMLElement;
  private _kernelCount!: HTMLElement;
  private _kernelRows = new Map<string, HTMLTableRowElement>();
  private _kernelTable!: HTMLTableElement;
  private _notebookCount!: HTMLElement;
  private _notebookRows = new Map<string, HTMLTableRowElement>();
  private _notebookTable!: HTMLTableElement;
  private _onKernelAction?: (action: KernelAction, kernel: IKernelDoc) => void;
  private _onOpenNotebook?: (path: string) => void;
  private _owner!: HTMLElement;
  private _scrolledTo: string | null = null;
  private _simulated!: HTMLElement;
  private _stateNode!: HTMLElement;
  private _totals!: HTMLElement;
  private _tried!: HTMLDetailsElement;
  private _triedList!: HTMLOListElement;
}
