/**
 * A user's page: their servers (each figure over the GPUs the server pays
 * for, as the admin's table counts them) and their budgets.
 */
import { add, el } from './dom';
import { GPUS_PAID_TITLE, gpuCell } from './model';
import { budgetBar, money, rateTitle, renderCounted, stateCell } from './parts';
import { inTime, moneyText, pct, utc } from './text';
import type { Budget, Me, Row } from './types';

const HEADS: ReadonlyArray<[string, string | null]> = [
  ['Server', null],
  ['Spend', null],
  ['Waste', null],
  ['Rate now (/h)', null],
  ['GPUs paid (held)', GPUS_PAID_TITLE],
  ['State', null]
];

function serverRow(r: Row, currency: string): HTMLElement {
  const cur = r.currency || currency;
  const gpus = gpuCell(r);
  return el(
    'tr',
    { 'data-key': r.key, cls: r.state === 'stale' || r.state === 'refused' ? 'is-stale' : null },
    el('td', { cls: 'name' }, r.server ? r.server : 'default server'),
    el('td', { cls: 'n spend' }, money(r.spend, cur)),
    el('td', { cls: 'n waste' }, money(r.waste, cur)),
    el('td', { cls: 'n rate', title: rateTitle(r, currency) }, money(r.rate_per_hour, cur)),
    el('td', { cls: 'n gpus', title: gpus.title }, gpus.value, gpus.detail ? el('span', { cls: 'dim', text: gpus.detail }) : null),
    stateCell(r)
  );
}

/** The table of the user's servers into `wrap`, the note under it into `counted`. */
export function renderServers(wrap: HTMLElement, counted: HTMLElement, me: Me, currency: string): void {
  const rows = me.servers || [];
  const body = el('tbody', null, rows.map(r => serverRow(r, currency)));
  if (!rows.length) {
    body.appendChild(
      el('tr', { cls: 'cg-empty' }, el('td', { colspan: String(HEADS.length), text: 'No server of yours has been seen yet.' }))
    );
  }
  const head = el(
    'tr',
    null,
    HEADS.map(([h, title], i) => el('th', { cls: i > 0 && i < 5 ? 'n' : null, scope: 'col', text: h, title }))
  );
  wrap.textContent = '';
  wrap.appendChild(el('table', { id: 'cg-table' }, el('thead', null, head), body));
  renderCounted(counted, rows, false);
}

/** One budget: what is left, and (where the site shows members all of it) the bar and what was spent. */
export function budgetCard(b: Budget, currency: string, now: number): HTMLElement {
  // a group budget the site shows members only what is left of has no budget, spend or
  // share used (member_group_view): what is left, without a bar
  const full = b.budget !== null && b.used !== null && b.spent !== null;
  const over = full ? (b.used ?? 0) >= 1 : b.remaining <= 0;
  return el(
    'div',
    { cls: 'bcard' + (over ? ' over' : ''), 'data-scope': b.scope, 'data-name': b.name },
    el(
      'div',
      { cls: 'row1' },
      el('span', { cls: 'scope', text: b.scope === 'user' ? 'Your budget' : 'Group' }),
      b.scope === 'group' ? el('span', { cls: 'bname', text: b.name }) : null,
      el(
        'span',
        { cls: 'amount' },
        money(b.remaining, currency),
        el('span', { cls: 'dim', text: full ? ` left of ${moneyText(b.budget, currency)}` : ' left' })
      )
    ),
    full ? budgetBar(b, true) : null,
    el(
      'div',
      { cls: 'row3' },
      el('span', {
        text: full
          ? `${pct(b.used ?? 0)} used · ${moneyText(b.spent, currency)} spent this ${b.period}`
          : `left this ${b.period}`
      }),
      el('span', {
        title: `period ${utc(b.period_start)} to ${utc(b.period_end)}`,
        text: `resets ${utc(b.period_end).slice(0, 16)} UTC (${inTime(b.period_end - now)})`
      })
    )
  );
}

/** The user's budgets into `list`, the period they run by into `period`. */
export function renderBudgets(list: HTMLElement, period: HTMLElement, budgets: ReadonlyArray<Budget>, currency: string, now: number): void {
  list.textContent = '';
  if (!budgets.length) {
    add(list, el('div', { cls: 'none', text: 'No budget applies to you: spend is tracked but not capped.' }));
    return;
  }
  add(list, budgets.map(b => budgetCard(b, currency, now)));
  period.textContent = `per ${budgets[0].period} (UTC)`;
}
