/**
 * Types and request helpers for the costguard REST API
 * (`{baseUrl}costguard/api/...`, described by `jupyter_costguard/web/openapi.yaml`, whose
 * schemas `generated/openapi.ts` types: `npm run gen:types`).
 *
 * Only REST calls to costguard live here: nothing in this extension talks to
 * a kernel (no kernel_info, no comm), so polling never resets idle timers.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { components } from './generated/openapi';

/** The OpenAPI document's schemas (`generated/openapi.ts`, from openapi.yaml). */
export type Schemas = components['schemas'];

/**
 * Schema `T` as the frontend reads it: the fields `K` as the document has
 * them, the others optional (servers from before a field was added leave it
 * out, and tests build partial documents). Field names and types come from
 * the document, so a renamed or retyped field fails to compile.
 */
export type Lenient<T, K extends keyof T = never> = Pick<T, K> & Partial<Omit<T, K>>;

/** The `Status` document's schema. */
type StatusSchema = Schemas['Status'];

/** The instance costguard believes it runs on (`Instance`; null when unknown). */
export interface ICostInstance extends Partial<Schemas['Instance']> {
  [key: string]: unknown;
}

/** Spend totals for the server since `since` (epoch seconds; `status.totals`). */
export interface ICostTotals extends Partial<StatusSchema['totals']> {}

/** One minute of spend (`HistoryPoint`). */
export type IHistoryPoint = Schemas['HistoryPoint'];

/**
 * Whose server this is, under JupyterHub: `user` the JupyterHub user, null
 * when not under a hub; `server` the named server (`""`: the user's default
 * server), null when not under a hub. Absent on older servers.
 */
export interface IOwnerFields extends Partial<Pick<Schemas['Common'], 'user' | 'server'>> {}

/** Fields every document carries (`Common`). */
export interface ICommonDoc
  extends IOwnerFields,
    Pick<Schemas['Common'], 'simulated' | 'currency' | 'time'> {}

/**
 * The part of the instance a container holds, when costguard runs in a
 * container given only some of the instance's GPUs, CPUs and memory
 * (`price.share`: cpu_share, memory_share and host_share 0..1, host_share the
 * larger of the two; fraction: rate_per_hour / instance_rate_per_hour;
 * detail: one sentence).
 */
export type ICostPriceShare = NonNullable<Schemas['Price']['share']>;

/**
 * Provenance of the price (`status.price`, the `Price` schema): where the
 * machine is (`region`) and whose price is used (`region_priced`, with
 * `region_note` saying why they differ), the market and where it was set,
 * the catalog date (`retrieved`, ISO) and its age against
 * `stale_after_days`, `refresh_hint` (e.g. `jupyter costguard catalog
 * update`), the whole instance's rate before the container share, and how
 * the server decided, one sentence per step (`tried`).
 */
export interface ICostPrice
  extends Lenient<
    Omit<Schemas['Price'], 'market' | 'market_source'>,
    | 'provider'
    | 'instance_type'
    | 'region'
    | 'region_priced'
    | 'region_note'
    | 'retrieved'
    | 'age_days'
    | 'stale'
    | 'stale_after_days'
    | 'refresh_hint'
    | 'instance_rate_per_hour'
    | 'share'
    | 'tried'
  > {
  /** As the server wrote it (`priceOf` keeps any text); `''` when it did not say. */
  market: Schemas['Price']['market'] | string;
  /** As the server wrote it; `''` when it did not say. */
  market_source: Schemas['Price']['market_source'] | string;
}

/**
 * One budget the JupyterHub site gave this user's server at spawn (the
 * user's own or one of their groups'), with this server's spend since it
 * started added (`status.hub_budgets[]`, in `status.currency`): `scope`
 * `user` (the user's own, `name` the user) or `group` (`name` the group);
 * `remaining` is `max(0, budget - spent)` or as the hub sent it; `used` is
 * `spent / budget` and may exceed 1; `period_start` / `period_end` (when it
 * resets) are epoch seconds. A group budget the site shows members only what
 * is left of (its `member_group_view`, "remaining" by default) has `budget`,
 * `spent` and `used` null: it is shown as what is left, without a bar.
 */
