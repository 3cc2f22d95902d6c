import type { ServerConnection } from '@jupyterlab/services';

import type { IJob } from '../jobsapi';
import { detectEnded, sortJobs } from '../jobsended';
import { JobsModel } from '../jobsmodel';
import { FakeServer } from './fakeserver';
import { job, jobRange, results, servePagedJobs } from './jobfixtures';

const made: JobsModel[] = [];

function setup(jobs: IJob[], open: string[] = [], since?: number) {
  const s = new FakeServer();
  let list = jobs;
  s.routes['GET jobs'] = () => ({ body: { jobs: list, currency: 'EUR' } });
  const m = new JobsModel({
    serverSettings: s.settings(),
    isNotebookOpen: path => open.includes(path),
    since
  });
  made.push(m);
  const ended: IJob[] = [];
  m.jobEnded.connect((_, j) => ended.push(j));
  return {
    s,
    m,
    ended,
    set(next: IJob[]) {
      list = next;
    }
  };
}

/** Answers read when asked, handed over when released (to deliver them out of order). */
class Gate {
  hold(): { release: () => void } {
    let release = () => undefined as void;
    const held = new Promise<void>(resolve => {
      release = resolve;
    });
    this._next.push(held);
    return { release: () => release() };
  }

  wrap(settings: ServerConnection.ISettings): ServerConnection.ISettings {
    const inner = settings.fetch;
    const fetch = (async (input: RequestInfo, init?: RequestInit) => {
      const held = this._next.shift();
      const response = await inner(input, init);
      if (held) {
        await held;
      }
      return response;
    }) as typeof settings.fetch;
    return { ...settings, fetch };
  }

  private _next: Promise<void>[] = [];
}

function gatedSetup(jobs: IJob[]) {
  const s = new FakeServer();
  let list = jobs;
  s.routes['GET jobs'] = () => ({ body: { jobs: list, currency: 'EUR' } });
  const gate = new Gate();
  const m = new JobsModel({ serverSettings: gate.wrap(s.settings()) });
  made.push(m);
  const ended: IJob[] = [];
  m.jobEnded.connect((_, j) => ended.push(j));
  return {
    s,
    m,
    ended,
    gate,
    set(next: IJob[]) {
      list = next;
    }
  };
}

afterEach(() => {
  made.splice(0).forEach(m => m.dispose());
});

describe('sortJobs / detectEnded', () => {
  it('sorts newest first, ties by id', () => {
    const jobs = [
      job(1, 'succeeded', { created: 10 }),
      job(3, 'running', { created: 30 }),
      job(2, 'queued', { created: 30 })
    ];
    expect(sortJobs(jobs).map(j => j.id)).toEqual([3, 2, 1]);
  });

  it('reports active → terminal, and new terminal jobs only after the first load', () => {
    const seen = new Map<number, string>();
    expect(detectEnded(seen, [job(1, 'succeeded'), job(2, 'running')], true)).toEqual([]);
    const ended = detectEnded(
      seen,
      [job(1, 'succeeded'), job(2, 'failed'), job(3, 'cancelled'), job(4, 'running')],
      false
    );
    expect(ended.map(j => j.id)).toEqual([2, 3]);
    expect(detectEnded(seen, [job(2, 'failed'), job(3, 'cancelled')], false)).toEqual([]);
  });

  it('announces each job once, also a job seen active before the first load', () => {
    const seen = new Map<number, string>([[5, 'queued']]); // submitted here
    const announced = new Set<number>();
    expect(detectEnded(seen, [job(5, 'succeeded'), job(6, 'failed')], true, announced).map(j => j.id)).toEqual([5]);
    // a stale answer (still running) neither regresses the state nor makes it end twice
    expect(detectEnded(seen, [job(5, 'running')], false, announced)).toEqual([]);
    expect(seen.get(5)).toBe('succeeded');
    expect(detectEnded(seen, [job(5, 'succeeded')], false, announced)).toEqual([]);
    seen.set(5, 'running');
    expect(detectEnded(seen, [job(5, 'succeeded')], false, announced)).toEqual([]);
  });
});

