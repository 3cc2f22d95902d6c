/**
 * Types and request helpers for the costguard REST API
 * (`{baseUrl}costguard/api/...`, described by `jupyter_costguard/openapi.yaml`).
 *
 * Only REST calls to costguard live here: nothing in this extension talks to
 * a kernel (no kernel_info, no comm), so polling never resets idle timers.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** The instance costguard believes it runs on (null when unknown). */
export interface ICostInstance {
  provider?: string;
  instance_type?: string;
  gpu_model?: string | null;
  gpu_count?: number;
  gpu_memory_gib?: number | null;
  vcpus?: number;
  memory_gib?: number;
  region?: string | null;
  on_demand_per_hour?: number;
  spot_per_hour?: number | null;
  source_url?: string;
  /** Date the catalog row was retrieved (e.g. `2025-11-01`). */
  retrieved?: string;
  [key: string]: unknown;
}

/** Spend totals for the server since `since` (epoch seconds). */
export interface ICostTotals {
  spend?: number;
  waste?: number;
  unattributed?: number;
  unattributed_gpu?: number;
  seconds?: number;
  since?: number | null;
}

/** One minute of spend (`HistoryPoint`). */
export interface IHistoryPoint {
  /** Start of the minute, epoch seconds. */
  time: number;
  spend: number;
  waste: number;
}

/** Whose server this is, under JupyterHub (absent on older servers). */
export interface IOwnerFields {
  /**
   * The JupyterHub user whose server this is; null (or absent, on older
   * servers) when not under a hub.
   */
  user?: string | null;
  /**
   * The JupyterHub named server (`""`: the user's default server); null (or
   * absent) when not under a hub.
   */
  server?: string | null;
}

/** Fields every document carries (`Common`). */
export interface ICommonDoc extends IOwnerFields {
  simulated: boolean;
  currency: string;
  time: number | null;
}

/**
 * The part of the instance a container holds, when costguard runs in a
 * container given only some of the instance's GPUs, CPUs and memory.
 */
export interface ICostPriceShare {
  gpus_held: number;
  gpus_instance: number;
  /** 0..1 */
  cpu_share: number;
  /** 0..1 */
  memory_share: number;
  /** max(cpu_share, memory_share) */
  host_share: number;
  /** rate_per_hour / instance_rate_per_hour */
  fraction: number;
  /** One sentence. */
  detail: string;
}

/** Provenance of the price (`status.price`). */
export interface ICostPrice {
  /** `aws`, `gcp`, `azure`, ... */
  provider: string | null;
  instance_type: string | null;
  /** Where the machine is (metadata, environment or configuration). */
  region: string | null;
  /** Whose price is used. */
  region_priced: string | null;
  /** E.g. `price of us-east-1; eu-north-1 not in the catalog`. */
  region_note: string | null;
  /** `on-demand` or `spot`. */
  market: string;
  /** `config`, `metadata` or `environment`. */
  market_source: string;
  /** ISO date the price is from, e.g. `2025-01-15`. */
  retrieved: string | null;
  age_days: number | null;
  /** `age_days > stale_after_days`. */
  stale: boolean;
  stale_after_days: number;
  /** E.g. `jupyter costguard catalog update`. */
  refresh_hint: string;
  /** The whole instance's rate, before the container share. */
  instance_rate_per_hour: number | null;
  share: ICostPriceShare | null;
  /** How the server decided, one sentence per step. */
  tried: string[];
}

/** A budget period (UTC): calendar month, ISO week (from Monday), day. */
export type BudgetPeriod = 'month' | 'week' | 'day';

/**
 * One budget the JupyterHub site gave this user's server at spawn (the
 * user's own or one of their groups'), with this server's spend since it
 * started added (`status.hub_budgets[]`, in `status.currency`). A group
 * budget the site shows members only what is left of (its
 * `member_group_view`, "remaining" by default) has `budget`, `spent` and
 * `used` null: it is shown as what is left, without a bar.
 */
