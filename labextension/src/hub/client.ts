/**
 * The one client of the hub service's API the pages use: each route typed by
 * the service's OpenAPI document, errors as the message the service gave.
 */
import type { By, Me, Series, SpendList, Step } from './types';

/** A query's parameters in order; null, undefined and '' are left out. */
export type Query = ReadonlyArray<readonly [string, string | number | null | undefined]>;

/** `fetch`, or a stand-in in tests. */
export type Fetch = (url: string, init: RequestInit) => Promise<Response>;

/** The URL of `path` below `prefix` with `query`. */
export function apiUrl(prefix: string, path: string, query: Query = []): string {
  const q = new URLSearchParams();
  for (const [name, value] of query) {
    if (value !== null && value !== undefined && value !== '') {
      q.append(name, String(value));
    }
  }
  const s = q.toString();
  return prefix + path + (s ? `?${s}` : '');
}

/** What a period query asks: since and until, epoch seconds (null: open). */
export interface IPeriod {
  since: number | null;
  until: number | null;
}

/** What a chart asks for. */
export interface ISeriesQuery extends IPeriod {
  by: By;
  key: string | null;
  step: Step;
}

export class HubClient {
  constructor(
    readonly prefix: string,
    private readonly xsrf: string,
    private readonly fetcher: Fetch = (url, init) => fetch(url, init)
  ) {}

  /** `api/spend` by user, group or server for a period. */
  spend(by: By, period: IPeriod): Promise<SpendList> {
    return this.get<SpendList>('api/spend', this.spendQuery(by, period));
  }

  /** The query of `api/spend` (and its CSV) for `by` and `period`. */
  spendQuery(by: By, period: IPeriod): Query {
    return [
      ['by', by],
      ['since', period.since],
      ['until', period.until]
    ];
  }

  /** `api/series`: the chart's points. */
  series(q: ISeriesQuery): Promise<Series> {
    return this.get<Series>('api/series', [
      ['by', q.by],
      ['key', q.key],
      ['step', q.step],
      ['since', q.since],
      ['until', q.until]
    ]);
  }

  /** `api/me`: the caller's own figures. */
  me(): Promise<Me> {
    return this.get<Me>('api/me');
  }

  url(path: string, query: Query = []): string {
    return apiUrl(this.prefix, path, query);
  }

  private async get<T>(path: string, query: Query = []): Promise<T> {
    const r = await this.fetcher(this.url(path, query), {
      credentials: 'same-origin',
      headers: { 'X-XSRFToken': this.xsrf, Accept: 'application/json' }
    });
    if (r.ok) {
      return (await r.json()) as T;
    }
    let message = `HTTP ${r.status}`;
    try {
      const doc = (await r.json()) as { message?: unknown };
      if (doc && typeof doc.message === 'string' && doc.message) {
        message = doc.message;
      }
    } catch {
      // not JSON: the status says it
    }
    throw new Error(message);
  }
}