export interface IHubBudget extends Omit<StatusSchema['hub_budgets'][number], 'period'> {
  /** `''` when the hub did not say (`hubBudgetsOf`). */
  period: BudgetPeriod | string;
}

/** A budget period (UTC): calendar month, ISO week (from Monday), day. */
export type BudgetPeriod = StatusSchema['hub_budgets'][number]['period'];

/**
 * GPUs held, busy and held of unknown activity (MIG) now, and since when none
 * may have been working (`status.gpu_activity`; `idle_since` epoch seconds,
 * null while a GPU is busy or a held one's activity is unknown).
 */
export type IGpuActivity = StatusSchema['gpu_activity'];

/** Response of `GET costguard/api/status`. */
export interface ICostStatus
  extends IOwnerFields,
    Lenient<
      Omit<
        StatusSchema,
        'user' | 'server' | 'instance' | 'totals' | 'price' | 'hub_budgets' | 'gpu_activity'
      >,
      'rate_per_hour' | 'currency'
    > {
  instance: ICostInstance | null;
  totals?: ICostTotals | null;
  /** Where the price comes from and how old it is (absent on older servers). */
  price?: ICostPrice | null;
  /**
   * The JupyterHub budgets of this user's server (empty outside a hub; absent
   * on older servers). Read through `hubBudgetsOf`.
   */
  hub_budgets?: IHubBudget[];
  /** GPUs held and busy (absent on older servers). Read through `gpuActivityOf`. */
  gpu_activity?: IGpuActivity | null;
  /** The server may send more fields than this version knows. */
  [key: string]: unknown;
}

/** Alert severities, lowest first. */
export type AlertSeverity = Schemas['Severity'];

/** Summary of a notebook's active alerts, carried by each notebook document. */
export interface INotebookAlerts extends Partial<Schemas['NotebookAlerts']> {
  /** Another spelling of `highest_severity`, read as it (the server writes `highest_severity`). */
  severity?: AlertSeverity | null;
}