export interface IHubBudget {
  /** `user`: the user's own budget; `group`: a group's (`name`). */
  scope: 'user' | 'group';
  /** The user's or the group's name. */
  name: string;
  /** null when only what is left is shown. */
  budget: number | null;
  /** null when only what is left is shown. */
  spent: number | null;
  /** `max(0, budget - spent)`, or as the hub sent it. */
  remaining: number;
  /** `spent / budget`; may exceed 1; null when only what is left is shown. */
  used: number | null;
  period: BudgetPeriod | string;
  /** Epoch seconds. */
  period_start: number;
  /** Epoch seconds: when the budget resets. */
  period_end: number;
}

/** GPUs held and busy now, and since when none has been (`status.gpu_activity`). */
export interface IGpuActivity {
  gpus_held: number;
  gpus_busy: number;
  /** Epoch seconds; null while a GPU is busy. */
  idle_since: number | null;
}

/** Response of `GET costguard/api/status`. */
export interface ICostStatus extends IOwnerFields {
  instance: ICostInstance | null;
  rate_per_hour: number | null;
  currency: string;
  market?: string;
  price_source?:
    | 'config'
    | 'environment'
    | 'detected'
    | 'metadata'
    | 'hourly_rate'
    | 'unpriced'
    | string;
  price_detail?: string;
  simulated?: boolean;
  totals?: ICostTotals | null;
  gpu_status?: 'ok' | 'no-gpu' | 'error' | 'starting' | string;
  gpu_detail?: string;
  gpu_count?: number;
  kernel_count?: number;
  notebook_count?: number;
  last_sample_time?: number | null;
  history?: IHistoryPoint[];
  /** Where the price comes from and how old it is (absent on older servers). */
  price?: ICostPrice | null;
  /**
   * The JupyterHub budgets of this user's server (empty outside a hub; absent
   * on older servers). Read through `hubBudgetsOf`.
   */
  hub_budgets?: IHubBudget[];
  /** GPUs held and busy (absent on older servers). Read through `gpuActivityOf`. */
  gpu_activity?: IGpuActivity | null;
  /** The server sends more fields; see openapi.yaml. */
  [key: string]: unknown;
}

/** Alert severities, lowest first. */
export type AlertSeverity = 'info' | 'warning' | 'critical';

/** Summary of a notebook's active alerts, carried by each notebook document. */
export interface INotebookAlerts {
  ids?: string[];
  severity?: AlertSeverity | null;
  /** Spelling used by some server versions; read as `severity`. */
  highest_severity?: AlertSeverity | null;
}

/** One notebook (`Notebook`). */
export interface INotebookDoc {
  /** Server-relative path, e.g. `work/explore.ipynb`. */
  path: string;
  spend: number;
  waste: number;
  gpu_spend?: number;
  host_spend?: number;
  first_seen?: number;
  last_seen?: number;
  kernel_ids?: string[];
  kernels_seen?: number;
  gpu_utilization_percent?: number | null;
  gpu_memory_bytes?: number;
  idle_seconds?: number | null;
  spend_rate_per_hour?: number;
  history?: IHistoryPoint[];
  /** Active alerts of the notebook (absent on servers without alerts). */
  alerts?: INotebookAlerts | null;
  [key: string]: unknown;
}

/** Response of `GET costguard/api/notebooks`. */
export interface INotebookList extends ICommonDoc {
  notebooks: INotebookDoc[];
}

/** Response of `GET costguard/api/notebooks/{path}` (`NotebookDetail`). */
export interface INotebookDetail extends ICommonDoc, INotebookDoc {
  /** Its running kernels. */
  kernels: IKernelDoc[];
}

