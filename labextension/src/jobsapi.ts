/**
 * Types and request helpers for costguard's batch jobs
 * (`{baseUrl}costguard/api/jobs...`, described by `jupyter_costguard/web/openapi.yaml`,
 * whose schemas the types here are derived from).
 * Pure REST: nothing here talks to a kernel.
 */
import type * as nbformat from '@jupyterlab/nbformat';
import { ServerConnection } from '@jupyterlab/services';

import { Accepts, errorStatus, IOwnerFields, Lenient, requestAPI, Schemas } from './api';
import type { paths } from './generated/openapi';

/** What a job asks for (`Resources`); null: the backend's default. */
export type IJobResources = Schemas['Resources'];

/**
 * Body of `POST jobs` and `POST jobs/slice` (`SubmitRequest`): the notebook's
 * server-relative path, its cells as the user sees them (outputs left out),
 * each with an `id`, the ids of the selected code cells, the running kernel
 * `send` variables are taken from, names to bring back (default: what the
 * selected cells define) and the backend (the server's default when absent).
 */
export interface ISubmitRequest extends Omit<Schemas['SubmitRequest'], 'cells'> {
  cells: nbformat.ICell[];
}

/** One cell of a slice: why the job runs it (`SliceCell`). */
export type ISliceCell = Schemas['SliceCell'];

/**
 * What a job runs: the selected cells and the earlier ones they need
 * (`Slice`; `warnings`: what the slicer could not decide, in words).
 */
export type ISlice = Schemas['Slice'];

/**
 * Response of `POST jobs/slice` (`max_send_bytes`: the largest pickle of
 * `send` variables a submit accepts; absent from older servers).
 */
export interface ISlicePreview extends Lenient<Schemas['SlicePreview'], 'slice'> {}

/**
 * Body of `POST jobs/estimate` (`EstimateRequest`): the submit's `backend`
 * and `resources` (the server's defaults where absent).
 */
export type IEstimateRequest = Schemas['EstimateRequest'];

/**
 * Response of `POST jobs/estimate` (`Estimate`): the hourly price of what the
 * job asks for on its backend (null: not priced, `detail` says why), the most
 * it can cost within its time limit, where the figure came from (`source`,
 * `detail`) and its currency; for SkyPilot the optimizer's `choice` and the
 * price cap.
 */
export type IEstimate = Schemas['Estimate'];

/** Job states; the last four are terminal. */
export type JobState = Schemas['Job']['state'];

/** Where a job is in its run. */
export type JobPhase = Schemas['Job']['phase'];

/**
 * One batch job (`Job`; `user`/`server`: whose server submitted it, under
 * JupyterHub). Times are epoch seconds; `selected` the ids of the selected
 * cells; `bring_back` the names the job pickles back when it ends, chosen as
 * `bring_back_from` says (`request`: named; `later_cells`: what the selected
 * cells define that later cells read; `selected_cells`: no code cell followed
 * the selection, all they define); `label` e.g. `ran as job 12 on local ·
 * 3m12s · USD 0.41`; `log_tail` the last lines of the log; `backend_detail`
 * what a cluster says about a job that has not ended (why it waits).
 */
export interface IJob
  extends IOwnerFields,
    Lenient<
      Omit<Schemas['Job'], 'user' | 'server' | 'state' | 'phase' | 'bring_back_from'>,
      | 'id'
      | 'notebook'
      | 'backend'
      | 'created'
      | 'started'
      | 'ended'
      | 'elapsed_seconds'
      | 'attempts'
      | 'max_attempts'
      | 'exit_reason'
      | 'spend'
      | 'currency'
      | 'resources'
      | 'selected'
      | 'label'
      | 'log_tail'
    > {
  state: JobState | string;
  phase: JobPhase | string;
  bring_back_from?: Schemas['Job']['bring_back_from'] | string;
  [key: string]: unknown;
}

/**
 * Why a cluster job has not started, in a line: Kubernetes' `waiting`, or Slurm's state
 * and pending reason; null when there is nothing to say.
 */
export function waitingReason(job: IJob): string | null {
  const detail = job.backend_detail;
  if (!detail || typeof detail !== 'object') {
    return null;
  }
  if (typeof detail.waiting === 'string' && detail.waiting) {
    return detail.waiting;
  }
  const reason = detail.reason;
  if (typeof reason === 'string' && reason && reason !== 'None') {
    const state = typeof detail.slurm_state === 'string' ? detail.slurm_state : 'pending';
    return `${state}: ${reason}`;
  }
  return null;
}

/** Response of `POST jobs`: the job and its slice. */
export interface ISubmittedJob extends IJob {
  slice: ISlice;
}

