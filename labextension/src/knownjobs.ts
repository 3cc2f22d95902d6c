/**
 * What the jobs model knows of the server's jobs, merged from the pages it
 * read, and which of them ended (`detectEnded`, announced once each).
 *
 * Paging: each poll fetches only the first page (the newest JOBS_PAGE_SIZE
 * jobs of every notebook). What is known is a run of ids from the newest down
 * to `before` of the next page: jobs pushed off the first page by newer ones
 * are kept, and an older page (`takeOlder`) appends the page below the oldest
 * known job (`hasOlder` until the server's `next_before` is null). First-page
 * entries replace known ones with the same id. When more jobs than a page
 * arrived between two polls (e.g. the tab was hidden), the run is broken: the
 * older jobs are dropped (`generation` moves on) and can be loaded again. Jobs
 * seen queued or running that are not on the first page (`watchedIds`) are
 * fetched one by one, so they stay current and still end; jobs first seen on
 * an older page are not new. Answers can arrive out of order: one older than
 * the last applied is dropped.
 */
import { IJob, IJobList, isActive, isTerminal } from './jobsapi';
import { detectEnded, sortJobs } from './jobsended';

/** Jobs off the first page (seen queued/running) fetched one by one per poll, at most. */
export const MAX_WATCHED_PER_POLL = 10;

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

/** The jobs known so far, newest first. */
export class KnownJobs {
  /**
   * `since`: when this page started watching, epoch seconds on the browser's
   * clock `now` (a job the first answer has ended at or after it is new).
   */
  constructor(since: number, now: () => number) {
    this._since = since;
    this._now = now;
  }

  /** Every job known (the first page, jobs pushed off it, older pages), newest first. */
  get jobs(): ReadonlyArray<IJob> {
    return this._jobs;
  }

  /** One job by id. */
  job(id: number): IJob | undefined {
    return this._byId.get(id);
  }

  /** Whether the server has older jobs than those known. */
  get hasOlder(): boolean {
    return typeof this._lo === 'number';
  }

  /** The `before` of the next older page (null: every job is known; undefined: none yet). */
  get before(): number | null | undefined {
    return this._lo;
  }

  /** Moves on when a poll drops the older jobs (a loading older page no longer joins on). */
  get generation(): number {
    return this._generation;
  }

  /** A job this page just submitted or reran: watched from now on. */
  track(job: IJob): void {
    const before = this._seen.get(job.id);
    if (before === undefined) {
      // Submitted here: watched from now on, even before the first answer.
      this._seen.set(job.id, isTerminal(job.state) ? 'queued' : job.state);
    }
    if (before === undefined || !isTerminal(before)) {
      this._byId.set(job.id, job); // never the submit's answer over a newer end state
    }
    this._sort();
  }

  /** A job fetched by id because it was looked at: known, not new. */
  add(job: IJob): void {
    if (!this._seen.has(job.id)) {
      this._seen.set(job.id, job.state);
    }
    this._byId.set(job.id, job);
    this._sort();
  }

  /** Jobs seen queued or running that are not on the first page: MAX_WATCHED_PER_POLL, in turns. */
  watchedIds(onPage: ReadonlySet<number>): number[] {
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

  /**
   * Take one poll's answers: the jobs that ended since the last (null: the
   * answer is stale, asked before the one already taken).
   */
  takePoll(poll: IJobsPoll): IJob[] | null {
    if (typeof poll.seq === 'number') {
      if (poll.seq < this._appliedSeq) {
        return null; // asked before the answer already applied: stale
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
    return ended;
  }

  /** Take an older page: the jobs on it that ended while watched (not new ones). */
  takeOlder(list: IJobList): IJob[] {
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
    this._sort();
    return ended;
  }

  private _sort(): void {
    this._jobs = sortJobs([...this._byId.values()]);
  }

  /** Jobs whose end was announced (once per job). */
  private _announced = new Set<number>();
  /** `seq` of the last answer taken. */
  private _appliedSeq = 0;
  private _byId = new Map<number, IJob>();
  /** Bumped when a poll drops the older jobs (a loading older page no longer joins on). */
  private _generation = 0;
  private _jobs: IJob[] = [];
  private _loaded = false;
  /**
   * Every job with an id from this up is known; null: every job; undefined:
   * nothing loaded yet. The `before` of the next older page.
   */
  private _lo: number | null | undefined = undefined;
  private _now: () => number;
  /** Job id -> its state when last seen (an ended job stays ended; see `detectEnded`). */
  private _seen = new Map<number, string>();
  /** When this page started watching (epoch seconds; see `detectEnded`). */
  private _since: number;
  /** Highest id on any first page so far. */
  private _top: number | undefined = undefined;
  private _watchTurn = 0;
}
