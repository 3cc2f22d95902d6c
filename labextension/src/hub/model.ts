/**
 * What the hub pages show, decided apart from the DOM: periods, sorting and
 * filtering, the header figures, what the GPU columns count, and the chart's
 * range and buckets. Pure: every function here is unit-tested.
 */
import type { IPeriod } from './client';
import type { By, Row, Series, Step } from './types';
import { DAY, HOUR, plural } from './text';

/** The longest chart the service draws, in points (`handlers.MAX_POINTS`). */
export const MAX_POINTS = 9600;

// --- periods (UTC) ---------------------------------------------------------------------

export type PeriodName = 'all' | 'month' | '7d' | '24h' | 'custom';

/** A `yyyy-mm-dd` day's start (UTC), epoch seconds; null when empty or not a day. */
export function parseDay(v: string): number | null {
  if (!v) {
    return null;
  }
  const t = Date.parse(`${v}T00:00:00Z`);
  return Number.isNaN(t) ? null : t / 1000;
}

/** [since, until) of a period at `now` (epoch seconds); custom days are whole UTC days, the until day included. */
export function periodOf(name: PeriodName, now: number, since = '', until = ''): IPeriod {
  const hour = Math.floor(now / HOUR) * HOUR;
  switch (name) {
    case 'month': {
      const d = new Date(now * 1000);
      return { since: Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1) / 1000, until: null };
    }
    case '7d':
      return { since: hour - (7 * 24 - 1) * HOUR, until: null };
    case '24h':
      return { since: hour - 23 * HOUR, until: null };
    case 'custom': {
      const u = parseDay(until);
      return { since: parseDay(since), until: u === null ? null : u + DAY };
    }
    default:
      return { since: null, until: null };
  }
}

// --- the admin table -------------------------------------------------------------------

export type SortKey = 'name' | 'spend' | 'waste' | 'rate' | 'gpus' | 'idle' | 'budget' | 'state';

export interface IColumn {
  key: SortKey;
  label: string;
  num: boolean;
  /** What the column counts, in words (the header's tooltip). */
  title: string;
}

/** What the GPU columns count, said once for the headers and the figures. */
export const GPUS_PAID_TITLE =
  'GPUs the running servers pay for (their instance, or their profile’s share of it); ' +
  'in brackets, how many of them their kernels hold and how many of those are busy';
export const IDLE_HOURS_TITLE =
  'Hours of the GPUs the servers pay for (the column beside) that did no work: held by ' +
  'no kernel, or held and idle';

export const COLUMNS: ReadonlyArray<IColumn> = [
  { key: 'name', label: 'Name', num: false, title: 'Sort by name' },
  { key: 'spend', label: 'Spend', num: true, title: 'What was spent in the period' },
  { key: 'waste', label: 'Waste', num: true, title: 'Spend on GPUs held idle' },
  { key: 'rate', label: 'Rate now (/h)', num: true, title: 'What the running servers cost per hour' },
  { key: 'gpus', label: 'GPUs paid (held)', num: true, title: GPUS_PAID_TITLE },
  { key: 'idle', label: 'Idle GPU hours', num: true, title: IDLE_HOURS_TITLE },
  { key: 'budget', label: 'Budget used', num: false, title: 'Share of the budget spent this period' }
];
const STATE_COLUMN: IColumn = {
  key: 'state',
  label: 'State',
  num: false,
  title: 'Whether the server reports'
};

export function columnsFor(by: By): IColumn[] {
  return by === 'server' ? [...COLUMNS, STATE_COLUMN] : [...COLUMNS];
}

const STATE_ORDER: Record<string, number> = { refused: 0, stale: 0, ok: 1, stopped: 2 };

export function sortValue(r: Row, k: SortKey): string | number {
  switch (k) {
    case 'name':
      return r.key.toLowerCase();
    case 'spend':
      return r.spend;
    case 'waste':
      return r.waste;
    case 'rate':
      return r.rate_per_hour;
    case 'gpus':
      return r.gpus_paid;
    case 'idle':
      return r.idle_gpu_hours;
    case 'budget':
      return r.budget ? (r.budget.used ?? -1) : -1;
    case 'state':
      return STATE_ORDER[r.state ?? ''] ?? 3;
  }
}

export interface ISort {
  key: SortKey;
  /** 1 ascending, -1 descending */
  dir: 1 | -1;
}

