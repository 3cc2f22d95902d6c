/**
 * The pieces both pages draw: money, budget bars, state pills, the header
 * figures, the note under a table.
 */
import { add, el } from './dom';
import type { Child } from './dom';
import { GPUS_PAID_TITLE, countedNote, kpiFigures } from './model';
import { ago, fix2, moneyText, pct, plural, utc } from './text';
import type { Budget, Me, Poll, Row } from './types';

/** `USD 12.34` with the code muted. */
export function money(v: number | null | undefined, currency: string): HTMLElement {
  return el(
    'span',
    { cls: 'money' },
    currency ? el('span', { cls: 'cur', text: currency }) : null,
    currency ? ' ' : '',
    fix2(v)
  );
}

/** A budget's bar: green, amber from 80%, red from 100%. */
export function budgetBar(b: Pick<Budget, 'used'>, wide = false): HTMLElement {
  const used = b.used || 0;
  const cls = 'bar' + (used >= 1 ? ' over' : used >= 0.8 ? ' mid' : '');
  const bar = el(
    'span',
    {
      cls,
      role: 'progressbar',
      'aria-valuemin': '0',
      'aria-valuemax': '100',
      'aria-valuenow': String(Math.round(used * 100))
    },
    el('i', { style: `width:${Math.min(100, used * 100).toFixed(1)}%` })
  );
  if (wide) {
    bar.style.width = '100%';
  }
  return bar;
}

/** A server's state as a pill, its reason as the tooltip. */
export function stateCell(r: Pick<Row, 'state' | 'detail'>): HTMLElement {
  const s = r.state || 'ok';
  return el(
    'td',
    { cls: 'state' },
    el('span', { cls: `pill ${s}`, text: s, title: r.detail || (s === 'ok' ? 'reporting' : null) })
  );
}

/** Both rates, where the meter prices the server. */
export function rateTitle(r: Row, currency: string): string | null {
  if (!(r.metered_rate_per_hour > 0)) {
    return null;
  }
  const c = r.currency || currency;
  return (
    `reported ${moneyText(r.reported_rate_per_hour, c)}/h, ` +
    `metered ${moneyText(r.metered_rate_per_hour, c)}/h`
  );
}

function kpi(cls: string, label: string, value: Child, sub: string, title?: string): HTMLElement {
  return el(
    'div',
    { cls: `kpi ${cls}`, title: title || null },
    el('div', { cls: 'label', text: label }),
    el('div', { cls: 'value' }, value),
    el('div', { cls: 'sub' }, sub || '\u00a0')
  );
}

function valueMoney(v: number, currency: string): Child {
  return [currency ? el('span', { cls: 'cur', text: currency }) : null, currency ? ' ' : '', fix2(v)];
}

/** The header figures of `rows` (an admin's users, or a user's totals). */
export function renderKpis(
  box: HTMLElement,
  rows: ReadonlyArray<Row>,
  label: string,
  admin: boolean,
  currency: string
): void {
  const f = kpiFigures(rows);
  box.textContent = '';
  add(box, [
    kpi('spend', admin ? 'Hub spend' : 'Your spend', valueMoney(f.spend, currency), label),
    kpi(
      'waste',
      'Waste',
      valueMoney(f.waste, currency),
      f.spend > 0 ? `${pct(f.waste / f.spend)} of spend on idle GPUs` : 'idle GPUs held'
    ),
    // what the servers say their hibernations saved: their figure, not the hub's meter
    kpi(
      'removed',
      'Waste removed',
      valueMoney(f.removed, currency),
      'reported by the servers',
      'Hibernated GPU-hours \u00d7 the rate each kernel held, over the servers\u2019 kept ' +
        'snapshots (at most 12 h a snapshot), as each server\u2019s last report said. Not ' +
        'checked against the meter; nothing is decided by it.'
    ),
    kpi(
      'rate',
      'Rate now',
      [valueMoney(f.rate, currency), el('span', { cls: 'cur', text: ' /h' })],
      `${plural(f.running, 'server')} running`
    ),
    kpi(
      'gpus',
      'GPUs paid for',
      String(f.paid),
      `${f.held} held by kernels · ${f.busy} busy`,
      GPUS_PAID_TITLE
    ),
    kpi(
      'stale' + (f.stale ? ' has' : ''),
      'Servers stale',
      String(f.stale),
      f.stale ? 'not reporting, or refused: showing last figures' : 'every server reporting'
    )
  ]);
}

/** An admin's line: the service's last look at the Hub. */
export function renderPoll(e: HTMLElement, poll: Poll | null, now: number): void {
  if (!poll) {
    e.textContent = 'waiting for the first poll…';
    return;
  }
  e.textContent = '';
  const when = utc(poll.time, true);
  add(e, [
    'Last poll ',
    el('b', { text: when.slice(11) }),
    ` · ${ago(now - poll.time)} · ${poll.answered}/${poll.servers} reporting`,
    poll.stale ? el('b', { cls: 'warn', text: ` · ${poll.stale} stale` }) : null
  ]);
  e.title =
    `Last poll ${when}: ${poll.servers} servers running, ${poll.answered} reporting, ` +
    `${poll.stale} not reporting; it took ${poll.seconds} s`;
}

/** A user's line: when their figures are from, and whether a server of theirs runs (the hub's own polls and counts are not a user's business). */
export function renderAsOf(e: HTMLElement, me: Me, now: number): void {
  e.textContent = '';
  const when = utc(me.time, true);
  const servers = me.servers || [];
  const running = servers.filter(r => r.state !== 'stopped').length;
  add(e, [
    'Figures as of ',
    el('b', { text: when.slice(11) }),
    ` · ${ago(now - me.time)} · `,
    running
      ? `${plural(running, 'server')} running`
      : servers.length
        ? 'no server running'
        : 'no server running yet'
  ]);
  e.title = `Figures as of ${when}`;
}

/** The note under a table: what Spend counts; with `withFlags`, how many servers are flagged. */
export function renderCounted(box: HTMLElement, servers: ReadonlyArray<Row>, withFlags: boolean): void {
  const note = countedNote(servers);
  box.textContent = '';
  box.hidden = note === null;
  if (note === null) {
    return;
  }
  add(box, note.text);
  if (withFlags && note.flagged) {
    add(box, [
      ' ',
      el('b', { text: `${plural(note.flagged, 'server')} flagged` }),
      ': reported figures below the meter, or none (the check badge says which).'
    ]);
  }
}
