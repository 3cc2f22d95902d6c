import { ServerConnection } from '@jupyterlab/services';

import {
  errorMessage,
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
    expect(jobsEndpoint('work/a b.ipynb')).toBe('jobs?notebook=work%2Fa%20b.ipynb');
    expect(jobEndpoint(12)).toBe('jobs/12');
    expect(jobEndpoint(12, 'log')).toBe('jobs/12/log');
    expect(jobEndpoint(12, 'rerun')).toBe('jobs/12/rerun');
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
