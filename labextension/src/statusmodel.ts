/**
 * The shared state of the frontend: what the server said last. Widgets and
 * controllers listen to `changed` and render; they never fetch `status`,
 * `notebooks` or `alerts` themselves.
 *
 * Two polls (PolledModel's policy), both at `refreshInterval`:
 * - `poll`: `GET status` and `GET notebooks` together (one tick, both requests),
 *   plus `GET kernels`, `GET gpus` and `GET snapshots` (the waste removed by
 *   hibernating; secondary: a server without hibernation or an error leaves it
 *   null) while someone asks for them (`requestDetail`: the cost panel, while
 *   shown). The documents of one tick
 *   are of one sample (their `time`): a tick that straddles a new sample asks
 *   again once, so the panel's tables, the status bar and the widget agree;
 * - `alertsPoll`: `GET alerts` (a server without that route only loses alerts).
 */
import { ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import {
  AlertSeverity,
  IAlert,
  IAlertList,
  ICostStatus,
  IGpuActivity,
  IGpuList,
  IHubBudget,
  IKernelList,
  INotebookDoc,
  INotebookList,
  alertsEndpoint,
  dismissAlert,
  isNotFound,
  requestAPI,
  snoozeAlert
} from './api';
import { alertsForNotebook, notebookSeverity } from './alerts';
import { ISnapshotList, listSnapshots } from './hibernateapi';
import { gpuActivityOf, hubBudgetsOf } from './budgets';
import { normalizePath, selectNotebook } from './notebooks';
import { ModelPoll, PolledModel } from './polledmodel';
import { clampInterval, DEFAULT_REFRESH_SECONDS } from './settings';
import { DEFAULT_SUMMARY_OPTIONS, IActiveNotebook, ISummaryOptions } from './statussummary';

/** Connection state of the model. */
export type CostStatusState = 'loading' | 'ok' | 'offline';

/** State of the alerts feed: `unavailable` when the server has no alerts route. */
export type AlertsState = 'loading' | 'ok' | 'unavailable' | 'error';

export namespace CostStatusModel {
  export interface IOptions {
    /** Refresh interval in seconds. */
    refreshInterval?: number;
    /** What the summary shows. */
    summary?: Partial<ISummaryOptions>;
    /** Server connection settings (defaults to the page's). */
    serverSettings?: ServerConnection.ISettings;
    /** Start polling immediately (default true). */
    autoStart?: boolean;
  }
}

/** `status` and `notebooks` (and `kernels` + `gpus` when asked for), as one refresh fetches them. */
interface IStatusAnswer {
  status: ICostStatus;
  notebooks: INotebookList;
  kernels?: IKernelList;
  gpus?: IGpuList;
  snapshots?: ISnapshotList | null;
}

/**
 * Whether the documents of one refresh describe the same sample: every
 * `time` that is a number is the same one (a server between samples may have
 * rebuilt some documents and not yet others).
 */
export function sameSample(docs: ReadonlyArray<unknown>): boolean {
  const times = docs
    .map(d => (d && typeof d === 'object' ? (d as { time?: unknown }).time : null))
    .filter((t): t is number => typeof t === 'number');
  return times.every(t => t === times[0]);
}

/**
 * Holds the latest `status`, `notebooks` and `alerts` documents, the active
 * notebook's path, and the polling machinery.
 */
export class CostStatusModel extends PolledModel<IStatusAnswer, CostStatusState> {
  constructor(options: CostStatusModel.IOptions = {}) {
    super({
      name: 'jupyter-costguard:status',
      interval: clampInterval(options.refreshInterval ?? DEFAULT_REFRESH_SECONDS),
      auto: options.autoStart ?? true
    });
    this._serverSettings =
      options.serverSettings ?? ServerConnection.makeSettings();
    this._summary = { ...DEFAULT_SUMMARY_OPTIONS, ...options.summary };
    this._alertsPoll = this.addPoll('jupyter-costguard:alerts', () =>
      this.refreshAlerts()
    );
  }

  /** Emitted after each successful `GET alerts`, with the active alerts. */
  get alertsReceived(): ISignal<this, ReadonlyArray<IAlert>> {
    return this._alertsReceived;
  }

  /** Server connection settings used for every request. */
  get serverSettings(): ServerConnection.ISettings {
    return this._serverSettings;
  }

  /** The latest successful `status` response, or null. */
  get status(): ICostStatus | null {
    return this._status;
  }

  /**
   * The JupyterHub budgets of the latest `status` (user's first, then the
   * groups'); `[]` outside a hub, before the first response, or from an
   * older server without `hub_budgets`.
   */
  get hubBudgets(): IHubBudget[] {
    return hubBudgetsOf(this._status);
  }

  /** `gpu_activity` of the latest `status`; null when none (older servers). */
  get gpuActivity(): IGpuActivity | null {
    return gpuActivityOf(this._status);
  }

  /** Notebooks of the latest successful `notebooks` response. */
  get notebooks(): ReadonlyArray<INotebookDoc> {
    return this._notebooks;
  }

  /**
   * Ask (`wanted` true) or stop asking for `kernels` and `gpus` with every
   * refresh, on behalf of `owner`; the first ask refreshes at once.
   */
  requestDetail(owner: unknown, wanted: boolean): void {
    const before = this._detailOwners.size;
    if (wanted) {
      this._detailOwners.add(owner);
    } else {
      this._detailOwners.delete(owner);
    }
    if (before === 0 && this._detailOwners.size > 0 && this.isRunning) {
      void this.poll.refresh();
    }
  }

  /** Whether anyone asks for `kernels` and `gpus`. */
  get detailRequested(): boolean {
    return this._detailOwners.size > 0;
  }

  /**
   * The latest `kernels` document (fetched with `status` and `notebooks` while
   * asked for), or null before the first.
   */
  get kernelList(): IKernelList | null {
    return this._kernelList;
  }

  /** The latest `gpus` document (like `kernelList`), or null. */
  get gpuList(): IGpuList | null {
    return this._gpuList;
  }

  /**
   * The latest `GET snapshots` (all of this owner's; fetched like `kernelList`),
   * or null: not asked for yet, or the server has no hibernation.
   */
  get snapshotList(): ISnapshotList | null {
    return this._snapshotList;
  }

  /** Whether the latest `notebooks` response was simulated. */
  get notebooksSimulated(): boolean {
    return this._notebooksSimulated;
  }

  /** Active alerts of the latest successful `alerts` response. */
  get alerts(): ReadonlyArray<IAlert> {
    return this._alerts;
  }

  /** Whether the latest `alerts` response was simulated. */
  get alertsSimulated(): boolean {
    return this._alertsSimulated;
  }

  /** State of the alerts feed. */
  get alertsState(): AlertsState {
    return this._alertsState;
  }

  /** Server-relative path of the notebook the user is looking at (null: none). */
  get activePath(): string | null {
    return this._activePath;
  }
  set activePath(path: string | null) {
    const next = path ? normalizePath(path) || null : null;
    if (next === this._activePath) {
      return;
    }
    this._activePath = next;
    this.emitChanged();
  }

  /** The active notebook and its document (null doc: nothing spent yet). */
  get activeNotebook(): IActiveNotebook | null {
    if (!this._activePath) {
      return null;
    }
    return {
      path: this._activePath,
      doc: selectNotebook(this._notebooks, this._activePath)
    };
  }

  /** Active alerts concerning the active notebook. */
  get activeAlerts(): IAlert[] {
    const active = this.activeNotebook;
    if (!active) {
      return [];
    }
    return alertsForNotebook(this._alerts, active.path, active.doc);
  }

  /** Highest severity of the alerts concerning the active notebook. */
  get activeSeverity(): AlertSeverity | null {
    const active = this.activeNotebook;
    if (!active) {
      return null;
    }
    return notebookSeverity(
      this._alerts,
      active.path,
      active.doc,
      this._alertsState === 'ok'
    );
  }

  /** What the summary shows. */
  get summaryOptions(): ISummaryOptions {
    return this._summary;
  }
  set summaryOptions(value: ISummaryOptions) {
    const next = { ...DEFAULT_SUMMARY_OPTIONS, ...value };
    if (
      next.showRate === this._summary.showRate &&
      next.showNotebookSpend === this._summary.showNotebookSpend &&
      next.showServerTotal === this._summary.showServerTotal
    ) {
      return;
    }
    this._summary = next;
    this.emitChanged();
  }

  /** Refresh interval in seconds (both polls). */
  get refreshInterval(): number {
    return this.interval;
  }
  set refreshInterval(seconds: number) {
    this.setInterval(clampInterval(seconds));
  }

  /** The `alerts` poll. */
  get alertsPoll(): ModelPoll {
    return this._alertsPoll;
  }

  /** Fetch `alerts` once; errors are rethrown so that the poll backs off. */
  async refreshAlerts(): Promise<void> {
    try {
      const doc = await requestAPI<IAlertList>(
        alertsEndpoint(),
        { method: 'GET' },
        this._serverSettings
      );
      if (this.isDisposed) {
        return;
      }
      const alerts = Array.isArray(doc?.alerts) ? doc.alerts : [];
      this._alerts = alerts.filter(
        a => a && typeof a.id === 'string' && !this._hidden.has(a.id)
      );
      // Forget locally hidden ids the server no longer reports.
      const ids = new Set(alerts.map(a => a?.id));
      for (const id of Array.from(this._hidden)) {
        if (!ids.has(id)) {
          this._hidden.delete(id);
        }
      }
      this._alertsSimulated = doc?.simulated === true;
      this._alertsState = 'ok';
      this.emitChanged();
      this._alertsReceived.emit(this._alerts);
    } catch (reason) {
      if (!this.isDisposed) {
        const state: AlertsState = isNotFound(reason) ? 'unavailable' : 'error';
        if (state !== this._alertsState) {
          this._alertsState = state;
          this.emitChanged();
        }
      }
      throw reason;
    }
  }

  /**
   * Dismiss an alert on the server (`POST alerts/{id}/dismiss`). The alert
   * leaves `alerts` at once; a failure puts it back on the next poll.
   */
  dismissAlert(id: string): Promise<void> {
    return this._hideWhile(id, () => dismissAlert(id, this._serverSettings));
  }

  /** Snooze an alert on the server (`POST alerts/{id}/snooze`, `{"seconds": N}`). */
  snoozeAlert(id: string, seconds: number): Promise<void> {
    return this._hideWhile(id, () =>
      snoozeAlert(id, seconds, this._serverSettings)
    );
  }

  /**
   * `GET status` and `GET notebooks` (and `kernels` + `gpus` when asked for),
   * together; once more when they straddle a new sample.
   */
  protected async fetch(): Promise<IStatusAnswer> {
    const detail = this._detailOwners.size > 0;
    const answer = await this._fetchOnce(detail);
    if (sameSample([answer.status, answer.notebooks, answer.kernels, answer.gpus])) {
      return answer;
    }
    return this._fetchOnce(detail);
  }

  protected apply({ status, notebooks, kernels, gpus, snapshots }: IStatusAnswer): void {
    this._status = status;
    this._notebooks = Array.isArray(notebooks?.notebooks)
      ? notebooks.notebooks
      : [];
    this._notebooksSimulated = notebooks?.simulated === true;
    if (kernels !== undefined) {
      this._kernelList =
        kernels && Array.isArray(kernels.kernels) ? kernels : null;
    }
    if (gpus !== undefined) {
      this._gpuList = gpus && Array.isArray(gpus.gpus) ? gpus : null;
    }
    if (snapshots !== undefined) {
      this._snapshotList = snapshots;
    }
    this.emitChanged();
  }

  private async _fetchOnce(detail: boolean): Promise<IStatusAnswer> {
    const get = <T>(endpoint: string): Promise<T> =>
      requestAPI<T>(endpoint, { method: 'GET' }, this._serverSettings);
    if (!detail) {
      const [status, notebooks] = await Promise.all([
        get<ICostStatus>('status'),
        get<INotebookList>('notebooks')
      ]);
      return { status, notebooks };
    }
    const [status, notebooks, kernels, gpus, snapshots] = await Promise.all([
      get<ICostStatus>('status'),
      get<INotebookList>('notebooks'),
      get<IKernelList>('kernels'),
      get<IGpuList>('gpus'),
      listSnapshots(null, this._serverSettings).then(
        list => (list && Array.isArray(list.snapshots) ? list : null),
        () => null // no hibernation here (404, 503) or an error: the rest still shows
      )
    ]);
    return { status, notebooks, kernels, gpus, snapshots };
  }

  /** Hide an alert while `request` runs (for good when it succeeds). */
  private async _hideWhile(
    id: string,
    request: () => Promise<unknown>
  ): Promise<void> {
    this._hidden.add(id);
    const before = this._alerts.length;
    this._alerts = this._alerts.filter(a => a.id !== id);
    if (this._alerts.length !== before) {
      this.emitChanged();
    }
    try {
      await request();
    } catch (reason) {
      this._hidden.delete(id);
      throw reason;
    } finally {
      void this._alertsPoll.refresh();
    }
  }

  private _activePath: string | null = null;
  private _alerts: IAlert[] = [];
  private _alertsPoll: ModelPoll;
  private _alertsReceived = new Signal<this, ReadonlyArray<IAlert>>(this);
  private _alertsSimulated = false;
  private _alertsState: AlertsState = 'loading';
  private _detailOwners = new Set<unknown>();
  private _gpuList: IGpuList | null = null;
  private _hidden = new Set<string>();
  private _kernelList: IKernelList | null = null;
  private _notebooks: INotebookDoc[] = [];
  private _notebooksSimulated = false;
  private _serverSettings: ServerConnection.ISettings;
  private _snapshotList: ISnapshotList | null = null;
  private _status: ICostStatus | null = null;
  private _summary: ISummaryOptions;
}
