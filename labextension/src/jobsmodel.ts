/**
 * State of the Jobs panel and of job notifications: the server's batch jobs
 * (`GET jobs`, paged newest first), polled every 2 s while the panel is visible
 * or a job is queued/running and every 15 s otherwise; the expanded row's log,
 * followed incrementally (`GET jobs/{id}/log?offset=N`); finished jobs'
 * results (`GET jobs/{id}/results`, cached). `jobEnded` fires exactly once for
 * each job this page submitted (`track`) or saw queued or running (or first saw
 * after the first load) when it ends, whether or not the panel shows: a job
 * tracked before the first answer still fires when that answer already has it
 * ended, and so does one the first answer has ended after the page opened
 * (`since`: a job submitted just before, or by another page, that ended before
 * this page's first poll); jobs that had ended before never fire it. Answers
 * can arrive out of order (the poll's tick, `track`'s refresh, a command's
 * `refresh` overlap): an answer older than the last one applied is dropped, and
 * a job's state never goes back from ended to queued/running, so no stale
 * answer can make a job end twice.
 *
 * Paging: each poll fetches only the first page; "Show older jobs"
 * (`loadOlder`) appends the page below the oldest known job (`hasOlder` until
 * there is none). How pages join into what the model knows, and which jobs
 * off the first page are still fetched one by one (`GET jobs/{id}`) so they
 * stay current and still fire `jobEnded`, is `knownjobs.ts`. The log is
 * followed by `joblog.ts`, results kept by `jobresults.ts`.
 *
 * The "this notebook only" toggle still filters here, not on the server, so
 * switching it never makes old jobs look new; it filters the jobs loaded so far
 * (the first page and the older pages loaded), so another notebook's newer
 * jobs can hide this notebook's older ones until they are loaded.
 */
