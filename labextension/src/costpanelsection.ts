/**
 * What the cost panel's own sections share: their base (a `<section>` with
 * its title that renders the CostPanelModel) and the DOM pieces they are
 * built of: details lists, tables with sortable headers, a row's detail line
 * for a narrow panel, the empty-table row and the buttons with a symbol.
 */
import { CostPanelModel, IColumn, PanelTable, rowDetail } from './costpanelmodel';
import { el, setAttr, setText } from './dom';
import type { ISortState } from './sort';

/**
 * Class of the columns a narrow panel hides (`IColumn.secondary`): their
 * figures move to the row's detail line (`.jp-costguard-row-detail`), shown
 * only then (style/panel.css, a container query on the panel's width).
 */
export const SECONDARY = 'jp-costguard-col-secondary';
export const ROW_DETAIL = 'jp-costguard-row-detail';

/**
 * A section of the cost panel (`CostPanel.IPanelSection`): its node, told
 * when the panel is shown or hidden. The panel's own sections
 * (`CostPanelSection`) also render its model; other plugins' sections follow
 * their own models. Declared here, not in `costpanel.ts`, so that the
 * sections import no panel (the panel imports them).
 */
export interface IPanelSection {
  readonly node: HTMLElement;
  /** Called when the panel is shown (true) or hidden (false). */
  setShown?(shown: boolean): void;
}

/**
 * A section of the cost panel that renders the panel's model: an
 * `IPanelSection` the panel builds itself and redraws with each change of
 * the model.
 */
export abstract class CostPanelSection implements IPanelSection {
  constructor(model: CostPanelModel, title: string, className: string) {
    this.model = model;
    this.node = el('section', `jp-costguard-section ${className}`);
    this.heading = el('h3', 'jp-costguard-section-title', title);
    this.node.appendChild(this.heading);
  }

  readonly node: HTMLElement;

  /** Redraw from the model. */
  abstract render(): void;

  protected readonly heading: HTMLElement;
  protected readonly model: CostPanelModel;
}

/** What an empty table says: `ok` its own words, else offline or loading. */
export function emptyText(state: string, ok: string): string {
  return state === 'ok' ? ok : state === 'offline' ? 'costguard: offline' : 'Loading…';
}

/** What a details row may carry besides its text. */
export interface IDetailExtra {
  /** Warning style (`jp-costguard-warn`), e.g. an out-of-date price. */
  warn?: boolean;
  /** A second line (`.jp-costguard-detail-note`), e.g. the region note. */
  note?: string | null;
}

/** A row of a details list: field, label, text, link, extras. */
export type DetailItem = [string, string, string, string?, IDetailExtra?];

/** Write one `dd`: its text, with a second line or as a link when the item says so. */
function renderDetail(dd: HTMLElement, text: string, href?: string, extra?: IDetailExtra): void {
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

/**
 * Fill a details list (`dt`/`dd` pairs with `data-field`), rebuilding it only
 * when the fields change.
 */
export function renderDetails(dl: HTMLElement, items: DetailItem[]): void {
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
    renderDetail(dl.querySelector<HTMLElement>(`dd[data-field="${field}"]`)!, text, href, extra);
  }
}

/** A table in its scrolling wrapper. */
export function tableWrap(table: HTMLTableElement): HTMLElement {
  const wrap = el('div', 'jp-costguard-table-wrap');
  wrap.appendChild(table);
  return wrap;
}

/** A table whose headers sort it (`.jp-costguard-sort[data-table][data-key]`), then `extra` headers. */
export function sortableTable<T>(
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
    head.appendChild(el('th', `jp-costguard-extra${secondary ? ` ${SECONDARY}` : ''}`, label));
  }
  node.createTBody();
  return node;
}

/** Mark the sorted header (`aria-sort`, `jp-mod-sorted`, ▲/▼). */
export function renderSortHeaders(table: HTMLTableElement, state: ISortState): void {
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

/** The row an empty table shows (`.jp-costguard-empty`), spanning `span` columns. */
export function emptyRow(body: HTMLTableSectionElement, span: number, text: string): void {
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

/** Class of a body cell: numeric, else `text`; and secondary when the column is. */
function cellClass(column: { numeric: boolean; secondary?: boolean }, text: string): string {
  return `${column.numeric ? 'jp-costguard-num' : text}${
    column.secondary ? ` ${SECONDARY}` : ''
  }`.trim();
}

/**
 * A body row of `columns`: a `td[data-key]` each (`cellClass` with
 * `textClass`), `fill` adding what a cell holds besides its text.
 */
export function tableRow<T>(
  className: string,
  columns: ReadonlyArray<IColumn<T>>,
  textClass: string,
  fill: (td: HTMLTableCellElement, key: string) => void
): HTMLTableRowElement {
  const tr = el('tr', className);
  for (const column of columns) {
    const td = el('td', cellClass(column, textClass));
    td.dataset.key = column.key;
    fill(td, column.key);
    tr.appendChild(td);
  }
  return tr;
}

/** A button with its word, and a symbol for a narrow panel (the word in its tooltip). */
export function button(className: string, word: string, symbol: string): HTMLButtonElement {
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
export function setDetail<T>(
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