describe('JobsModel', () => {
  it('loads every job, newest first, with the currency', async () => {
    const { s, m } = setup([job(1, 'succeeded', { created: 5 }), job(2, 'running', { created: 9 })]);
    let changes = 0;
    m.changed.connect(() => changes++);
    await m.refresh();
    expect(s.requests[0].path).toBe('jobs?limit=50');
    expect(m.state).toBe('ok');
    // An older server answers every job and no next_before: nothing older to load.
    expect(m.hasOlder).toBe(false);
    expect(m.jobs.map(j => j.id)).toEqual([2, 1]);
    expect(m.currency).toBe('EUR');
    expect(m.hasActive).toBe(true);
    expect(changes).toBeGreaterThan(0);
  });

  it('does not notify jobs that had already ended at the first load', async () => {
    const { m, ended, set } = setup([job(1, 'succeeded'), job(2, 'failed'), job(3, 'running')]);
    await m.refresh();
    expect(ended).toEqual([]);
    set([job(1, 'succeeded'), job(2, 'failed'), job(3, 'running')]);
    await m.refresh();
    expect(ended).toEqual([]);
    set([job(1, 'succeeded'), job(2, 'failed'), job(3, 'succeeded')]);
    await m.refresh();
    expect(ended.map(j => [j.id, j.state])).toEqual([[3, 'succeeded']]);
    await m.refresh();
    expect(ended).toHaveLength(1);
  });

  it('notifies a job that ended after the page opened, before its first answer', async () => {
    // the demo: job 1 ended between this page's start and its first poll, and its end was
    // never announced (jobs 2 and 3, ended later, were); jobs ended before the page stay quiet
    const { m, ended, set } = setup(
      [job(1, 'succeeded', { ended: 1500 }), job(0, 'failed', { ended: 1499 })],
      [],
      1500
    );
    await m.refresh();
    expect(ended.map(j => [j.id, j.state])).toEqual([[1, 'succeeded']]);
    set([job(2, 'succeeded', { ended: 1600 }), job(1, 'succeeded', { ended: 1500 })]);
    await m.refresh();
    await m.refresh();
    expect(ended.map(j => j.id)).toEqual([1, 2]); // once each
    expect(detectEnded(new Map(), [job(5, 'lost', { ended: null })], true, new Set(), 0)).toEqual(
      []
    );
  });

  it("compares a job's end with the page's opening on the server's clock", async () => {
    // the browser's clock is 10 minutes ahead of the server's: the page opened at 2100 on
    // it, 1500 on the server's; job 1 ended at 1550 (server), after the page opened
    const s = new FakeServer();
    s.routes['GET jobs'] = () => ({
      body: {
        jobs: [job(1, 'succeeded', { ended: 1550 }), job(0, 'failed', { ended: 1450 })],
        next_before: null,
        currency: 'EUR',
        time: 1560
      }
    });
    const m = new JobsModel({ serverSettings: s.settings(), since: 2100, now: () => 2160 });
    made.push(m);
    const ended: IJob[] = [];
    m.jobEnded.connect((_, j) => ended.push(j));
    await m.refresh();
    expect(ended.map(j => j.id)).toEqual([1]); // not job 0: it ended before the page opened
  });

  it('notifies a job submitted and ended between two polls, and tracked jobs', async () => {
    const { m, ended, set } = setup([]);
    await m.refresh();
    m.track(job(7, 'queued'));
    expect(m.jobs.map(j => j.id)).toEqual([7]);
    expect(m.hasActive).toBe(true);
    set([job(8, 'lost'), job(7, 'cancelled')]);
    await m.refresh();
    expect(ended.map(j => j.id).sort()).toEqual([7, 8]);
  });

  it('announces a job once when an answer asked earlier arrives after a newer one', async () => {
    // The panel is open: its fast poll, the submit's refresh and a command's refresh overlap.
    const { m, ended, set, gate } = gatedSetup([]);
    m.visible = true;
    await m.refresh();
    m.track(job(1, 'queued'));
    set([job(1, 'running')]);
    const slow = gate.hold(); // the next answer is read now, delivered on release
    const older = m.refresh();
    set([job(1, 'succeeded')]);
    await m.refresh();
    expect(ended.map(j => [j.id, j.state])).toEqual([[1, 'succeeded']]);
    slow.release();
    await older;
    expect(m.job(1)?.state).toBe('succeeded'); // the stale "running" is dropped
    await m.refresh();
    await m.refresh();
    expect(ended).toHaveLength(1);
  });

  it('announces a job submitted before the first answer, ended in it', async () => {
    // The first job, submitted while the page's first poll was still out.
    const { m, ended, set } = setup([]);
    m.track(job(1, 'queued'));
    set([job(1, 'succeeded'), job(0, 'succeeded')]);
    await m.refresh();
    expect(ended.map(j => j.id)).toEqual([1]); // not job 0: it had ended before this page
    await m.refresh();
    expect(ended).toHaveLength(1);
  });

  it('keeps a just-submitted job when an answer read before it was created arrives', async () => {
    const { s, m, ended, set, gate } = gatedSetup([]);
    s.routes['GET jobs/1'] = () => ({ body: job(1, 'queued') });
    m.visible = true;
    await m.refresh();
    const slow = gate.hold();
    const older = m.refresh(); // read while the job was being created: no jobs yet
    m.track(job(1, 'queued'));
    slow.release();
    await older;
    expect(m.job(1)?.state).toBe('queued'); // still listed, still watched
    set([job(1, 'succeeded')]);
    await m.refresh();
    expect(ended.map(j => j.id)).toEqual([1]);
    // A late submit answer does not bring the ended job back to queued.
    m.track(job(1, 'queued'));
    expect(m.job(1)?.state).toBe('succeeded');
    await m.refresh();
    expect(ended).toHaveLength(1);
  });

  it('polls fast while visible or a job is active, slowly otherwise', async () => {
    const { m, set } = setup([job(1, 'succeeded')]);
    expect(m.interval).toBe(15);
    await m.refresh();
    expect(m.interval).toBe(15);
    m.visible = true;
    expect(m.interval).toBe(2);
    m.visible = false;
    expect(m.interval).toBe(15);
    set([job(2, 'queued'), job(1, 'succeeded')]);
    await m.refresh();
    expect(m.interval).toBe(2);
    set([job(2, 'succeeded'), job(1, 'succeeded')]);
    await m.refresh();
    expect(m.interval).toBe(15);
  });

  it('filters to the current notebook on request', async () => {
    const { m } = setup([
      job(1, 'succeeded', { notebook: 'work/train.ipynb' }),
      job(2, 'succeeded', { notebook: 'explore.ipynb' })
    ]);
    await m.refresh();
    expect(m.rows.map(j => j.id)).toEqual([2, 1]);
    m.filterToNotebook = true;
    expect(m.rows).toEqual([]);
    m.currentNotebook = 'work/train.ipynb';
    expect(m.rows.map(j => j.id)).toEqual([1]);
  });

  it('goes offline, or unavailable when the server has no jobs API, and rethrows', async () => {
    const { s, m } = setup([]);
    s.routes['GET jobs'] = () => 'network-error';
    await expect(m.refresh()).rejects.toBeTruthy();
    expect(m.state).toBe('offline');
    s.routes['GET jobs'] = () => ({ status: 503, body: { message: 'batch jobs are turned off' } });
    await expect(m.refresh()).rejects.toBeTruthy();
    expect(m.state).toBe('unavailable');
    expect(m.error?.message).toBe('batch jobs are turned off');
  });

  it('offers the actions that apply', async () => {
    const { s, m } = setup(
      [
        job(1, 'running'),
        job(2, 'succeeded'),
        job(3, 'failed', { notebook: 'closed.ipynb' }),
        job(4, 'cancelled')
      ],
      ['work/train.ipynb']
    );
    s.routes['GET jobs/2/results'] = () => ({ body: results(2) });
    s.routes['GET jobs/3/results'] = () => ({ body: results(3, { load_code: null }) });
    await m.refresh();
    const [j4, j3, j2, j1] = m.jobs;
    expect([j1, j2, j3, j4].map(j => m.canCancel(j))).toEqual([true, false, false, false]);
    expect([j1, j2, j3, j4].map(j => m.canInsert(j))).toEqual([false, true, false, false]);
    expect([j1, j2, j3, j4].map(j => m.canRerun(j))).toEqual([false, true, true, true]);
    // Load needs the results' load_code: fetched when the panel shows.
    expect(m.canLoad(j2)).toBe(false);
    m.visible = true;
    await m.refresh();
    await new Promise(resolve => setTimeout(resolve, 20));
    expect(m.canLoad(j2)).toBe(true);
    expect(m.canLoad(j3)).toBe(false);
    expect(s.count('GET', 'jobs/4/results')).toBe(0);
    await m.refresh();
    expect(s.count('GET', 'jobs/2/results')).toBe(1);
  });

  it('follows the expanded job\'s log from the last offset', async () => {
    const { s, m } = setup([job(5, 'running')]);
    const chunks = [
      { offset: 0, next_offset: 6, size: 6, text: 'hello\n', complete: false },
      { offset: 6, next_offset: 12, size: 12, text: 'world\n', complete: true }
    ];
    s.routes['GET jobs/5/log'] = () => ({ body: chunks.shift() });
    await m.refresh();
    expect(m.logText(m.jobs[0])).toBe('tail of 5');
    m.expanded = 5;
    await new Promise(resolve => setTimeout(resolve, 20));
    expect(m.logText(m.jobs[0])).toBe('hello\n');
    await m.refresh();
    expect(m.logText(m.jobs[0])).toBe('hello\nworld\n');
    expect(s.requests.filter(r => r.path.startsWith('jobs/5/log')).map(r => r.path)).toEqual([
      'jobs/5/log?offset=0',
      'jobs/5/log?offset=6'
    ]);
    await m.refresh();
    expect(s.count('GET', 'jobs/5/log?offset=12')).toBe(0);
    m.toggle(5);
    expect(m.expanded).toBeNull();
  });

  it('cancels and reruns through the API', async () => {
    const { s, m } = setup([job(1, 'running')]);
    s.routes['POST jobs/1/cancel'] = () => ({ status: 202, body: job(1, 'running') });
    s.routes['POST jobs/1/rerun'] = () => ({ status: 201, body: job(9, 'queued', { created: 5000 }) });
    await m.refresh();
    await m.cancel(1);
    expect(s.count('POST', 'jobs/1/cancel')).toBe(1);
    const rerun = await m.rerun(1);
    expect(rerun.id).toBe(9);
    expect(m.jobs[0].id).toBe(9);
  });

  it('rejects a cancel of an ended job with the server message', async () => {
    const { s, m } = setup([job(1, 'succeeded')]);
    s.routes['POST jobs/1/cancel'] = () => ({
      status: 409,
      body: { message: 'job 1 has already ended (succeeded)' }
    });
    await expect(m.cancel(1)).rejects.toThrow('job 1 has already ended (succeeded)');
  });
});