/** A click on `key`'s header: the same column flips, another starts largest first (numbers) or A to Z. */
export function nextSort(sort: ISort, key: SortKey, numeric: boolean): ISort {
  if (sort.key === key) {
    return { key, dir: sort.dir === 1 ? -1 : 1 };
  }
  return { key, dir: numeric ? -1 : 1 };
}

/** Whether a row matches the filter (by its key, user, group, server or state). */
export function matches(r: Row, filter: string): boolean {
  if (!filter) {
    return true;
  }
  const f = filter.toLowerCase();
  return [r.key, r.user, r.group, r.server, r.state].some(
    v => v !== null && v !== undefined && String(v).toLowerCase().includes(f)
  );
}

/** The rows shown: filtered, sorted (ties by key); a state sort outside servers sorts by name. */
export function shownRows(rows: ReadonlyArray<Row>, by: By, sort: ISort, filter: string): Row[] {
  const k = by !== 'server' && sort.key === 'state' ? 'name' : sort.key;
  return rows
    .filter(r => matches(r, filter))
    .sort((a, b) => {
      const x = sortValue(a, k);
      const y = sortValue(b, k);
      if (x < y) {
        return -sort.dir;
      }
      if (x > y) {
        return sort.dir;
      }
      return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
    });
}

type NumericField = {
  [K in keyof Row]-?: Row[K] extends number ? K : never;
}[keyof Row];

export function sum(rows: ReadonlyArray<Row>, f: NumericField): number {
  return rows.reduce((a, r) => a + (r[f] || 0), 0);
}

// --- what the GPU columns say ----------------------------------------------------------

/** Where a row's GPU activity comes from, in words. */
export function gpuSource(r: Pick<Row, 'gpu_source'>): string {
  return r.gpu_source === 'node'
    ? "as the node's GPU metrics show (dcgm-exporter)"
    : r.gpu_source === 'mixed'
      ? 'from the node where it is read, else as reported'
      : 'as the server reports';
}

export interface IGpuCell {
  /** the GPUs paid for */
  value: string;
  /** how many of them the kernels hold and are busy; null when none is paid for */
  detail: string | null;
  title: string;
}

/** The GPUs cell: the GPUs the servers pay for (what idle GPU hours count), with how many their kernels hold. */
export function gpuCell(r: Pick<Row, 'gpus_paid' | 'gpus_held' | 'gpus_busy' | 'gpu_source'>): IGpuCell {
  const paid = r.gpus_paid || 0;
  const held = r.gpus_held || 0;
  const busy = r.gpus_busy || 0;
  return {
    value: String(paid),
    detail: paid ? ` (${held} held · ${busy} busy)` : null,
    title:
      `${plural(paid, 'GPU')} paid for: ${held} held by kernels, ${busy} busy, ` +
      `${Math.max(0, paid - busy)} not at work (what idle GPU hours count); ${gpuSource(r)}`
  };
}

// --- the header figures ----------------------------------------------------------------

export interface IKpiFigures {
  spend: number;
  waste: number;
  removed: number;
  rate: number;
  paid: number;
  held: number;
  busy: number;
  running: number;
  stale: number;
}

export function kpiFigures(rows: ReadonlyArray<Row>): IKpiFigures {
  return {
    spend: sum(rows, 'spend'),
    waste: sum(rows, 'waste'),
    removed: sum(rows, 'waste_removed'),
    rate: sum(rows, 'rate_per_hour'),
    paid: sum(rows, 'gpus_paid'),
    held: sum(rows, 'gpus_held'),
    busy: sum(rows, 'gpus_busy'),
    running: sum(rows, 'servers_running'),
    stale: sum(rows, 'servers_stale')
  };
}

/** The note under a table: what Spend counts (from the servers' `counted`), and how many servers are flagged. */
export function countedNote(servers: ReadonlyArray<Row>): { text: string; flagged: number } | null {
  if (!servers.length) {
    return null;
  }
  const seen = new Set(servers.map(r => r.counted));
  const flagged = servers.filter(r => r.flags && r.flags.length).length;
  const unpriced = seen.has('reported')
    ? '; servers of unpriced profiles count what they report'
    : '';
  const text = seen.has('larger')
    ? "Spend counts the larger of the service's meter (profile prices) and what each " +
      `server reports, hour by hour${unpriced}`
    : seen.has('metered')
      ? `Spend counts the service's meter (profile prices)${unpriced}`
      : 'Spend counts what each server reports';
  return { text: `${text}.`, flagged };
}