/** One running kernel (`Kernel`). */
export interface IKernelDoc {
  kernel_id: string;
  name: string;
  notebook: string | null;
  execution_state: string;
  last_activity?: number;
  idle_seconds: number;
  connections?: number;
  pids?: number[];
  cpu_percent?: number;
  rss_bytes?: number;
  gpus?: string[];
  gpu_memory_bytes: number;
  gpu_utilization_percent: number | null;
  attribution?: 'pid' | 'cuda-mapped' | 'none' | string;
  spend: number;
  waste: number;
  spend_rate_per_hour: number;
  [key: string]: unknown;
}

/** Response of `GET costguard/api/kernels`. */
export interface IKernelList extends ICommonDoc {
  kernels: IKernelDoc[];
}

/** One GPU or MIG instance (`Gpu`). */
export interface IGpuDoc {
  index: number;
  uuid: string;
  name: string;
  memory_total_bytes: number;
  memory_used_bytes: number;
  utilization_percent: number | null;
  power_watts?: number | null;
  mig_parent_uuid?: string | null;
  faulty?: string | null;
  processes?: {
    pid: number;
    used_memory_bytes: number | null;
    kind: string;
    kernel_id: string | null;
  }[];
  [key: string]: unknown;
}

/** Response of `GET costguard/api/gpus`. */
export interface IGpuList extends ICommonDoc {
  status: string;
  detail: string;
  driver_version: string | null;
  gpus: IGpuDoc[];
}

/** What an alert's button does. */
export type AlertActionId =
  | 'open-panel'
  | 'snooze'
  | 'dismiss'
  | 'shutdown-kernel'
  | 'restart-kernel'
  | 'interrupt-kernel'
  | 'offload'
  | 'open-url';

/** A button offered by an alert. */
export interface IAlertAction {
  id: AlertActionId | string;
  label: string;
  args?: { [key: string]: unknown };
}

/** One alert raised by the server's guard (`user`/`server`: whose server raised it). */
export interface IAlert extends IOwnerFields {
  id: string;
  kind: string;
  severity: AlertSeverity;
  notebook: string | null;
  kernel_id: string | null;
  title: string;
  message: string;
  actions: IAlertAction[];
  details?: { [key: string]: unknown };
  created: number;
  updated: number;
  state: 'active' | 'dismissed' | 'snoozed' | string;
  snoozed_until?: number | null;
  source?: string;
  /** When the condition ended (epoch seconds); null while it persists. */
  resolved?: number | null;
}

/** Response of `GET costguard/api/alerts` (active alerts, or all with `include=all`). */
export interface IAlertList extends ICommonDoc {
  alerts: IAlert[];
}

/** The API root, relative to the server's base URL. */
export const API_NAMESPACE = 'costguard/api';

/**
 * Call the costguard REST API.
 *
 * @param endPoint path below `costguard/api/`, e.g. `status`
 * @param init request options
 * @param settings server connection settings (defaults to the page's)
 * @returns the parsed JSON body (or the text, or '' for an empty body)
 * @throws ServerConnection.NetworkError or ServerConnection.ResponseError
 */
export async function requestAPI<T>(
  endPoint = '',
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_NAMESPACE, endPoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: any = text;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch (error) {
      if (response.ok) {
        throw new Error(`costguard: invalid JSON from ${url}`);
      }
    }
  }
  if (!response.ok) {
    throw new ServerConnection.ResponseError(response, data?.message || data);
  }
  return data as T;
}

/** Spend and waste per bucket of `GET history` (`SpendSeries`). */
export interface ISpendSeries {
  /** `notebook`, `unattributed` (what no notebook spent) or `server` (`total`). */
  kind: 'notebook' | 'unattributed' | 'server' | string;
  /** The notebook's path; null for the others. */
  path: string | null;
  /** Per bucket, in `times` order. */
  spend: number[];
  waste: number[];
  total_spend: number;
  total_waste: number;
}

