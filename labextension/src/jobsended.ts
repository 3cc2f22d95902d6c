/**
 * Which jobs ended, and in what order the Jobs panel lists them: the pure
 * rules the jobs model (`jobsmodel.ts`) applies to each answer. A job is
 * announced (`jobEnded`) once, when it ends while this page watches it; an
 * ended job never goes back to queued/running, whatever a stale answer says.
 */
import { IJob, isActive, isTerminal } from './jobsapi';

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
export function pageStart(): number {
  const origin = typeof performance !== 'undefined' ? performance.timeOrigin : NaN;
  return Number.isFinite(origin) && origin > 0 ? origin / 1000 : Date.now() / 1000;
}