/** The first currency a row names, else `fallback`. */
export function pickCurrency(rows: ReadonlyArray<Pick<Row, 'currency'>>, fallback: string): string {
  for (const r of rows) {
    if (r.currency) {
      return r.currency;
    }
  }
  return fallback;
}

// --- the chart ---------------------------------------------------------------------------

export interface IChartRange {
  start: number;
  end: number;
  /** a bucket's width, seconds */
  width: number;
}

export interface IBucket {
  t: number;
  spend: number;
  waste: number;
  unattributed: number;
}

/** How far back a chart of an open period reaches, in buckets: 48 hours, 30 days (as the service's default). */
export const CHART_BUCKETS: Record<Step, number> = { hour: 48, day: 30 };

/**
 * What the chart asks the service for: the period in whole buckets, or, where
 * it is open at the start, the last 48 hours or 30 days (which the chart then
 * starts at the first bucket recorded in: `chartBuckets`).
 */
export function chartWindow(step: Step, period: IPeriod, now: number): IChartRange {
  const width = step === 'hour' ? HOUR : DAY;
  const cur = Math.floor(now / width) * width;
  const end = period.until === null ? cur + width : Math.ceil(period.until / width) * width;
  let start =
    period.since === null
      ? end - CHART_BUCKETS[step] * width
      : Math.floor(period.since / width) * width;
  let last = end;
  if (last <= start) {
    last = start + width;
  }
  if ((last - start) / width > MAX_POINTS) {
    start = last - MAX_POINTS * width;
  }
  return { start, end: last, width };
}

/**
 * The chart's buckets from the service's series (summed over keys), waste and
 * unattributed within spend. A window open at the start begins at the first
 * bucket in it that anything was recorded in (a hub, or a user, younger than
 * the window: its first sample, as the lab panel's chart starts), not with
 * empty buckets before it; with nothing recorded, the last bucket.
 */
export function chartBuckets(
  doc: Pick<Series, 'series'>,
  window: IChartRange,
  openStart: boolean
): { range: IChartRange; buckets: IBucket[] } {
  const by = new Map<number, IBucket>();
  for (const s of doc.series || []) {
    for (const p of s.points) {
      const t = Math.floor(p.time / window.width) * window.width;
      const b = by.get(t) ?? { t, spend: 0, waste: 0, unattributed: 0 };
      b.spend += p.spend;
      b.waste += p.waste;
      b.unattributed += p.unattributed || 0;
      by.set(t, b);
    }
  }
  let start = window.start;
  if (openStart) {
    const recorded = [...by.keys()].filter(t => t >= window.start && t < window.end);
    start = recorded.length ? Math.min(...recorded) : window.end - window.width;
  }
  const buckets: IBucket[] = [];
  for (let t = start; t < window.end; t += window.width) {
    const v = by.get(t) ?? { t, spend: 0, waste: 0, unattributed: 0 };
    const waste = Math.min(v.waste, v.spend);
    // spend counts the meter where the site prices the profile: what the servers reported
    // of waste and unattributed is shown within it, never above it
    buckets.push({
      t,
      spend: v.spend,
      waste,
      unattributed: Math.max(0, Math.min(v.unattributed, v.spend - waste))
    });
  }
  return { range: { start, end: window.end, width: window.width }, buckets };
}

/** A bucket's bands, bottom to top: active, waste, unattributed. */
export function bands(b: IBucket): { active: number; waste: number; unattributed: number } {
  return {
    active: Math.max(0, b.spend - b.waste - b.unattributed),
    waste: b.waste,
    unattributed: b.unattributed
  };
}

/** What a chart is of: the user's own (a user's page), the whole hub (every user: groups would count twice), or the key chosen (`user:alice`, `group:ml`). */
export function chartSubject(admin: boolean, user: string, key: string): { by: By; key: string | null } {
  if (!admin) {
    return { by: 'user', key: user };
  }
  if (!key) {
    return { by: 'user', key: null };
  }
  const i = key.indexOf(':');
  return { by: key.slice(0, i) as By, key: key.slice(i + 1) };
}
