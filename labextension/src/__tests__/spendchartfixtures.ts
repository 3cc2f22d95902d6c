/**
 * `GET history` answers for the spend chart's specs, built as the server
 * builds them (cost/timeline.py): notebooks most spent first, then
 * `unattributed`, which with them adds up to `total` per bucket.
 */
import type { ISpendHistory, ISpendSeries } from '../api';

export const T0 = 1_800_000_000; // a multiple of 3600

function series(
  kind: string,
  path: string | null,
  spend: number[],
  waste: number[]
): ISpendSeries {
  const sum = (v: number[]) => v.reduce((a, b) => a + b, 0);
  return { kind, path, spend, waste, total_spend: sum(spend), total_waste: sum(waste) };
}

/**
 * A history of `n` buckets of `bucket` seconds; `notebooks` maps a path to
 * its spend and waste per bucket; the server spent `server` per bucket.
 */
export function historyDoc(options: {
  n?: number;
  bucket?: number;
  minutes?: number;
  server?: number;
  notebooks?: { [path: string]: { spend: number[]; waste?: number[] } };
  notebook?: string | null;
  time?: number | null;
  /** The ledger's first minute, when the window was fitted to it (`fit=true`). */
  since?: number | null;
}): ISpendHistory {
  const n = options.n ?? 4;
  const bucket = options.bucket ?? 60;
  const times = Array.from({ length: n }, (_, i) => T0 + i * bucket);
  const server = new Array(n).fill(options.server ?? 1);
  const entries = Object.entries(options.notebooks ?? {}).map(([path, v]) =>
    series('notebook', path, v.spend, v.waste ?? new Array(n).fill(0))
  );
  entries.sort((a, b) => b.total_spend - a.total_spend);
  const all = [...entries];
  const rest = server.map((s, i) => s - entries.reduce((a, e) => a + e.spend[i], 0));
  const restWaste = new Array(n).fill(0);
  const notebook = options.notebook ?? null;
  const shown = notebook ? all.filter(s => s.path === notebook) : [...all, series('unattributed', null, rest, restWaste)];
  return {
    simulated: true,
    currency: 'USD',
    time: options.time === undefined ? times[n - 1] + bucket : options.time,
    user: null,
    server: null,
    minutes: options.minutes ?? (n * bucket) / 60,
    since: options.since ?? null,
    bucket_seconds: bucket,
    start: times[0],
    end: times[n - 1] + bucket,
    notebook,
    times,
    series: shown,
    total: series(
      'server',
      null,
      server,
      entries.reduce((acc, e) => acc.map((v, i) => v + e.waste[i]), new Array(n).fill(0))
    ),
    notebooks: entries.filter(e => e.total_spend > 0).map(e => e.path as string)
  };
}