/** One notebook (`Notebook`; `path` server-relative, e.g. `work/explore.ipynb`). */
export interface INotebookDoc
  extends Lenient<Omit<Schemas['Notebook'], 'alerts'>, 'path' | 'spend' | 'waste'> {
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
export interface IKernelDoc
  extends Lenient<
    Schemas['Kernel'],
    | 'kernel_id'
    | 'name'
    | 'notebook'
    | 'execution_state'
    | 'idle_seconds'
    | 'gpu_memory_bytes'
    | 'gpu_utilization_percent'
    | 'spend'
    | 'waste'
    | 'spend_rate_per_hour'
  > {
  [key: string]: unknown;
}

/** Response of `GET costguard/api/kernels`. */
export interface IKernelList extends ICommonDoc {
  kernels: IKernelDoc[];
}

/** One GPU or MIG instance (`Gpu`). */
export interface IGpuDoc
  extends Lenient<
    Schemas['Gpu'],
    | 'index'
    | 'uuid'
    | 'name'
    | 'memory_total_bytes'
    | 'memory_used_bytes'
    | 'utilization_percent'
  > {
  [key: string]: unknown;
}

/** Response of `GET costguard/api/gpus`. */
export interface IGpuList
  extends ICommonDoc,
    Pick<Schemas['GpuList'], 'status' | 'detail' | 'driver_version'> {
  gpus: IGpuDoc[];
}

/** What an alert's button does. */
export type AlertActionId = Schemas['AlertAction']['id'];

/** A button offered by an alert (`args`: e.g. `open-url`'s `url`). */
export interface IAlertAction extends Omit<Schemas['AlertAction'], 'id'> {
  /** An id this version does not know is shown as a button that does nothing. */
  id: AlertActionId | string;
}

/**
 * One alert raised by the server's guard (`Alert`; `user`/`server`: whose
 * server raised it; `resolved`: when the condition ended, epoch seconds, null
 * while it persists).
 */
export interface IAlert
  extends IOwnerFields,
    Lenient<
      Omit<Schemas['Alert'], 'user' | 'server' | 'actions' | 'state'>,
      | 'id'
      | 'kind'
      | 'severity'
      | 'notebook'
      | 'kernel_id'
      | 'title'
      | 'message'
      | 'created'
      | 'updated'
    > {
  actions: IAlertAction[];
  /** A state this version does not know reads as `active`. */
  state: Schemas['Alert']['state'] | string;
}

/** Response of `GET costguard/api/alerts` (active alerts, or all with `include=all`). */
export interface IAlertList extends ICommonDoc {
  alerts: IAlert[];
}

/**
 * `Doc` (a schema) is a `Read` (what the frontend reads): the documents the
 * OpenAPI document describes type-check as the frontend's types, so a field
 * renamed or retyped in the YAML fails to compile here (`npm run gen:types`).
 */
export type Accepts<Read, Doc extends Read> = [Read, Doc];

/** The responses this module reads, held to their schemas. */
export type ApiContract = [
  Accepts<ICostStatus, Schemas['Status']>,
  Accepts<INotebookList, Schemas['NotebookList']>,
  Accepts<INotebookDetail, Schemas['NotebookDetail']>,
  Accepts<IKernelList, Schemas['KernelList']>,
  Accepts<IGpuList, Schemas['GpuList']>,
  Accepts<IAlertList, Schemas['AlertList']>,
  Accepts<IAlert, Schemas['Alert']>,
  Accepts<ISpendHistory, Schemas['SpendHistory']>
];

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

/**
 * Spend and waste per bucket of `GET history` (`SpendSeries`): `kind`
 * `notebook`, `unattributed` (what no notebook spent) or `server` (`total`);
 * `path` the notebook's, null for the others; `spend` and `waste` per bucket,
 * in `times` order.
 */
export interface ISpendSeries extends Omit<Schemas['SpendSeries'], 'kind'> {
  kind: Schemas['SpendSeries']['kind'] | string;
}

/**
 * Response of `GET costguard/api/history` (`SpendHistory`): buckets of
 * `bucket_seconds` (60, 300, 900 or 3600) from `start` to `end` (epoch
 * seconds), `notebook` the one asked for or null; `series` each notebook
 * (most spent first), then `unattributed`, or the one asked for; `total` the
 * whole server (without `notebook`, `series` add up to it).
 */
export interface ISpendHistory
  extends ICommonDoc,
    Omit<Schemas['SpendHistory'], keyof ICommonDoc | 'bucket_seconds' | 'series' | 'total'> {
  bucket_seconds: Schemas['SpendHistory']['bucket_seconds'] | number;
  series: ISpendSeries[];
  total: ISpendSeries;
}

/**
 * `GET history` path: the last `minutes`, optionally of one notebook only,
 * and fitted to the ledger's history when that is shorter (`fit`).
 */
export function historyEndpoint(
  minutes: number,
  notebook?: string | null,
  fit = false
): string {
  const query = [`minutes=${Math.round(minutes)}`];
  if (notebook) {
    query.push(`notebook=${encodeURIComponent(notebook)}`);
  }
  if (fit) {
    query.push('fit=true');
  }
  return `history?${query.join('&')}`;
}

/** GET `history`: spend and waste over the last `minutes`, per notebook. */
export function fetchSpendHistory(
  minutes: number,
  notebook?: string | null,
  settings?: ServerConnection.ISettings,
  fit = false
): Promise<ISpendHistory> {
  return requestAPI<ISpendHistory>(
    historyEndpoint(minutes, notebook, fit),
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
