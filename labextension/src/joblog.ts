/**
 * The Jobs panel's followed log: the expanded job's log, read incrementally
 * (`GET jobs/{id}/log?offset=N`, a few chunks per poll) and kept as its last
 * MAX_LOG_CHARS characters, so a long-running job's log never fills the page.
 */
import type { ServerConnection } from '@jupyterlab/services';

import { getJobLog, IJob } from './jobsapi';

/** How much of a followed log is kept (its tail), in characters. */
export const MAX_LOG_CHARS = 256 * 1024;

/** Log chunks fetched per poll for the expanded job. */
const MAX_LOG_CHUNKS_PER_TICK = 4;

/** A followed log. */
interface ILogState {
  text: string;
  next: number;
  complete: boolean;
}

/** The logs followed so far, by job id. */
export class JobLogs {
  constructor(serverSettings?: ServerConnection.ISettings) {
    this._serverSettings = serverSettings;
  }

  /** The log shown for a job: the followed log when loaded, else the job's tail. */
  text(job: IJob): string {
    const log = this._logs.get(job.id);
    return log && (log.text || log.complete) ? log.text : job.log_tail ?? '';
  }

  /**
   * Fetch what is new in job `id`'s log. Resolves true when it read some
   * (false: already following, the log is complete, or `stopped()` said so
   * once an answer came).
   */
  async follow(id: number, stopped: () => boolean): Promise<boolean> {
    if (this._following) {
      return false;
    }
    const log = this._logs.get(id) ?? { text: '', next: 0, complete: false };
    if (log.complete) {
      return false;
    }
    this._following = true;
    try {
      for (let i = 0; i < MAX_LOG_CHUNKS_PER_TICK; i++) {
        const chunk = await getJobLog(id, log.next, this._serverSettings);
        if (stopped()) {
          return false;
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
      return true;
    } finally {
      this._following = false;
    }
  }

  private _following = false;
  private _logs = new Map<number, ILogState>();
  private _serverSettings?: ServerConnection.ISettings;
}