describe('JobsModel paging', () => {
  function paged(initial: IJob[], options: { pageSize?: number } = {}) {
    const s = new FakeServer();
    const server = { jobs: initial };
    servePagedJobs(s, () => server.jobs);
    const m = new JobsModel({ serverSettings: s.settings(), ...options });
    made.push(m);
    const ended: IJob[] = [];
    m.jobEnded.connect((_, j) => ended.push(j));
    const ids = () => m.jobs.map(j => j.id);
    return { s, m, server, ended, ids };
  }

  const range = (from: number, to: number) =>
    Array.from({ length: to - from + 1 }, (_, i) => to - i); // newest first

  it('polls the first page only, and appends the older pages it is asked for', async () => {
    const { s, m, ended, ids } = paged(jobRange(1, 120));
    await m.refresh();
    expect(s.requests.map(r => r.path)).toEqual(['jobs?limit=50']);
    expect(ids()).toEqual(range(71, 120));
    expect(m.hasOlder).toBe(true);

    await m.loadOlder();
    expect(s.requests[1].path).toBe('jobs?limit=50&before=71');
    expect(ids()).toEqual(range(21, 120));
    expect(m.hasOlder).toBe(true);
    await m.loadOlder();
    expect(s.requests[2].path).toBe('jobs?limit=50&before=21');
    expect(ids()).toEqual(range(1, 120));
    expect(m.hasOlder).toBe(false);
    expect(m.loadingOlder).toBe(false);
    expect(m.olderError).toBeNull();

    // Nothing older: no request.
    await m.loadOlder();
    expect(s.requests).toHaveLength(3);
    // Old jobs that had ended are not news.
    expect(ended).toEqual([]);
  });

  it('merges each poll with the older jobs loaded: first-page entries replace, no duplicates', async () => {
    const { m, server, ended, ids } = paged(jobRange(1, 120));
    await m.refresh();
    await m.loadOlder();
    expect(ids()).toEqual(range(21, 120));
    // 10 new jobs push 71..80 off the first page; job 100 changed.
    server.jobs = [
      ...jobRange(1, 120).map(j => (j.id === 100 ? { ...j, label: 'relabelled' } : j)),
      ...jobRange(121, 130, 'queued')
    ];
    await m.refresh();
    expect(ids()).toEqual(range(21, 130));
    expect(new Set(ids()).size).toBe(ids().length);
    expect(m.job(100)?.label).toBe('relabelled');
    expect(m.job(75)).toBeDefined();
    expect(m.hasOlder).toBe(true);
    // Still joins on below the oldest loaded job.
    await m.loadOlder();
    expect(ids()).toEqual(range(1, 130));
    expect(m.hasOlder).toBe(false);
    expect(ended).toEqual([]);
  });

  it('dedupes an older page that overlaps what is loaded', async () => {
    const { s, m, ids } = paged(jobRange(1, 60));
    await m.refresh();
    expect(ids()).toEqual(range(11, 60));
    // A page overlapping the first one (and out of order).
    s.routes['GET jobs'] = req =>
      req.path.includes('before=11')
        ? { body: { jobs: [job(12, 'succeeded'), job(5, 'succeeded'), job(11, 'succeeded'), job(10, 'failed')], next_before: 5, currency: 'USD' } }
        : { body: { jobs: [job(4, 'succeeded')], next_before: null, currency: 'USD' } };
    await m.loadOlder();
    expect(ids()).toEqual([...range(11, 60), 10, 5]);
    expect(m.hasOlder).toBe(true);
    await m.loadOlder();
    expect(s.requests[s.requests.length - 1].path).toBe('jobs?limit=50&before=5');
    expect(ids()).toEqual([...range(11, 60), 10, 5, 4]);
    expect(m.hasOlder).toBe(false);
  });

  it('still notices the end of a job pushed off the first page while it ran', async () => {
    const { s, m, server, ended, ids } = paged([
      job(1, 'succeeded'),
      job(2, 'running'),
      job(3, 'succeeded')
    ]);
    await m.refresh();
    expect(m.hasOlder).toBe(false);
    // 30 new jobs, then 30 more: job 2 is no longer on the first page.
    server.jobs = [...server.jobs, ...jobRange(4, 33, 'queued')];
    await m.refresh();
    expect(s.count('GET', 'jobs/2')).toBe(0); // on the first page until now
    server.jobs = [...server.jobs, ...jobRange(34, 63, 'succeeded')];
    await m.refresh();
    expect(s.count('GET', 'jobs/2')).toBe(1);
    // Kept in the list (with the others pushed off), still active.
    expect(ids()).toEqual(range(1, 63));
    expect(m.job(2)?.state).toBe('running');
    expect(m.hasOlder).toBe(false);
    // (34..63 were submitted and ended between two polls: news.)
    expect(ended.map(j => j.id)).toEqual(range(34, 63));
    ended.length = 0;

    server.jobs = server.jobs.map(j => (j.id === 2 ? job(2, 'failed') : j));
    await m.refresh();
    expect(ended.map(j => [j.id, j.state])).toEqual([[2, 'failed']]);
    expect(m.job(2)?.state).toBe('failed');
    // Ended: fired once, and no longer fetched on its own.
    const fetched = s.count('GET', 'jobs/2');
    await m.refresh();
    expect(ended).toHaveLength(1);
    expect(s.count('GET', 'jobs/2')).toBe(fetched);
  });

  it('after more new jobs than a page, drops the older ones but keeps watching the active', async () => {
    const { s, m, server, ended, ids } = paged([
      job(1, 'succeeded'),
      job(2, 'running'),
      job(3, 'succeeded')
    ]);
    await m.refresh();
    server.jobs = [...server.jobs, ...jobRange(4, 60, 'queued')];
    await m.refresh();
    // 11..60 on the first page, 4..10 never seen: 1 and 3 no longer join on.
    expect(ids()).toEqual([...range(11, 60), 2]);
    expect(s.count('GET', 'jobs/2')).toBe(1);
    expect(m.hasOlder).toBe(true);
    await m.loadOlder();
    expect(s.requests[s.requests.length - 1].path).toBe('jobs?limit=50&before=11');
    expect(ids()).toEqual(range(1, 60));
    expect(ended).toEqual([]);
    server.jobs = server.jobs.map(j => (j.id === 2 ? job(2, 'succeeded') : j));
    await m.refresh();
    expect(ended.map(j => j.id)).toEqual([2]);
  });

  it('fires jobEnded for an older page\'s job seen running, not for older jobs first seen ended', async () => {
    const { m, server, ended } = paged([...jobRange(1, 50), job(51, 'running'), ...jobRange(52, 101)]);
    await m.refresh();
    await m.loadOlder(); // 51 first seen running, on an older page
    expect(m.job(51)?.state).toBe('running');
    expect(m.hasActive).toBe(true);
    expect(ended).toEqual([]);
    server.jobs = server.jobs.map(j => (j.id === 51 ? job(51, 'succeeded') : j));
    await m.refresh();
    expect(ended.map(j => j.id)).toEqual([51]);
    expect(m.job(51)?.state).toBe('succeeded');
  });

  it('drops deleted jobs, and older jobs moving up onto the first page are not news', async () => {
    const { m, server, ended, ids } = paged(jobRange(1, 60));
    await m.refresh();
    expect(ids()).toEqual(range(11, 60));
    server.jobs = server.jobs.filter(j => j.id < 55);
    await m.refresh();
    expect(ids()).toEqual(range(5, 54));
    expect(ended).toEqual([]);
    expect(m.hasOlder).toBe(true);
    await m.loadOlder();
    expect(ids()).toEqual(range(1, 54));
  });

  it('stops watching a job the server no longer has', async () => {
    const { s, m, server, ids } = paged([job(1, 'running'), ...jobRange(2, 30)]);
    await m.refresh();
    server.jobs = [...server.jobs, ...jobRange(31, 60, 'queued')];
    await m.refresh();
    expect(ids()).toContain(1);
    server.jobs = server.jobs.filter(j => j.id !== 1);
    await m.refresh();
    expect(m.job(1)).toBeUndefined();
    const fetched = s.count('GET', 'jobs/1');
    await m.refresh();
    expect(s.count('GET', 'jobs/1')).toBe(fetched);
  });

  it('while filtered, reads older pages until one has a row to show', async () => {
    const all = jobRange(1, 200).map(j => (j.id === 5 ? { ...j, notebook: 'mine.ipynb' } : j));
    const { s, m } = paged(all);
    await m.refresh();
    m.filterToNotebook = true;
    m.currentNotebook = 'mine.ipynb';
    expect(m.rows).toEqual([]);
    await m.loadOlder();
    expect(s.requests.map(r => r.path)).toEqual([
      'jobs?limit=50',
      'jobs?limit=50&before=151',
      'jobs?limit=50&before=101',
      'jobs?limit=50&before=51'
    ]);
    expect(m.rows.map(j => j.id)).toEqual([5]);
    expect(m.hasOlder).toBe(false);
  });

  it('keeps a failed load\'s message, and loads again', async () => {
    const { s, m, ids } = paged(jobRange(1, 60));
    await m.refresh();
    const route = s.routes['GET jobs'];
    s.routes['GET jobs'] = req =>
      req.path.includes('before=')
        ? { status: 500, body: { message: 'database is locked' } }
        : route(req);
    let seen: [boolean, string][] = [];
    m.changed.connect(() => seen.push([m.loadingOlder, m.olderError ?? '']));
    await m.loadOlder();
    expect(seen[0]).toEqual([true, '']);
    expect(m.loadingOlder).toBe(false);
    expect(m.olderError).toBe('database is locked');
    expect(m.hasOlder).toBe(true);
    expect(ids()).toEqual(range(11, 60));
    s.routes['GET jobs'] = route;
    seen = [];
    await m.loadOlder();
    expect(m.olderError).toBeNull();
    expect(ids()).toEqual(range(1, 60));
  });

  it('fetches a job that is not loaded when asked for it', async () => {
    const { s, m, ended } = paged(jobRange(1, 80));
    await m.refresh();
    expect(m.job(7)).toBeUndefined();
    const seven = await m.fetchJob(7);
    expect(seven.id).toBe(7);
    expect(m.job(7)).toBe(seven);
    expect(s.count('GET', 'jobs/7')).toBe(1);
    await m.refresh();
    expect(m.job(7)).toBe(seven);
    await expect(m.fetchJob(999)).rejects.toBeTruthy();
    expect(ended).toEqual([]);
  });
});