/** Response of `GET costguard/api/history` (`SpendHistory`). */
export interface ISpendHistory extends ICommonDoc {
  minutes: number;
  /** 60, 300, 900 or 3600. */
  bucket_seconds: number;
  /** Start of the first bucket and end of the last, epoch seconds. */
  start: number;
  end: number;
  /** The notebook asked for, or null. */
  notebook: string | null;
  /** Start of each bucket, epoch seconds. */
  times: number[];
  /** Each notebook (most spent first), then `unattributed`; or the one asked for. */
  series: ISpendSeries[];
  /** The whole server; without `notebook`, `series` add up to it. */
  total: ISpendSeries;
  /** Every notebook with spend in the window, most first. */
  notebooks: string[];
}

/** `GET history` path: the last `minutes`, optionally of one notebook only. */
export function historyEndpoint(minutes: number, notebook?: string | null): string {
  const query = [`minutes=${Math.round(minutes)}`];
  if (notebook) {
    query.push(`notebook=${encodeURIComponent(notebook)}`);
  }
  return `history?${query.join('&')}`;
}

/** GET `history`: spend and waste over the last `minutes`, per notebook. */
export function fetchSpendHistory(
  minutes: number,
  notebook?: string | null,
  settings?: ServerConnection.ISettings
): Promise<ISpendHistory> {
  return requestAPI<ISpendHistory>(
    historyEndpoint(minutes, notebook),
    { method: 'GET' },
    settings
  );
}

/** `GET notebooks/{path}` path: the server-relative path, each part encoded. */
export function notebookEndpoint(path: string): string {
  const parts = path
    .split('/')
    .filter(part => part.length > 0)
    .map(part => encodeURIComponent(part));
  return `notebooks/${parts.join('/')}`;
}

/**
 * `GET alerts` path, optionally filtered to one notebook; `include: 'all'`
 * adds dismissed, snoozed and resolved alerts.
 */
export function alertsEndpoint(
  notebook?: string | null,
  include: 'active' | 'all' = 'active'
): string {
  const query: string[] = [];
  if (notebook) {
    query.push(`notebook=${encodeURIComponent(notebook)}`);
  }
  if (include === 'all') {
    query.push('include=all');
  }
  return query.length ? `alerts?${query.join('&')}` : 'alerts';
}

/** GET `alerts` (see `alertsEndpoint`). */
export function fetchAlerts(
  options: { notebook?: string | null; include?: 'active' | 'all' } = {},
  settings?: ServerConnection.ISettings
): Promise<IAlertList> {
  return requestAPI<IAlertList>(
    alertsEndpoint(options.notebook, options.include),
    { method: 'GET' },
    settings
  );
}

/** `POST alerts/{id}/{verb}` path. */
export function alertActionEndpoint(
  alertId: string,
  verb: 'dismiss' | 'snooze'
): string {
  return `alerts/${encodeURIComponent(alertId)}/${verb}`;
}

/** POST `alerts/{id}/dismiss`. */
export function dismissAlert(
  alertId: string,
  settings?: ServerConnection.ISettings
): Promise<unknown> {
  return requestAPI(
    alertActionEndpoint(alertId, 'dismiss'),
    { method: 'POST', body: '{}' },
    settings
  );
}

/** POST `alerts/{id}/snooze` with `{"seconds": N}`. */
export function snoozeAlert(
  alertId: string,
  seconds: number,
  settings?: ServerConnection.ISettings
): Promise<unknown> {
  return requestAPI(
    alertActionEndpoint(alertId, 'snooze'),
    { method: 'POST', body: JSON.stringify({ seconds }) },
    settings
  );
}

/** HTTP status of a failed request (a `ResponseError`'s), else null. */
export function errorStatus(error: unknown): number | null {
  const status = (error as { response?: { status?: unknown } } | null)
    ?.response?.status;
  return typeof status === 'number' && Number.isFinite(status) ? status : null;
}

/** Whether an error is an HTTP 404 (e.g. a server without that route). */
export function isNotFound(error: unknown): boolean {
  return errorStatus(error) === 404;
}
