/**
 * State of the Jobs panel and of job notifications: every batch job of the
 * server (`GET jobs`), polled every 2 s while the panel is visible or a job is
 * queued/running and every 15 s otherwise; the expanded row's log, followed
 * incrementally (`GET jobs/{id}/log?offset=N`); finished jobs' results
 * (`GET jobs/{id}/results`, cached). `jobEnded` fires when a job this page saw
 * queued or running (or first saw after the first load) has ended; jobs that
 * had already ended at the first load never fire it.
 *
 * The whole list is always fetched, and the "this notebook only" toggle
 * filters it here, so switching the toggle never makes old jobs look new.
 */
import type { ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import {
  cancelJob,
  getJobLog,
  getJobResults,
  IJob,
  IJobList,
  IJobResults,
  isActive,
  isJobsUnavailable,
  isTerminal,
  listJobs,
  rerunJob
} from './jobsapi';
import { samePath } from './notebooks';
import { PolledModel } from './polledmodel';

/** Seconds between polls while the panel is visible or a job is active. */
export const FAST_POLL_SECONDS = 2;

/** Seconds between polls otherwise. */
export const SLOW_POLL_SECONDS = 15;

/** How much of a followed log is kept (its tail), in characters. */
export const MAX_LOG_CHARS = 256 * 1024;

/** Log chunks fetched per poll for the expanded job. */
const MAX_LOG_CHUNKS_PER_TICK = 4;

/** Finished jobs (from the top of the list) whose results are fetched while the panel shows. */
export const RESULTS_PREFETCH = 10;

/** Connection state of the jobs poll. */
export type JobsState = 'idle' | 'loading' | 'ok' | 'offline' | 'unavailable';

/** Jobs newest first (creation time, then id). */
export function sortJobs(jobs: ReadonlyArray<IJob>): IJob[] {
  return [...jobs].sort((a, b) => {
    const ca = Number.isFinite(a.created) ? a.created : 0;
    const cb = Number.isFinite(b.created) ? b.created : 0;
    return cb - ca || b.id - a.id;
  });
}

/**
 * Which jobs ended since the last list: those that were active, or unseen
 * after the first load, and are now terminal. Updates `seen` (id → state).
 */
export function detectEnded(
  seen: Map<number, string>,
  jobs: ReadonlyArray<IJob>,
  firstLoad: boolean
): IJob[] {
  const ended: IJob[] = [];
  for (const job of jobs) {
    const before = seen.get(job.id);
    if (
      !firstLoad &&
      isTerminal(job.state) &&
      (before === undefined || isActive(before))
    ) {
      ended.push(job);
    }
    seen.set(job.id, job.state);
  }
  return ended;
}

/** A followed log. */
interface ILogState {
  text: string;
  next: number;
  complete: boolean;
}

export namespace JobsModel {
  export interface IOptions {
    serverSettings?: ServerConnection.ISettings;
    /** Whether a notebook (server path) is open; enables "Insert outputs". */
    isNotebookOpen?: (path: string) => boolean;
    fastInterval?: number;
    slowInterval?: number;
  }
}

/**
 * The jobs model. `visible` (set by the panel) speeds polling up; `start()`
 * begins polling (the plugin starts it once the app is restored).
 */
export class JobsModel extends PolledModel<IJobList, JobsState> {
  constructor(options: JobsModel.IOptions = {}) {
    const fast = options.fastInterval ?? FAST_POLL_SECONDS;
    const slow = Math.max(fast, options.slowInterval ?? SLOW_POLL_SECONDS);
    super({ name: 'jupyter-costguard:jobs', interval: slow, state: 'idle' });
    this._serverSettings = options.serverSettings;
    this._isNotebookOpen = options.isNotebookOpen ?? (() => false);
    this._fast = fast;
    this._slow = slow;
  }

  /** Emitted once for each job that ends while this page watches it. */
  get jobEnded(): ISignal<this, IJob> {
    return this._jobEnded;
  }

  /** Every job, newest first. */
  get jobs(): ReadonlyArray<IJob> {
    return this._jobs;
  }

  /** The jobs the panel lists (all, or the current notebook's). */
  get rows(): IJob[] {
    if (!this._filter) {
      return [...this._jobs];
    }
    const current = this._currentNotebook;
    return current ? this._jobs.filter(j => samePath(j.notebook, current)) : [];
  }

  /** One job by id. */
  job(id: number): IJob | undefined {
    return this._jobs.find(j => j.id === id);
  }

  /** Currency of the spend figures. */
  get currency(): string {
    return this._currency;
  }

  /** Whether any job is queued or running. */
  get hasActive(): boolean {
    return this._jobs.some(j => isActive(j.state));
  }

  /** Whether the panel is visible (polls fast then). */
  get visible(): boolean {
    return this._visible;
  }
  set visible(value: boolean) {
    if (value === this._visible || this.isDisposed) {
      return;
    }
    this._visible = value;
    this._updateFrequency();
    if (value) {
      this._refreshSoon();
    }
  }

  /** List only the current notebook's jobs. */
  get filterToNotebook(): boolean {
    return this._filter;
  }
  set filterToNotebook(value: boolean) {
    if (value === this._filter) {
      return;
    }
    this._filter = value;
    this.emitChanged();
  }

  /** The notebook the user is looking at (server path), or null. */
  get currentNotebook(): string | null {
    return this._currentNotebook;
  }
  set currentNotebook(path: string | null) {
    if (path === this._currentNotebook) {
      return;
    }
    this._currentNotebook = path;
    this.emitChanged();
  }

  /** Tell the model the set of open notebooks changed (re-evaluates "Insert outputs"). */
  notebooksChanged(): void {
    this.emitChanged();
  }

  /** The expanded row's job id (its log is followed), or null. */
  get expanded(): number | null {
    return this._expanded;
  }
  set expanded(id: number | null) {
    if (id === this._expanded) {
      return;
    }
    this._expanded = id;
    this.emitChanged();
    if (id !== null) {
      const job = this.job(id);
      if (job && this._wantsResults(job) && this._results.get(id) === null) {
        this._results.delete(id); // retry a failed fetch
      }
      void this._followLog().catch(() => undefined);
      this._prefetchResults([id]);
    }
  }

  /** Expand a row, or collapse it when it is the expanded one. */
  toggle(id: number): void {
    this.expanded = this._expanded === id ? null : id;
  }

  /** The log shown for a job: the followed log when loaded, else the job's tail. */
  logText(job: IJob): string {
    const log = this._logs.get(job.id);
    return log && (log.text || log.complete) ? log.text : job.log_tail ?? '';
  }

  /** A finished job's results when fetched (null: the fetch failed). */
  results(id: number): IJobResults | null | undefined {
    return this._results.get(id);
  }

  canCancel(job: IJob): boolean {
    return isActive(job.state);
  }

  canInsert(job: IJob): boolean {
    return this._wantsResults(job) && this._isNotebookOpen(job.notebook);
  }

  canLoad(job: IJob): boolean {
    const results = this._results.get(job.id);
    return !!results && typeof results.load_code === 'string' && results.load_code !== '';
  }

  canRerun(job: IJob): boolean {
    return isTerminal(job.state);
  }

  /** Fetch the list once, then what is new in the expanded job's log. */
  async refresh(): Promise<void> {
    await super.refresh();
    if (this.isDisposed) {
      return;
    }
    try {
      await this._followLog();
    } catch {
      // The log is extra: the job's log_tail still shows.
    }
  }

  /** Add or update a job this page just submitted or reran; it is watched from now on. */
  track(job: IJob): void {
    if (this.isDisposed) {
      return;
    }
    if (!this._seen.has(job.id)) {
      this._seen.set(job.id, job.state);
    }
    const rest = this._jobs.filter(j => j.id !== job.id);
    this._jobs = sortJobs([...rest, job]);
    this._updateFrequency();
    this.emitChanged();
    this._refreshSoon();
  }

  /** POST cancel, then refresh. */
  async cancel(id: number): Promise<IJob> {
    const job = await cancelJob(id, this._serverSettings);
    this._refreshSoon();
    return job;
  }

  /** POST rerun; the new job is tracked. */
  async rerun(id: number): Promise<IJob> {
    const job = await rerunJob(id, this._serverSettings);
    this.track(job);
    return job;
  }

  /** A finished job's results (cached once fetched). */
  async fetchResults(id: number): Promise<IJobResults> {
    const cached = this._results.get(id);
    if (cached) {
      return cached;
    }
    let pending = this._pendingResults.get(id);
    if (!pending) {
      pending = getJobResults(id, this._serverSettings);
      this._pendingResults.set(id, pending);
    }
    try {
      const results = await pending;
      const job = this.job(id);
      // Only a finished job's results are final.
      if (!job || isTerminal(job.state) || isTerminal(results.state)) {
        this._results.set(id, results);
      }
      this.emitChanged();
      return results;
    } finally {
      this._pendingResults.delete(id);
    }
  }

  /** `GET jobs`: every job of the server. */
  protected fetch(): Promise<IJobList> {
    return listJobs(this._serverSettings);
  }

  /** Take one `GET jobs` answer; `jobEnded` for the jobs that ended since the last. */
  protected apply(list: IJobList): void {
    const jobs = sortJobs(Array.isArray(list?.jobs) ? list.jobs : []);
    const ended = detectEnded(this._seen, jobs, !this._loaded);
    this._loaded = true;
    this._jobs = jobs;
    this._currency = list?.currency || this._currency;
    this._updateFrequency();
    this.emitChanged();
    this._prefetchResults(ended.map(j => j.id));
    for (const job of ended) {
      this._jobEnded.emit(job);
    }
  }

  /** Offline, or `unavailable` when the server has no jobs API (or turned it off). */
  protected failed(reason: unknown): void {
    super.failed(reason, isJobsUnavailable(reason) ? 'unavailable' : 'offline');
    this._updateFrequency();
  }

  private _refreshSoon(): void {
    if (this.isRunning && !this.isDisposed) {
      void this.poll.refresh();
    }
  }

  private _wantsResults(job: IJob): boolean {
    return job.state === 'succeeded' || job.state === 'failed';
  }

  /** Fetch results of the given jobs, and of the top finished rows while visible. */
  private _prefetchResults(ids: number[]): void {
    const wanted = new Set(ids);
    if (this._visible) {
      for (const job of this.rows.filter(j => this._wantsResults(j)).slice(0, RESULTS_PREFETCH)) {
        wanted.add(job.id);
      }
    }
    for (const id of wanted) {
      const job = this.job(id);
      if (!job || !this._wantsResults(job) || this._results.has(id) || this._pendingResults.has(id)) {
        continue;
      }
      this.fetchResults(id).catch(() => {
        if (!this.isDisposed) {
          this._results.set(id, null);
          this.emitChanged();
        }
      });
    }
  }

  /** Fetch what is new in the expanded job's log. */
  private async _followLog(): Promise<void> {
    const id = this._expanded;
    if (id === null || this._following) {
      return;
    }
    const job = this.job(id);
    if (!job) {
      return;
    }
    const log = this._logs.get(id) ?? { text: '', next: 0, complete: false };
    if (log.complete) {
      return;
    }
    this._following = true;
    try {
      for (let i = 0; i < MAX_LOG_CHUNKS_PER_TICK; i++) {
        const chunk = await getJobLog(id, log.next, this._serverSettings);
        if (this.isDisposed) {
          return;
        }
        const text = log.text + (chunk.text ?? '');
        log.text = text.length > MAX_LOG_CHARS ? text.slice(-MAX_LOG_CHARS) : text;
        const advanced = chunk.next_offset > log.next;
        log.next = Math.max(log.next, chunk.next_offset);
        log.complete = chunk.complete === true;
        this._logs.set(id, log);
        if (log.complete || !advanced || log.next >= chunk.size) {
          break;
        }
      }
      this.emitChanged();
    } finally {
      this._following = false;
    }
  }

  /** Fast while the panel is visible or a job is active, slow otherwise. */
  private _updateFrequency(): void {
    this.setInterval(this._visible || this.hasActive ? this._fast : this._slow);
  }

  private _currency = 'USD';
  private _currentNotebook: string | null = null;
  private _expanded: number | null = null;
  private _fast: number;
  private _filter = false;
  private _following = false;
  private _isNotebookOpen: (path: string) => boolean;
  private _jobEnded = new Signal<this, IJob>(this);
  private _jobs: IJob[] = [];
  private _loaded = false;
  private _logs = new Map<number, ILogState>();
  private _pendingResults = new Map<number, Promise<IJobResults>>();
  private _results = new Map<number, IJobResults | null>();
  private _seen = new Map<number, string>();
  private _serverSettings?: ServerConnection.ISettings;
  private _slow: number;
  private _visible = false;
}