import type { ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { errorStatus } from './api';
import { JobLogs } from './joblog';
import { JobResultsCache } from './jobresults';
import {
  cancelJob,
  errorMessage,
  getJob,
  getJobResults,
  IJob,
  IJobList,
  IJobResults,
  isActive,
  isJobsUnavailable,
  isTerminal,
  JOBS_PAGE_SIZE,
  listJobs,
  rerunJob
} from './jobsapi';
import { pageStart } from './jobsended';
import { IJobsPoll, KnownJobs } from './knownjobs';
import { samePath } from './notebooks';
import { PolledModel } from './polledmodel';

/** Seconds between polls while the panel is visible or a job is active. */
export const FAST_POLL_SECONDS = 2;

/** Seconds between polls otherwise. */
export const SLOW_POLL_SECONDS = 15;

/** Finished jobs (from the top of the list) whose results are fetched while the panel shows. */
export const RESULTS_PREFETCH = 10;

/** Pages one "Show older jobs" reads at most while none of them has a row to show (filtered). */
export const MAX_OLDER_PAGES_PER_LOAD = 5;

/** Connection state of the jobs poll. */
export type JobsState = 'idle' | 'loading' | 'ok' | 'offline' | 'unavailable';

export namespace JobsModel {
  export interface IOptions {
    serverSettings?: ServerConnection.ISettings;
    /** Whether a notebook (server path) is open; enables "Insert outputs". */
    isNotebookOpen?: (path: string) => boolean;
    fastInterval?: number;
    slowInterval?: number;
    /** Jobs per page (default JOBS_PAGE_SIZE, the server's default). */
    pageSize?: number;
    /**
     * When this page started watching, epoch seconds (default: when the page
     * was requested): a job the first answer has ended at or after it is
     * announced too.
     */
    since?: number;
    /** The browser's clock, epoch seconds (tests). */
    now?: () => number;
  }
}

/**
 * The jobs model. `visible` (set by the panel) speeds polling up; `start()`
 * begins polling (the plugin starts it once the app is restored).
 */
export class JobsModel extends PolledModel<IJobsPoll, JobsState> {
  constructor(options: JobsModel.IOptions = {}) {
    const fast = options.fastInterval ?? FAST_POLL_SECONDS;
    const slow = Math.max(fast, options.slowInterval ?? SLOW_POLL_SECONDS);
    super({ name: 'jupyter-costguard:jobs', interval: slow, state: 'idle' });
    this._serverSettings = options.serverSettings;
    this._logs = new JobLogs(options.serverSettings);
    this._results = new JobResultsCache(options.serverSettings);
    this._isNotebookOpen = options.isNotebookOpen ?? (() => false);
    this._fast = fast;
    this._slow = slow;
    this._pageSize = Math.max(1, Math.floor(options.pageSize ?? JOBS_PAGE_SIZE));
    this._known = new KnownJobs(
      options.since ?? pageStart(),
      options.now ?? (() => Date.now() / 1000)
    );
  }

  /** Emitted once for each job that ends while this page watches it. */
  get jobEnded(): ISignal<this, IJob> {
    return this._jobEnded;
  }

  /** Every job loaded (the first page, jobs pushed off it, older pages), newest first. */
  get jobs(): ReadonlyArray<IJob> {
    return this._known.jobs;
  }

  /** Whether the server has older jobs than those loaded ("Show older jobs"). */
  get hasOlder(): boolean {
    return this._known.hasOlder;
  }

  /** Whether `loadOlder` is fetching. */
  get loadingOlder(): boolean {
    return this._loadingOlder;
  }

  /** Why the last `loadOlder` failed, for the user; null when it did not. */
  get olderError(): string | null {
    return this._olderError;
  }

  /** The jobs the panel lists (all, or the current notebook's). */
  get rows(): IJob[] {
    if (!this._filter) {
      return [...this._known.jobs];
    }
    const current = this._currentNotebook;
    return current ? this._known.jobs.filter(j => samePath(j.notebook, current)) : [];
  }

  /** One job by id. */
  job(id: number): IJob | undefined {
    return this._known.job(id);
  }

  /** Currency of the spend figures. */
  get currency(): string {
    return this._currency;
  }

  /** Whether any job is queued or running. */
  get hasActive(): boolean {
    return this._known.jobs.some(j => isActive(j.state));
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
      if (job && this._wantsResults(job)) {
        this._results.retry(id);
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
    return this._logs.text(job);
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
    this._known.track(job);
    this._updateFrequency();
    this.emitChanged();
    this._refreshSoon();
  }

  /**
   * Load the page of jobs older than the oldest known one ("Show older jobs"),
   * and while the list is filtered to a notebook, the next ones until one of
   * them has a row to show (MAX_OLDER_PAGES_PER_LOAD pages at most). A failure
   * is kept in `olderError` (this never rejects).
   */
  async loadOlder(): Promise<void> {
    if (!this.hasOlder || this._loadingOlder || this.isDisposed) {
      return;
    }
    this._loadingOlder = true;
    this._olderError = null;
    this.emitChanged();
    try {
      const rowsBefore = this.rows.length;
      for (let i = 0; i < MAX_OLDER_PAGES_PER_LOAD; i++) {
        const before = this._known.before;
        const generation = this._known.generation;
        if (typeof before !== 'number') {
          break;
        }
        const list = await listJobs(this._serverSettings, null, {
          limit: this._pageSize,
          before
        });
        if (this.isDisposed) {
          return;
        }
        if (generation !== this._known.generation || !this._known.hasOlder) {
          break; // a poll dropped what was known meanwhile: this page no longer joins on
        }
        this._taken(this._known.takeOlder(list), list);
        if (!this._filter || !this._currentNotebook || this.rows.length > rowsBefore) {
          break;
        }
      }
    } catch (reason) {
      if (!this.isDisposed) {
        this._olderError = errorMessage(reason);
      }
    } finally {
      this._loadingOlder = false;
      if (!this.isDisposed) {
        this.emitChanged();
      }
    }
  }

  /**
   * A job by id, fetched (`GET jobs/{id}`) and kept when it is not loaded
   * (e.g. older than the loaded pages); rejects when the server has none.
   */
  async fetchJob(id: number): Promise<IJob> {
    const known = this.job(id);
    if (known) {
      return known;
    }
    const job = await getJob(id, this._serverSettings);
    if (this.isDisposed || this.job(id)) {
      return this.job(id) ?? job;
    }
    this._known.add(job); // not new: it is only looked at
    this._updateFrequency();
    this.emitChanged();
    return job;
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
    const results = await this._results.fetch(id, fetched => {
      const job = this.job(id);
      // Only a finished job's results are final.
      return !job || isTerminal(job.state) || isTerminal(fetched.state);
    });
    this.emitChanged();
    return results;
  }

  /**
   * The code that loads only `names` of a finished job's results (not cached:
   * it depends on the names); null when the job brought nothing back.
   */
  async loadCode(id: number, names: ReadonlyArray<string>): Promise<string | null> {
    const results = await getJobResults(id, this._serverSettings, names);
    return typeof results.load_code === 'string' && results.load_code ? results.load_code : null;
  }

  /**
   * `GET jobs`: the first page; then `GET jobs/{id}` for jobs seen queued or
   * running that are not on it (MAX_WATCHED_PER_POLL per poll, taking turns).
   */
  protected async fetch(): Promise<IJobsPoll> {
    const seq = ++this._fetchSeq;
    const list = await listJobs(this._serverSettings, null, { limit: this._pageSize });
    const onPage = new Set(list.jobs.map(j => j.id));
    const watched: IJob[] = [];
    const gone: number[] = [];
    await Promise.all(
      this._known.watchedIds(onPage).map(async id => {
        try {
          const job = await getJob(id, this._serverSettings);
          if (job && typeof job === 'object' && job.id === id) {
            watched.push(job);
          }
        } catch (reason) {
          if (errorStatus(reason) === 404) {
            gone.push(id);
          }
          // Else: try again next poll.
        }
      })
    );
    return { list, watched, gone, seq };
  }

  /** Take one poll's answers; `jobEnded` for the jobs that ended since the last. */
  protected apply(poll: IJobsPoll): void {
    const ended = this._known.takePoll(poll);
    if (ended !== null) {
      this._taken(ended, poll.list);
    }
  }

  /** Offline, or `unavailable` when the server has no jobs API (or turned it off). */
  protected failed(reason: unknown): void {
    super.failed(reason, isJobsUnavailable(reason) ? 'unavailable' : 'offline');
    this._updateFrequency();
  }

  /** After jobs were taken: the currency, the poll's pace, `jobEnded` for those that `ended`. */
  private _taken(ended: IJob[], list: IJobList): void {
    this._currency = list?.currency || this._currency;
    this._updateFrequency();
    this.emitChanged();
    this._prefetchResults(ended.map(j => j.id));
    for (const job of ended) {
      this._jobEnded.emit(job);
    }
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
      if (!job || !this._wantsResults(job) || this._results.known(id)) {
        continue;
      }
      this.fetchResults(id).catch(() => {
        if (!this.isDisposed) {
          this._results.failed(id);
          this.emitChanged();
        }
      });
    }
  }

  /** Fetch what is new in the expanded job's log. */
  private async _followLog(): Promise<void> {
    const id = this._expanded;
    if (id === null || !this.job(id)) {
      return;
    }
    if (await this._logs.follow(id, () => this.isDisposed)) {
      this.emitChanged();
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
  private _fetchSeq = 0;
  private _isNotebookOpen: (path: string) => boolean;
  private _known: KnownJobs;
  private _jobEnded = new Signal<this, IJob>(this);
  private _loadingOlder = false;
  private _olderError: string | null = null;
  private _pageSize: number;
  private _logs: JobLogs;
  private _results: JobResultsCache;
  private _serverSettings?: ServerConnection.ISettings;
  private _slow: number;
  private _visible = false;
}
