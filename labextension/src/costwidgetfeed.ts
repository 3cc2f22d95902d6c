/**
 * What one in-notebook cost widget polls, from the page (PolledModel's
 * policy), never through the kernel: a busy kernel cannot answer comm
 * messages but the server keeps answering HTTP, and no kernel message means
 * no reset idle timers.
 *
 * Per tick: `GET kernels` → this kernel (the `kernel_id` trait, else the
 * widget manager's kernel) → its notebook path (or the `notebook` override)
 * → `GET notebooks/<path>` and `GET alerts?notebook=<path>`; `GET status`
 * (instance and rate) and `GET snapshots?notebook=<path>` (a snapshot to
 * restore) at most every 15 s; a server without alerts is asked again after a
 * minute.
 */
import type { ServerConnection } from '@jupyterlab/services';

import {
  alertsEndpoint,
  IAlert,
  IAlertList,
  ICostStatus,
  IKernelList,
  INotebookDetail,
  isNotFound,
  notebookEndpoint,
  requestAPI
} from './api';
import {
  ALERTS_RECHECK_MS,
  SNAPSHOTS_MAX_AGE_MS,
  clampWidgetRefresh,
  ICostWidgetSummary,
  notebookPathFor,
  offlineMessage,
  pickKernel,
  STATUS_MAX_AGE_MS,
  summarizeWidget
} from './costwidgetsummary';
import { ISnapshot, listSnapshots } from './hibernateapi';
import { PolledModel } from './polledmodel';

/** Connection state of a cost widget. */
export type CostWidgetState = 'loading' | 'ok' | 'offline';

export namespace CostWidgetFeed {
  export interface IOptions {
    serverSettings: ServerConnection.ISettings;
    /** Kernel ids to look for, in order (the trait, the widget manager's kernel). */
    kernelIds: () => ReadonlyArray<string | null | undefined>;
    /** The `notebook` override, if any. */
    notebook: () => string | null;
    /** Seconds between two refreshes (clamped). */
    refreshSeconds: unknown;
    /** Stand by also while this answers true (e.g. the view is detached). */
    standby?: () => boolean;
  }
}

/** The polled figures of one cost widget. */
export class CostWidgetFeed extends PolledModel<ICostWidgetSummary, CostWidgetState> {
  constructor(options: CostWidgetFeed.IOptions) {
    super({
      name: 'jupyter-costguard:cost-widget',
      interval: clampWidgetRefresh(options.refreshSeconds),
      standby: options.standby
    });
    this._options = options;
  }

  /** What the last successful refresh found, or null. */
  get summary(): ICostWidgetSummary | null {
    return this._summary;
  }

  /** One line saying why there are no figures (after a failed refresh). */
  get offlineText(): string {
    return this._offlineText;
  }

  /** Seconds between two refreshes (the `refresh_seconds` trait, clamped). */
  get refreshSeconds(): number {
    return this.interval;
  }
  set refreshSeconds(seconds: unknown) {
    this.setInterval(clampWidgetRefresh(seconds));
  }

  protected async fetch(): Promise<ICostWidgetSummary> {
    const kernels = await this._get<IKernelList>('kernels');
    const kernel = pickKernel(kernels.kernels, this._options.kernelIds());
    const override = this._options.notebook();
    const path = kernel || override ? notebookPathFor(kernel, override) : null;
    const now = Date.now();
    const [notebook, alerts, status, snapshots] = await Promise.all([
      path ? this._notebook(path) : Promise.resolve(null),
      path ? this._alerts(path, now) : Promise.resolve(null),
      this._status(now),
      path ? this._snapshots(path, now) : Promise.resolve(null)
    ]);
    return summarizeWidget({
      kernels,
      kernel,
      notebookPath: path,
      notebook,
      status,
      alerts,
      snapshots
    });
  }

  protected apply(summary: ICostWidgetSummary): void {
    this._summary = summary;
    this.emitChanged();
  }

  protected failed(reason: unknown): void {
    this._offlineText = offlineMessage(reason);
    super.failed(reason);
  }

  private _get<T>(endpoint: string): Promise<T> {
    return requestAPI<T>(endpoint, { method: 'GET' }, this._options.serverSettings);
  }

  private async _notebook(path: string): Promise<INotebookDetail | null> {
    try {
      return await this._get<INotebookDetail>(notebookEndpoint(path));
    } catch (reason) {
      if (isNotFound(reason)) {
        return null; // nothing recorded for it yet
      }
      throw reason;
    }
  }

  private async _alerts(path: string, now: number): Promise<IAlert[] | null> {
    const missing = this._alertsMissingSince;
    if (missing && now - missing < ALERTS_RECHECK_MS) {
      return null;
    }
    try {
      const list = await this._get<IAlertList>(alertsEndpoint(path));
      this._alertsMissingSince = 0;
      return Array.isArray(list?.alerts) ? list.alerts : [];
    } catch (reason) {
      if (isNotFound(reason)) {
        // A server without alerts: show none, ask again in a minute.
        this._alertsMissingSince = now;
        return null;
      }
      throw reason;
    }
  }

  private async _status(now: number): Promise<ICostStatus | null> {
    if (this._statusDoc && now - this._statusAt < STATUS_MAX_AGE_MS) {
      return this._statusDoc;
    }
    try {
      this._statusDoc = await this._get<ICostStatus>('status');
      this._statusAt = now;
    } catch (reason) {
      // The rate is secondary: keep the last one (or none), retry next tick.
      console.debug('jupyter-costguard: status unavailable', reason);
    }
    return this._statusDoc;
  }

  /**
   * The notebook's snapshots, re-read at most every `SNAPSHOTS_MAX_AGE_MS`.
   * Secondary, like the rate: a server without hibernation (404, 503) or an
   * error shows none and does not take the widget offline.
   */
  private async _snapshots(path: string, now: number): Promise<ISnapshot[] | null> {
    const cached = this._snapshotsOf;
    if (cached && cached.path === path && now - cached.at < SNAPSHOTS_MAX_AGE_MS) {
      return cached.snapshots;
    }
    let snapshots: ISnapshot[] | null = null;
    try {
      const list = await listSnapshots(path, this._options.serverSettings);
      snapshots = Array.isArray(list?.snapshots) ? list.snapshots : [];
    } catch (reason) {
      console.debug('jupyter-costguard: snapshots unavailable', reason);
    }
    this._snapshotsOf = { path, at: now, snapshots };
    return snapshots;
  }

  private _alertsMissingSince = 0;
  private _offlineText = '';
  private _options: CostWidgetFeed.IOptions;
  private _snapshotsOf: {
    path: string;
    at: number;
    snapshots: ISnapshot[] | null;
  } | null = null;
  private _statusAt = 0;
  private _statusDoc: ICostStatus | null = null;
  private _summary: ICostWidgetSummary | null = null;
}
