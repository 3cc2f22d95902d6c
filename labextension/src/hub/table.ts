/**
 * The admin's table of users, groups or servers: sortable headers that say
 * what each column counts, a total line, a filter.
 */
import { add, el } from './dom';
import { IColumn, ISort, columnsFor, gpuCell, shownRows, sum } from './model';
import type { SortKey } from './model';
import { budgetBar, money, rateTitle, stateCell } from './parts';
import { moneyText, pct, plural } from './text';
import type { Budget, By, Row } from './types';

export interface ITableView {
  by: By;
  rows: ReadonlyArray<Row>;
  sort: ISort;
  filter: string;
  currency: string;
  /** a header was clicked */
  onSort: (key: SortKey, numeric: boolean) => void;
}

function budgetCell(b: Budget | null, currency: string): HTMLElement {
  if (!b) {
    return el('td', { cls: 'budget-cell' });
  }
  const used = b.used ?? 0;
  return el(
    'td',
    {
      cls: 'budget-cell',
      title:
        `${b.scope} budget ${moneyText(b.budget, currency)} per ${b.period}: ` +
        `${moneyText(b.spent, currency)} spent, ${moneyText(b.remaining, currency)} left`
    },
    el(
      'span',
      { cls: 'budget' + (used >= 1 ? ' over' : '') },
      budgetBar(b),
      el('span', { cls: 'pct num', text: pct(used) })
    )
  );
}

/** The server's own figures are below its meter: both, in words. */
function flagBadge(r: Row): HTMLElement | null {
  const flags = r.flags || [];
  if (!flags.length) {
    return null;
  }
  return el(
    'span',
    { cls: 'flag', role: 'img', title: flags.join('\n'), 'aria-label': `Check: ${flags.join('; ')}` },
    'check'
  );
}

function rowClass(r: Row): string | null {
  const c = [];
  if (r.state === 'stale' || r.state === 'refused') {
    c.push('is-stale');
  }
  if (r.flags && r.flags.length) {
    c.push('is-flagged');
  }
  return c.length ? c.join(' ') : null;
}

function displayName(r: Row, by: By): Array<string | HTMLElement> | string {
  if (by === 'server') {
    return [
      r.user ?? '',
      el('span', { cls: 'dim', text: r.server ? `/${r.server}` : 'default server' })
    ];
  }
  return r.key;
}

function headCell(c: IColumn, v: ITableView): HTMLElement {
  const sorted = c.key === v.sort.key;
  const th = el(
    'th',
    {
      cls: c.num ? 'n' : null,
      'data-sort': c.key,
      scope: 'col',
      title: c.title,
      'aria-sort': sorted ? (v.sort.dir > 0 ? 'ascending' : 'descending') : 'none'
    },
    el(
      'button',
      { type: 'button', title: `Sort by ${c.label.toLowerCase()}: ${c.title}` },
      c.label,
      el('span', { cls: 'arrow', text: sorted ? (v.sort.dir > 0 ? '▲' : '▼') : '▲▼' })
    )
  );
  th.addEventListener('click', () => v.onSort(c.key, c.num));
  return th;
}

/** One row: each figure counted over the same servers, the GPUs over the same GPUs. */
export function tableRow(r: Row, v: ITableView): HTMLElement {
  const cur = r.currency || v.currency;
  const gpus = gpuCell(r);
  return el(
    'tr',
    { 'data-key': r.key, cls: rowClass(r) },
    el('td', { cls: 'name' }, displayName(r, v.by), flagBadge(r)),
    el('td', { cls: 'n spend', 'data-value': String(r.spend) }, money(r.spend, cur)),
    el(
      'td',
      { cls: 'n waste', 'data-value': String(r.waste) },
      money(r.waste, cur),
      r.spend > 0 ? el('span', { cls: 'waste-pct', text: pct(r.waste / r.spend) }) : null
    ),
    el('td', { cls: 'n rate', title: rateTitle(r, v.currency) }, money(r.rate_per_hour, cur)),
    el(
      'td',
      { cls: 'n gpus', title: gpus.title, 'data-paid': String(r.gpus_paid), 'data-held': String(r.gpus_held) },
      gpus.value,
      gpus.detail ? el('span', { cls: 'dim', text: gpus.detail }) : null
    ),
    el(
      'td',
      { cls: 'n idle', title: `idle hours of the ${plural(r.gpus_paid, 'GPU')} paid for` },
      (r.idle_gpu_hours || 0).toFixed(2)
    ),
    budgetCell(r.budget, v.currency),
    v.by === 'server' ? stateCell(r) : null
  );
}

function footer(rows: ReadonlyArray<Row>, v: ITableView, width: number): HTMLElement | null {
  if (v.by !== 'group' && rows.length > 1) {
    return el(
      'tfoot',
      null,
      el(
        'tr',
        null,
        el('td', { text: `Total · ${rows.length} ${v.by}s` }),
        el('td', { cls: 'n' }, money(sum(rows, 'spend'), v.currency)),
        el('td', { cls: 'n' }, money(sum(rows, 'waste'), v.currency)),
        el('td', { cls: 'n' }, money(sum(rows, 'rate_per_hour'), v.currency)),
        el(
          'td',
          { cls: 'n' },
          String(sum(rows, 'gpus_paid')),
          el('span', { cls: 'dim', text: ` (${sum(rows, 'gpus_held')} held)` })
        ),
        el('td', { cls: 'n' }, sum(rows, 'idle_gpu_hours').toFixed(2)),
        el('td'),
        v.by === 'server' ? el('td') : null
      )
    );
  }
  if (v.by === 'group' && rows.length) {
    return el(
      'tfoot',
      null,
      el(
        'tr',
        null,
        el('td', {
          colspan: String(width),
          cls: 'note',
          text: 'A user in two groups counts in both, so groups need not add up to the hub.'
        })
      )
    );
  }
  return null;
}

/** Draw the table into `t`. */
export function renderTable(t: HTMLElement, v: ITableView): void {
  const rows = shownRows(v.rows, v.by, v.sort, v.filter);
  const shownSort: ISort = v.by !== 'server' && v.sort.key === 'state' ? { key: 'name', dir: v.sort.dir } : v.sort;
  const cols = columnsFor(v.by);
  const head = el('tr', null, cols.map(c => headCell(c, { ...v, sort: shownSort })));
  const body = el('tbody', null, rows.map(r => tableRow(r, v)));
  if (!rows.length) {
    body.appendChild(
      el(
        'tr',
        { cls: 'cg-empty' },
        el('td', {
          colspan: String(cols.length),
          text: v.rows.length
            ? `No ${v.by}s match “${v.filter}”.`
            : 'Nothing recorded for this period yet.'
        })
      )
    );
  }
  t.textContent = '';
  add(t, [el('thead', null, head), body, footer(rows, v, cols.length)]);
}
