import type { IJob } from '../jobsapi';
import { detectEnded, JobsModel, sortJobs } from '../jobsmodel';
import { FakeServer } from './fakeserver';
import { job, results } from './jobfixtures';

const made: JobsModel[] = [];

function setup(jobs: IJob[], open: string[] = []) {
  const s = new FakeServer();
  let list = jobs;
  s.routes['GET jobs'] = () => ({ body: { jobs: list, currency: 'EUR' } });
  const m = new JobsModel({
    serverSettings: s.settings(),
    isNotebookOpen: path => open.includes(path)
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
});

describe('JobsModel', () => {
  it('loads every job, newest first, with the currency', async () => {
    const { s, m } = setup([job(1, 'succeeded', { created: 5 }), job(2, 'running', { created: 9 })]);
    let changes = 0;
    m.changed.connect(() => changes++);
    await m.refresh();
    expect(s.requests[0].path).toBe('jobs');
    expect(m.state).toBe('ok');
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
