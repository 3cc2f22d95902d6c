/**
 * Job documents shaped like the server's (openapi.yaml `Job`), and a
 * notification manager stand-in that records what was shown.
 */
import type { Notification } from '@jupyterlab/apputils';

import type { IJob, IJobResults, ISlice, ISubmittedJob } from '../jobsapi';
import type { FakeServer } from './fakeserver';

export function job(id: number, state: string, extra: Partial<IJob> = {}): IJob {
  const ended = ['succeeded', 'failed', 'cancelled', 'lost'].includes(state);
  return {
    id,
    notebook: 'work/train.ipynb',
    backend: 'local',
    state,
    phase: ended ? 'done' : state === 'queued' ? 'queued' : 'running',
    created: 1000 + id,
    started: state === 'queued' ? null : 1001 + id,
    ended: ended ? 1200 + id : null,
    elapsed_seconds: 192,
    attempts: state === 'queued' ? 0 : 1,
    max_attempts: 1,
    exit_reason: state === 'failed' ? 'exit code 1' : null,
    spend: 0.41,
    currency: 'USD',
    resources: { gpus: null, cpus: null, memory_gib: null, time_limit_seconds: 3600 },
    selected: ['c3'],
    label: `ran as job ${id} on local · 3m12s · USD 0.41`,
    log_tail: `tail of ${id}`,
    estimate: null,
    charged_per_hour: null,
    ...extra
  };
}

export const slice: ISlice = {
  cells: [
    { cell_id: 'c1', index: 0, selected: false, provides: ['np'], reason: 'defines np used by cell 3', source: 'import numpy as np\nx = 1' },
    { cell_id: 'c3', index: 2, selected: true, provides: ['y'], reason: 'selected', source: 'y = np.ones(3)' }
  ],
  defines: ['y'],
  unresolved: []
};

export function submitted(id: number): ISubmittedJob {
  return { ...job(id, 'queued'), slice };
}

export function results(id: number, extra: Partial<IJobResults> = {}): IJobResults {
  return {
    job: id,
    state: 'succeeded',
    label: `ran as job ${id} on local · 3m12s · USD 0.41`,
    cells: [
      {
        cell_id: 'c3',
        outputs: [{ output_type: 'stream', name: 'stdout', text: 'done\n' }],
        execution_count: 2
      }
    ],
    results: [{ name: 'y', type: 'ndarray', size_bytes: 24 }],
    load_code: 'y = load()',
    ...extra
  };
}

export interface IShown {
  id: string;
  message: string;
  type: Notification.TypeOptions;
  options: any;
}

/** Records notify() calls; `click` runs an action's callback. */
export class FakeNotifier {
  shown: IShown[] = [];

  notify(message: string, type: Notification.TypeOptions, options: any = {}): string {
    const id = `n${this.shown.length + 1}`;
    this.shown.push({ id, message, type, options });
    return id;
  }

  last(): IShown | undefined {
    return this.shown[this.shown.length - 1];
  }

  click(shown: IShown, label: string): void {
    const action = (shown.options.actions as Notification.IAction[]).find(a => a.label === label);
    if (!action) {
      throw new Error(`no action ${label}`);
    }
    action.callback({ preventDefault() {} } as unknown as MouseEvent);
  }
}

/** Jobs `id` from..to, in `state` (others as `job` makes them). */
export function jobRange(from: number, to: number, state = 'succeeded'): IJob[] {
  const jobs: IJob[] = [];
  for (let id = from; id <= to; id++) {
    jobs.push(job(id, state));
  }
  return jobs;
}

/**
 * Answer `GET jobs` the way the server pages it (newest first by id, `limit`
 * default 50, `before`, `next_before` the page's oldest id when there are
 * more), and `GET jobs/{id}` (404 for an unknown id, up to `maxId`), from
 * what `all()` says the server holds now.
 */
export function servePagedJobs(s: FakeServer, all: () => IJob[], maxId = 400): void {
  s.routes['GET jobs'] = req => {
    const query = new URLSearchParams(req.path.split('?')[1] ?? '');
    const limit = Number(query.get('limit') ?? 50);
    const before = query.has('before') ? Number(query.get('before')) : Infinity;
    const notebook = query.get('notebook');
    const older = all()
      .filter(j => j.id < before && (!notebook || j.notebook === notebook))
      .sort((a, b) => b.id - a.id);
    const jobs = older.slice(0, limit);
    const more = older.length > limit;
    return {
      body: { jobs, next_before: more ? jobs[jobs.length - 1].id : null, currency: 'USD' }
    };
  };
  for (let id = 1; id <= maxId; id++) {
    s.routes[`GET jobs/${id}`] = () => {
      const found = all().find(j => j.id === id);
      return found
        ? { body: found }
        : { status: 404, body: { message: `no job ${id}` } };
    };
  }
}
