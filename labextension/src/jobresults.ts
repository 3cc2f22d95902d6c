/**
 * Finished jobs' results (`GET jobs/{id}/results`) as the Jobs panel keeps
 * them: fetched once per job (concurrent asks share one request), kept once
 * final, and a failed fetch remembered (null) until it is retried.
 */
import type { ServerConnection } from '@jupyterlab/services';

import { getJobResults, IJobResults } from './jobsapi';

/** The results fetched so far, by job id. */
export class JobResultsCache {
  constructor(serverSettings?: ServerConnection.ISettings) {
    this._serverSettings = serverSettings;
  }

  /** A job's results when fetched (null: the fetch failed; undefined: not fetched). */
  get(id: number): IJobResults | null | undefined {
    return this._results.get(id);
  }

  /** Whether a job's results are fetched, failed or being fetched. */
  known(id: number): boolean {
    return this._results.has(id) || this._pending.has(id);
  }

  /** Remember that fetching a job's results failed. */
  failed(id: number): void {
    this._results.set(id, null);
  }

  /** Forget a failed fetch, so that the next one tries again. */
  retry(id: number): void {
    if (this._results.get(id) === null) {
      this._results.delete(id);
    }
  }

  /**
   * A job's results: the kept ones, else fetched (one request for concurrent
   * asks) and kept when `final(results)` says they will not change.
   */
  async fetch(id: number, final: (results: IJobResults) => boolean): Promise<IJobResults> {
    const cached = this._results.get(id);
    if (cached) {
      return cached;
    }
    let pending = this._pending.get(id);
    if (!pending) {
      pending = getJobResults(id, this._serverSettings);
      this._pending.set(id, pending);
    }
    try {
      const results = await pending;
      if (final(results)) {
        this._results.set(id, results);
      }
      return results;
    } finally {
      this._pending.delete(id);
    }
  }

  private _pending = new Map<number, Promise<IJobResults>>();
  private _results = new Map<number, IJobResults | null>();
  private _serverSettings?: ServerConnection.ISettings;
}
