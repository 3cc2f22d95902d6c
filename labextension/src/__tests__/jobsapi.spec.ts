import { ServerConnection } from '@jupyterlab/services';

import {
  errorMessage,
  getJob,
  getJobLog,
  isActive,
  isJobsUnavailable,
  isTerminal,
  jobEndpoint,
  jobsEndpoint,
  listJobs,
  submitJob,
  waitingReason
} from '../jobsapi';
import { FakeServer } from './fakeserver';
import { job } from './jobfixtures';

const request = { notebook: 'train.ipynb', cells: [], selected: ['c1'] };

async function caught(work: Promise<unknown>): Promise<unknown> {
  try {
    await work;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}

describe('jobs API helpers', () => {
  it('builds endpoints', () => {
    expect(jobsEndpoint()).toBe('jobs');
    expect(jobsEndpoint('work/a b.ipynb')).toBe('jobs?notebook=work%2Fa+b.ipynb');
    expect(jobsEndpoint('a&b=c.ipynb')).toBe('jobs?notebook=a%26b%3Dc.ipynb');
    expect(jobEndpoint(12)).toBe('jobs/12');
    expect(jobEndpoint(12, 'log')).toBe('jobs/12/log');
    expect(jobEndpoint(12, 'rerun')).toBe('jobs/12/rerun');
  });

  it('builds the query of a page', () => {
    expect(jobsEndpoint(null, { limit: 50 })).toBe('jobs?limit=50');
    expect(jobsEndpoint(undefined, { before: 71 })).toBe('jobs?before=71');
    expect(jobsEndpoint('work/a b.ipynb', { limit: 20, before: 120 })).toBe(
      'jobs?notebook=work%2Fa+b.ipynb&limit=20&before=120'
    );
    // Nothing to say: the plain path; out-of-range figures are clamped or left out.
    expect(jobsEndpoint(null, {})).toBe('jobs');
    expect(jobsEndpoint(null, { before: null })).toBe('jobs');
    expect(jobsEndpoint(null, { before: 0 })).toBe('jobs');
    expect(jobsEndpoint(null, { before: Number.NaN, limit: Number.NaN })).toBe('jobs');
    expect(jobsEndpoint(null, { limit: 0 })).toBe('jobs?limit=1');
    expect(jobsEndpoint(null, { limit: 9999, before: 12.7 })).toBe('jobs?limit=500&before=12');
    // What the server reads back.
    const query = new URLSearchParams(jobsEndpoint('x y/z+1.ipynb', { before: 3 }).split('?')[1]);
    expect(query.get('notebook')).toBe('x y/z+1.ipynb');
    expect(query.get('before')).toBe('3');
  });

  it('lists a page, reading next_before (null when an older server leaves it out)', async () => {
    const s = new FakeServer();
    s.routes['GET jobs'] = req =>
      req.path.includes('before=')
        ? { body: { jobs: [job(1, 'succeeded')], currency: 'USD' } }
        : { body: { jobs: [job(3, 'running'), job(2, 'succeeded')], next_before: 2, currency: 'USD' } };
    s.routes['GET jobs/3'] = () => ({ body: job(3, 'running') });
    const first = await listJobs(s.settings(), null, { limit: 2 });
    expect(s.requests[0].path).toBe('jobs?limit=2');
    expect(first.jobs.map(j => j.id)).toEqual([3, 2]);
    expect(first.next_before).toBe(2);
    const older = await listJobs(s.settings(), 'n.ipynb', { limit: 2, before: first.next_before });
    expect(s.requests[1].path).toBe('jobs?notebook=n.ipynb&limit=2&before=2');
    expect(older.jobs.map(j => j.id)).toEqual([1]);
    expect(older.next_before).toBeNull();
    const one = await getJob(3, s.settings());
    expect(s.requests[2].path).toBe('jobs/3');
    expect(one.state).toBe('running');
  });

  it('classifies states', () => {
    expect(isActive('queued')).toBe(true);
    expect(isActive('running')).toBe(true);
    expect(isActive('succeeded')).toBe(false);
    for (const s of ['succeeded', 'failed', 'cancelled', 'lost']) {
      expect(isTerminal(s)).toBe(true);
    }
    expect(isTerminal('running')).toBe(false);
  });

  it('sends the request as JSON and reads the log from an offset', async () => {
    const s = new FakeServer();
    s.routes['POST jobs'] = () => ({ status: 201, body: { id: 3 } });
    s.routes['GET jobs/3/log'] = () => ({
      body: { offset: 10, next_offset: 20, size: 20, text: 'x', complete: false }
    });
    s.routes['GET jobs'] = () => ({ body: { jobs: [], currency: 'USD' } });
    await submitJob(request, s.settings());
    expect(JSON.parse(s.requests[0].body)).toEqual(request);
    const log = await getJobLog(3, 10.7, s.settings());
    expect(log.next_offset).toBe(20);
    expect(s.requests[1].path).toBe('jobs/3/log?offset=10');
    await listJobs(s.settings());
    expect(s.requests[2].path).toBe('jobs');
  });
});

describe('errorMessage', () => {
  it("shows the server's message for a refused budget (409) and oversized variables (413)", async () => {
    const s = new FakeServer();
    s.routes['POST jobs'] = req =>
      JSON.parse(req.body).notebook === 'big.ipynb'
        ? { status: 413, body: { status: 413, reason: 'Payload Too Large', message: 'the variables to send are 3.2 GiB; the limit is 1 GiB' } }
        : { status: 409, body: { status: 409, reason: 'Conflict', message: 'budget "team" is spent: offloads are refused' } };
    const refused = await caught(submitJob(request, s.settings()));
    expect(refused).toBeInstanceOf(ServerConnection.ResponseError);
    expect(errorMessage(refused)).toBe('budget "team" is spent: offloads are refused');
    const big = await caught(submitJob({ ...request, notebook: 'big.ipynb' }, s.settings()));
    expect(errorMessage(big)).toBe('the variables to send are 3.2 GiB; the limit is 1 GiB');
  });

  it('falls back to the status for bodies without a message', async () => {
    const s = new FakeServer();
    // No route: the fake answers an HTML 404.
    const missing = await caught(listJobs(s.settings()));
    expect(isJobsUnavailable(missing)).toBe(true);
    expect(errorMessage(missing)).toMatch(/^the server answered 404/);
    s.routes['GET jobs'] = () => ({ status: 400, body: { detail: 'x' } });
    expect(errorMessage(await caught(listJobs(s.settings())))).toMatch(/^the server answered 400/);
    s.routes['GET jobs'] = () => ({ status: 503, body: { message: 'batch jobs are turned off' } });
    const off = await caught(listJobs(s.settings()));
    expect(isJobsUnavailable(off)).toBe(true);
    expect(errorMessage(off)).toBe('batch jobs are turned off');
  });

  it('describes network errors and plain errors', async () => {
    const s = new FakeServer();
    s.routes['GET jobs'] = () => 'network-error';
    expect(errorMessage(await caught(listJobs(s.settings())))).toBe('the server cannot be reached');
    expect(errorMessage(new Error('boom'))).toBe('boom');
    expect(errorMessage('text')).toBe('text');
  });
});


describe('waitingReason', () => {
  it("says why a cluster job waits: Kubernetes' words or Slurm's reason", () => {
    expect(waitingReason(job(1, 'queued'))).toBeNull();
    expect(waitingReason(job(1, 'queued', { backend_detail: null }))).toBeNull();
    expect(
      waitingReason(
        job(1, 'queued', {
          backend_detail: { waiting: '0/3 nodes are available: 3 Insufficient nvidia.com/gpu' }
        })
      )
    ).toBe('0/3 nodes are available: 3 Insufficient nvidia.com/gpu');
    expect(
      waitingReason(
        job(2, 'queued', { backend_detail: { slurm_state: 'PENDING', reason: 'Resources' } })
      )
    ).toBe('PENDING: Resources');
    expect(
      waitingReason(job(3, 'running', { backend_detail: { slurm_state: 'RUNNING', reason: 'None' } }))
    ).toBeNull();
  });
});
