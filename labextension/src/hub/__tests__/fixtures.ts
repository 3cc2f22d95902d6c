/** Answers of the hub service, typed by its OpenAPI document, for the pages' tests. */
import type { Budget, Me, Row, Series, SpendList } from '../types';

export const NOW = Date.UTC(2026, 11, 7, 22, 31, 0) / 1000;
export const HOUR_NOW = Math.floor(NOW / 3600) * 3600;

export function row(over: Partial<Row> = {}): Row {
  return {
    key: 'alice',
    user: 'alice',
    group: null,
    server: null,
    spend: 0.62,
    waste: 0.1,
    idle_gpu_hours: 0.13,
    rate_per_hour: 37.6,
    gpus_paid: 8,
    gpus_held: 1,
    gpus_busy: 0,
    servers_running: 1,
    servers_stale: 0,
    currency: 'USD',
    simulated: false,
    last_ok: NOW - 5,
    budget: null,
    counted: 'metered',
    metered_rate_per_hour: 0,
    reported_rate_per_hour: 37.6,
    flags: [],
    gpu_source: 'report',
    waste_removed: 0,
    ...over
  };
}

export function budget(over: Partial<Budget> = {}): Budget {
  return {
    scope: 'user',
    name: 'alice',
    budget: 2,
    spent: 0.5,
    remaining: 1.5,
    used: 0.25,
    period: 'month',
    period_start: Date.UTC(2026, 11, 1) / 1000,
    period_end: Date.UTC(2027, 0, 1) / 1000,
    ...over
  };
}

export function spendList(by: SpendList['by'], rows: Row[]): SpendList {
  return {
    by,
    since: null,
    until: null,
    time: NOW,
    poll: { time: NOW - 3, seconds: 0.01, servers: 1, answered: 1, stale: 0 },
    rows
  };
}

/** A series whose only points are at `times` (the first minute of a new hub: one). */
export function series(times: number[], spend = 0.5): Series {
  return {
    by: 'user',
    step: 'hour',
    since: 0,
    until: 0,
    series: [
      { key: 'alice', points: times.map(time => ({ time, spend, waste: 0.1, unattributed: 0 })) }
    ]
  };
}

export function me(over: Partial<Me> = {}): Me {
  return {
    user: 'alice',
    admin: false,
    time: NOW - 2,
    totals: row(),
    servers: [row({ key: 'alice/', server: '', state: 'ok', detail: null })],
    budgets: [budget(), budget({ scope: 'group', name: 'ml', budget: null, spent: null, used: null, remaining: 3 })],
    ...over
  };
}
