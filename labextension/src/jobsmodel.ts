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
 * Paging: each poll fetches only the first page (the newest JOBS_PAGE_SIZE
 * jobs of every notebook). What the model knows is a run of ids from the
 * newest down to `before` of the next page: jobs pushed off the first page by
 * newer ones are kept, and "Show older jobs" (`loadOlder`) appends the page
 * below the oldest known job (`hasOlder` until the server's `next_before` is
 * null). First-page entries replace known ones with the same id. When more
 * jobs than a page arrived between two polls (e.g. the tab was hidden), the
 * run is broken: the older jobs are dropped and can be loaded again. Jobs seen
 * queued or running that are not on the first page (pushed off it, or on an
 * older page) are fetched one by one (`GET jobs/{id}`), so they stay current
 * and still fire `jobEnded`; jobs first seen on an older page are not new.
 *
 * The "this notebook only" toggle still filters here, not on the server, so
 * switching it never makes old jobs look new; it filters the jobs loaded so far
 * (the first page and the older pages loaded), so another notebook's newer
 * jobs can hide this notebook's older ones until they are loaded.
 */
import type { ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { errorStatus } from './api';
import {
  cancelJob,
  errorMessage,
  getJob,
  getJobLog,
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

/** Jobs off the first page (seen queued/running) fetched one by one per poll, at most. */
export const MAX_WATCHED_PER_POLL = 10;

/** Pages one "Show older jobs" reads at most while none of them has a row to show (filtered). */
export const MAX_OLDER_PAGES_PER_LOAD = 5;

/** What one poll fetched. */
export interface IJobsPoll {
  /** The first page. */
  list: IJobList;
  /** Jobs seen queued or running that are not on the first page, as they are now. */
  watched: IJob[];
  /** Ids of those the server no longer has (404). */
  gone: number[];
  /** Order of the request (answers older than the last applied one are dropped). */
  seq?: number;
}

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
 * Which jobs ended since the last list: those seen active (submitted here,
 * or queued/running in an earlier answer; also in the first answer), or unseen
 * after the first load, or in the first load ended at or after `since` (the
 * page's start, epoch seconds), and now terminal, unless `announced` has them
 * already. Updates `seen` (id → state; an ended job stays ended whatever a
 * stale answer says) and `announced`.
 */
export function detectEnded(
  seen: Map<number, string>,
  jobs: ReadonlyArray<IJob>,
  firstLoad: boolean,
  announced: Set<number> = new Set(),
  since: number | null = null
): IJob[] {
  const ended: IJob[] = [];
  for (const job of jobs) {
    const before = seen.get(job.id);
    if (before !== undefined && isTerminal(before) && !isTerminal(job.state)) {
      continue; // a stale answer: jobs never leave an end state
    }
    const endedSince =
      since !== null && typeof job.ended === 'number' && job.ended >= since;
    const watched = before !== undefined ? isActive(before) : !firstLoad || endedSince;
    if (isTerminal(job.state) && watched && !announced.has(job.id)) {
      ended.push(job);
      announced.add(job.id);
    }
    seen.set(job.id, job.state);
  }
  return ended;
}

/**
 * When this page was requested, epoch seconds (the navigation's start, which
 * a job that ended while the page loaded is after; else now).
 */
function pageStart(): number {
  const origin = typeof performance !== 'undefined' ? performance.timeOrigin : NaN;
  return Number.isFinite(origin) && origin > 0 ? origin / 1000 : Date.now() / 1000;
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
    this._isNotebookOpen = options.isNotebookOpen ?? (() => false);
    this._fast = fast;
    this._slow = slow;
    this._pageSize = Math.max(1, Math.floor(options.pageSize ?? JOBS_PAGE_SIZE));
    this._since = options.since ?? pageStart();
    this._now = options.now ?? (() => Date.now() / 1000);
  }

  /** Emitted once for each job that ends while this page watches it. */
  get jobEnded(): ISignal<this, IJob> {
    return this._jobEnded;
  }

  /** Every job loaded (the first page, jobs pushed off it, older pages), newest first. */
  get jobs(): ReadonlyArray<IJob> {
    return this._jobs;
  }

  /** Whether the server has older jobs than those loaded ("Show older jobs"). */
  get hasOlder(): boolean {
    return typeof this._lo === 'number';
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
      return [...this._jobs];
    }
    const current = this._currentNotebook;
    return current ? this._jobs.filter(j => samePath(j.notebook, current)) : [];
  }

  /** One job by id. */
  job(id: number): IJob | undefined {
    return this._byId.get(id);
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
    const before = this._seen.get(job.id);
    if (before === undefined) {
      // Submitted here: watched from now on, even before the first answer.
      this._seen.set(job.id, isTerminal(job.state) ? 'queued' : job.state);
    }
    if (before === undefined || !isTerminal(before)) {
      this._byId.set(job.id, job); // never the submit's answer over a newer end state
    }
    this._sort();
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
        const before = this._lo;
        const generation = this._generation;
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
        if (generation !== this._generation || typeof this._lo !== 'number') {
          break; // a poll dropped what was known meanwhile: this page no longer joins on
        }
        this._addOlder(list);
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
    if (!this._seen.has(job.id)) {
      this._seen.set(job.id, job.state); // not new: it is only looked at
    }
    this._byId.set(job.id, job);
    this._sort();
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
      this._watchedIds(onPage).map(async id => {
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
    if (typeof poll.seq === 'number') {
      if (poll.seq < this._appliedSeq) {
        return; // asked before the answer already applied: stale
      }
      this._appliedSeq = poll.seq;
    }
    const list = poll.list;
    const page = Array.isArray(list?.jobs) ? list.jobs : [];
    const next = typeof list?.next_before === 'number' ? list.next_before : null;
    const firstLoad = !this._loaded;
    if (firstLoad && typeof list?.time === 'number' && Number.isFinite(list.time)) {
      // `since` is on the browser's clock, a job's `ended` on the server's: move it by how
      // far the two differ, so a clock off by minutes neither drops a job that ended while
      // the page loaded nor announces one that ended before it opened
      this._since += list.time - this._now();
    }
    const onPage = new Set(page.map(j => j.id));
    const pageTop = page.length ? Math.max(...page.map(j => j.id)) : undefined;
    // More new jobs than a page since the last poll: the page does not join what was known.
    const gap = next !== null && this._top !== undefined && next > this._top + 1;
    if (!firstLoad && !gap && typeof this._lo === 'number') {
      // Older than every job known, yet on the first page (newer ones were deleted): not new.
      for (const job of page) {
        if (job.id < this._lo && !this._seen.has(job.id)) {
          this._seen.set(job.id, job.state);
        }
      }
    }
    for (const id of [...this._byId.keys()]) {
      if (onPage.has(id)) {
        continue;
      }
      // Within the page's range yet not on it: deleted, unless newer than the page's
      // newest (or the page is empty) and queued/running (submitted after the list was
      // read; it is watched, and dropped only when the server says it has no such job).
      const watched = isActive(this._seen.get(id) ?? '');
      const covered =
        (next === null || id >= next) && ((pageTop !== undefined && id < pageTop) || !watched);
      if (covered || (gap && !watched)) {
        this._byId.delete(id);
      }
    }
    if (gap) {
      this._generation++;
    }
    for (const job of page) {
      this._byId.set(job.id, job);
    }
    const gone = new Set(poll.gone ?? []);
    for (const id of gone) {
      this._byId.delete(id);
      this._seen.delete(id);
    }
    const watched = (poll.watched ?? []).filter(j => !onPage.has(j.id) && !gone.has(j.id));
    for (const job of watched) {
      this._byId.set(job.id, job);
    }
    if (next === null) {
      this._lo = null;
    } else if (gap || this._lo === undefined) {
      this._lo = next;
    } else if (this._lo !== null) {
      this._lo = Math.min(this._lo, next);
    } // else every job was known and the page joins on: still every job
    if (pageTop !== undefined) {
      this._top = Math.max(this._top ?? pageTop, pageTop);
    }
    const ended = detectEnded(
      this._seen,
      [...sortJobs(page), ...watched],
      firstLoad,
      this._announced,
      this._since
    );
    this._loaded = true;
    this._sort();
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

  /** Jobs seen queued or running that are not on the first page: MAX_WATCHED_PER_POLL, in turns. */
  private _watchedIds(onPage: ReadonlySet<number>): number[] {
    const ids: number[] = [];
    for (const [id, state] of this._seen) {
      if (isActive(state) && !onPage.has(id)) {
        ids.push(id);
      }
    }
    ids.sort((a, b) => a - b);
    if (ids.length <= MAX_WATCHED_PER_POLL) {
      return ids;
    }
    const start = this._watchTurn % ids.length;
    this._watchTurn = start + MAX_WATCHED_PER_POLL;
    return [...ids.slice(start), ...ids.slice(0, start)].slice(0, MAX_WATCHED_PER_POLL);
  }

  /** Take an older page (`loadOlder`). */
  private _addOlder(list: IJobList): void {
    const page = Array.isArray(list?.jobs) ? list.jobs : [];
    for (const job of page) {
      if (!this._seen.has(job.id)) {
        this._seen.set(job.id, job.state); // older jobs are not new
      }
    }
    const ended = detectEnded(this._seen, page, false, this._announced);
    for (const job of page) {
      this._byId.set(job.id, job);
    }
    const next = typeof list?.next_before === 'number' ? list.next_before : null;
    this._lo = next === null ? null : Math.min(this._lo ?? next, next);
    this._currency = list?.currency || this._currency;
    this._sort();
    this._updateFrequency();
    this.emitChanged();
    this._prefetchResults(ended.map(j => j.id));
    for (const job of ended) {
      this._jobEnded.emit(job);
    }
  }

  private _sort(): void {
    this._jobs = sortJobs([...this._byId.values()]);
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

  /** Jobs whose end was announced (`jobEnded` fires once per job). */
  private _announced = new Set<number>();
  /** `seq` of the last answer applied. */
  private _appliedSeq = 0;
  private _byId = new Map<number, IJob>();
  private _currency = 'USD';
  private _currentNotebook: string | null = null;
  private _expanded: number | null = null;
  private _fast: number;
  private _filter = false;
  private _fetchSeq = 0;
  private _following = false;
  /** Bumped when a poll drops the older jobs (a loading older page no longer joins on). */
  private _generation = 0;
  private _isNotebookOpen: (path: string) => boolean;
  private _jobEnded = new Signal<this, IJob>(this);
  private _jobs: IJob[] = [];
  private _loaded = false;
  private _loadingOlder = false;
  /**
   * Every job with an id from this up is known; null: every job; undefined:
   * nothing loaded yet. The `before` of the next older page.
   */
  private _lo: number | null | undefined = undefined;
  private _olderError: string | null = null;
  private _pageSize: number;
  private _logs = new Map<number, ILogState>();
  private _pendingResults = new Map<number, Promise<IJobResults>>();
  private _results = new Map<number, IJobResults | null>();
  private _seen = new Map<number, string>();
  /** When this page started watching (epoch seconds; see `detectEnded`). */
  private _since: number;
  private _now: () => number;
  private _serverSettings?: ServerConnection.ISettings;
  private _slow: number;
  /** Highest id on any first page so far. */
  private _top: number | undefined = undefined;
  private _visible = false;
  private _watchTurn = 0;
}