/**
 * Response of `GET jobs`: one page, newest first (by id). `next_before` is
 * the `before` to ask for the next (older) page: the id of the page's oldest
 * job; null when there are no older jobs (and from servers that do not page,
 * whose answer holds every job: `listJobs` fills it in).
 */
export interface IJobList extends Omit<Schemas['JobList'], 'jobs'> {
  jobs: IJob[];
}

/** The query of `GET jobs`. */
type JobsQuery = NonNullable<paths['/jobs']['get']['parameters']['query']>;

/** Which page of `GET jobs`: `limit` jobs (the server's default 50, 1..500) with ids below `before`. */
export interface IJobPage extends Pick<JobsQuery, 'limit'> {
  /** null: the first page. */
  before?: JobsQuery['before'] | null;
}

/** Jobs per page the Jobs panel asks for (the server's default). */
export const JOBS_PAGE_SIZE = 50;

/** The most jobs the server answers in one page. */
export const JOBS_PAGE_MAX = 500;

/** Response of `GET jobs/{id}/log` (`complete`: the job has ended and this is the end of its log). */
export type IJobLog = Schemas['JobLog'];

/** The schema of `GET jobs/{id}/results`. */
type JobResultsSchema = Schemas['JobResults'];

/** A selected cell's outputs from the job. */
export interface IJobCellOutputs extends Omit<JobResultsSchema['cells'][number], 'outputs'> {
  outputs: nbformat.IOutput[];
}

/** A name the job brought back. */
export type IJobResult = JobResultsSchema['results'][number];

/**
 * Response of `GET jobs/{id}/results`: `bring_back` the names the job was to
 * bring back (`results`: those it did); `load_code` Python that loads the
 * results into a kernel (only the `names` asked for, see `getJobResults`),
 * null when there are none.
 */
export interface IJobResults
  extends Lenient<
    Omit<JobResultsSchema, 'cells'>,
    'job' | 'state' | 'label' | 'results' | 'load_code'
  > {
  cells: IJobCellOutputs[];
  [key: string]: unknown;
}

/**
 * The jobs API held to its schemas: the documents it answers are what these
 * types read, and a request this module sends is one the server accepts.
 */
export type JobsApiContract = [
  Accepts<IJob, Schemas['Job']>,
  Accepts<ISubmittedJob, Schemas['SubmittedJob']>,
  Accepts<IJobList, Schemas['JobList']>,
  Accepts<ISlicePreview, Schemas['SlicePreview']>,
  Accepts<IJobLog, Schemas['JobLog']>,
  // outputs are nbformat's, which the document leaves as objects
  Accepts<Omit<IJobResults, 'cells'>, Omit<Schemas['JobResults'], 'cells'>>,
  Accepts<Schemas['SubmitRequest'], ISubmitRequest>,
  Accepts<IEstimate, Schemas['Estimate']>,
  Accepts<Schemas['EstimateRequest'], IEstimateRequest>
];

/** States a job ends in. */
export const TERMINAL_STATES: ReadonlySet<string> = new Set([
  'succeeded',
  'failed',
  'cancelled',
  'lost'
]);

/** States of a job that has not ended. */
export const ACTIVE_STATES: ReadonlySet<string> = new Set(['queued', 'running']);

/** Whether a job has ended. */
export function isTerminal(state: string): boolean {
  return TERMINAL_STATES.has(state);
}

/** Whether a job is queued or running. */
export function isActive(state: string): boolean {
  return ACTIVE_STATES.has(state);
}

/**
 * `GET jobs` path, optionally for one notebook and one page (`limit` is
 * clamped to 1..500 and `before` must be a positive id; others are left out).
 */
export function jobsEndpoint(notebook?: string | null, page?: IJobPage): string {
  const query = new URLSearchParams();
  if (notebook) {
    query.set('notebook', notebook);
  }
  const limit = page?.limit;
  if (typeof limit === 'number' && Number.isFinite(limit)) {
    query.set('limit', String(Math.min(JOBS_PAGE_MAX, Math.max(1, Math.floor(limit)))));
  }
  const before = page?.before;
  if (typeof before === 'number' && Number.isFinite(before) && before >= 1) {
    query.set('before', String(Math.floor(before)));
  }
  const text = query.toString();
  return text ? `jobs?${text}` : 'jobs';
}

/** Path of a job or one of its sub-resources. */
export function jobEndpoint(
  id: number,
  sub?: 'log' | 'results' | 'cancel' | 'rerun'
): string {
  const base = `jobs/${encodeURIComponent(String(id))}`;
  return sub ? `${base}/${sub}` : base;
}

/** `POST jobs/slice`: what a submit would run (and how much it may send). */
export function previewSliceDoc(
  request: ISubmitRequest,
  settings?: ServerConnection.ISettings
): Promise<ISlicePreview> {
  return requestAPI<ISlicePreview>(
    'jobs/slice',
    { method: 'POST', body: JSON.stringify(request) },
    settings
  );
}

/** `POST jobs/slice`: what a submit would run. */
export async function previewSlice(
  request: ISubmitRequest,
  settings?: ServerConnection.ISettings
): Promise<ISlice> {
  return (await previewSliceDoc(request, settings)).slice;
}

/** `POST jobs/estimate`: what a job would cost on its backend, before it is submitted. */
export function estimateJob(
  request: IEstimateRequest,
  settings?: ServerConnection.ISettings
): Promise<IEstimate> {
  return requestAPI<IEstimate>(
    'jobs/estimate',
    { method: 'POST', body: JSON.stringify(request) },
    settings
  );
}

/** `POST jobs`: submit; answers the queued job with its slice. */
export function submitJob(
  request: ISubmitRequest,
  settings?: ServerConnection.ISettings
): Promise<ISubmittedJob> {
  return requestAPI<ISubmittedJob>(
    'jobs',
    { method: 'POST', body: JSON.stringify(request) },
    settings
  );
}

/**
 * `GET jobs` (all jobs, or one notebook's), newest first: the first page, or
 * the one `page` asks for. `next_before` is null when the server left it out
 * (servers from before paging answer every job).
 */
export async function listJobs(
  settings?: ServerConnection.ISettings,
  notebook?: string | null,
  page?: IJobPage
): Promise<IJobList> {
  const reply = await requestAPI<IJobList>(
    jobsEndpoint(notebook, page),
    { method: 'GET' },
    settings
  );
  const next = reply?.next_before;
  return {
    ...reply,
    jobs: Array.isArray(reply?.jobs) ? reply.jobs : [],
    next_before: typeof next === 'number' && Number.isFinite(next) ? next : null
  };
}

/** `GET jobs/{id}`: one job's document (404 when there is no such job). */
export function getJob(id: number, settings?: ServerConnection.ISettings): Promise<IJob> {
  return requestAPI<IJob>(jobEndpoint(id), { method: 'GET' }, settings);
}

/** `GET jobs/{id}/log?offset=N`. */
export function getJobLog(
  id: number,
  offset: number,
  settings?: ServerConnection.ISettings
): Promise<IJobLog> {
  const at = Math.max(0, Math.floor(offset));
  return requestAPI<IJobLog>(
    `${jobEndpoint(id, 'log')}?offset=${at}`,
    { method: 'GET' },
    settings
  );
}

/** `GET jobs/{id}/results`. */
export function getJobResults(
  id: number,
  settings?: ServerConnection.ISettings,
  names?: ReadonlyArray<string> | null
): Promise<IJobResults> {
  let path = jobEndpoint(id, 'results');
  if (names) {
    // `names`: what load_code loads (identifiers, each one the job brought back)
    path += `?names=${encodeURIComponent(names.join(','))}`;
  }
  return requestAPI<IJobResults>(path, { method: 'GET' }, settings);
}

/** `POST jobs/{id}/cancel` (409 when it has already ended). */
export function cancelJob(
  id: number,
  settings?: ServerConnection.ISettings
): Promise<IJob> {
  return requestAPI<IJob>(jobEndpoint(id, 'cancel'), { method: 'POST' }, settings);
}

/** `POST jobs/{id}/rerun`: the same spec again, as a new job. */
export function rerunJob(
  id: number,
  settings?: ServerConnection.ISettings
): Promise<IJob> {
  return requestAPI<IJob>(jobEndpoint(id, 'rerun'), { method: 'POST' }, settings);
}

/** Whether an error means the server has no jobs API here (404) or turned it off (503). */
export function isJobsUnavailable(error: unknown): boolean {
  const status = errorStatus(error);
  return status === 404 || status === 503;
}

/**
 * A message for the user from a failed request: the server's `message` for
 * 4xx/5xx JSON errors (e.g. 409 "budget refuses offloads", 413 "variables too
 * large"), else the HTTP status, else the error's own text.
 */
export function errorMessage(error: unknown): string {
  if (error instanceof ServerConnection.ResponseError) {
    const text = typeof error.message === 'string' ? error.message.trim() : '';
    const status = error.response.status;
    const generic =
      !text ||
      text.startsWith('<') ||
      text === '[object Object]' ||
      text.startsWith('Invalid response:');
    if (!generic) {
      return text;
    }
    const reason = error.response.statusText;
    return `the server answered ${status}${reason ? ` ${reason}` : ''}`;
  }
  if (error instanceof ServerConnection.NetworkError) {
    return 'the server cannot be reached';
  }
  if (error instanceof Error) {
    return error.message || String(error);
  }
  return String(error);
}
