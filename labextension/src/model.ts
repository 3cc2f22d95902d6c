/**
 * The shared state of the frontend: what the server said last, polled with
 * lumino `Poll`s that back off on errors and stand by while the page is
 * hidden. Widgets and controllers listen to the signals and render; they
 * never fetch `status`, `notebooks` or `alerts` themselves.
 *
 * Two polls, both at `refreshInterval`:
 * - `poll`: `GET status` and `GET notebooks` together (one tick, both requests);
 * - `alertsPoll`: `GET alerts` (a server without that route only loses alerts).
 */
import { ServerConnection } from '@jupyterlab/services';
import { IPoll, Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import {
  AlertSeverity,
  IAlert,
  IAlertList,
  ICostStatus,
  INotebookDoc,
  INotebookList,
  alertsEndpoint,
  dismissAlert,
  isNotFound,
  requestAPI,
  snoozeAlert
} from './api';
import { alertsForNotebook, notebookSeverity } from './alerts';
import {
  DEFAULT_SUMMARY_OPTIONS,
  IActiveNotebook,
  ISummaryOptions
} from './format';
import { normalizePath, selectNotebook } from './notebooks';
import {
  clampInterval as clampRefresh,
  DEFAULT_REFRESH_SECONDS
} from './settings';

export { DEFAULT_REFRESH_SECONDS } from './settings';

/** Connection state of the model. */
export type CostStatusState = 'loading' | 'ok' | 'offline';

/** State of the alerts feed: `unavailable` when the server has no alerts route. */
export type AlertsState = 'loading' | 'ok' | 'unavailable' | 'error';

/** Longest interval the polls back off to after errors, in milliseconds. */
export const MAX_BACKOFF_MS = 60 * 1000;

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

/**
 * Holds the latest `status`, `notebooks` and `alerts` documents, the active
 * notebook's path, and the polling machinery.
 */
export class CostStatusModel {
  constructor(options: CostStatusModel.IOptions = {}) {
    this._serverSettings =
      options.serverSettings ?? ServerConnection.makeSettings();
    this._summary = { ...DEFAULT_SUMMARY_OPTIONS, ...options.summary };
    this._refreshInterval = clampRefresh(
      options.refreshInterval ?? DEFAULT_REFRESH_SECONDS
    );
    const auto = options.autoStart ?? true;
    this._poll = new Poll<void, Error, 'standby'>({
      auto,
      factory: () => this.refresh(),
      frequency: this._frequency(),
      name: 'jupyter-costguard:status',
      standby: 'when-hidden'
    });
    this._alertsPoll = new Poll<void, Error, 'standby'>({
      auto,
      factory: () => this.refreshAlerts(),
      frequency: this._frequency(),
      name: 'jupyter-costguard:alerts',
      standby: 'when-hidden'
    });
    if (typeof document !== 'undefined') {
      document.addEventListener('visibilitychange', this._onVisibility);
    }
  }

  /** Emitted whenever anything shown changes (data, state, options, active notebook). */
  get changed(): ISignal<this, void> {
    return this._changed;
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

  /** Notebooks of the latest successful `notebooks` response. */
  get notebooks(): ReadonlyArray<INotebookDoc> {
    return this._notebooks;
  }

  /** Whether the latest `notebooks` response was simulated. */
  get notebooksSimulated(): boolean {
    return this._notebooksSimulated;
  }

  /** Whether the last request succeeded. */
  get state(): CostStatusState {
    return this._state;
  }

  /** The error of the last failed request, if any. */
  get error(): Error | null {
    return this._error;
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
    this._changed.emit();
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
    this._changed.emit();
  }

  /** Refresh interval in seconds (both polls). */
  get refreshInterval(): number {
    return this._refreshInterval;
  }
  set refreshInterval(seconds: number) {
    const value = clampRefresh(seconds);
    if (value === this._refreshInterval) {
      return;
    }
    this._refreshInterval = value;
    this._poll.frequency = this._frequency();
    this._alertsPoll.frequency = this._frequency();
  }

  /** The `status` + `notebooks` poll. */
  get poll(): Poll<void, Error, 'standby'> {
    return this._poll;
  }

  /** The `alerts` poll. */
  get alertsPoll(): Poll<void, Error, 'standby'> {
    return this._alertsPoll;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** Start both polls (no-op when running). */
  start(): void {
    void this._poll.start();
    void this._alertsPoll.start();
  }

  /**
   * Fetch `status` and `notebooks` once. Errors mark the model offline and
   * are rethrown so that the poll backs off.
   */
  async refresh(): Promise<void> {
    try {
      const [status, notebooks] = await Promise.all([
        requestAPI<ICostStatus>('status', { method: 'GET' }, this._serverSettings),
        requestAPI<INotebookList>(
          'notebooks',
          { method: 'GET' },
          this._serverSettings
        )
      ]);
      if (this._isDisposed) {
        return;
      }
      this._status = status;
      this._notebooks = Array.isArray(notebooks?.notebooks)
        ? notebooks.notebooks
        : [];
      this._notebooksSimulated = notebooks?.simulated === true;
      this._state = 'ok';
      this._error = null;
      this._changed.emit();
    } catch (reason) {
      if (!this._isDisposed) {
        this._state = 'offline';
        this._error =
          reason instanceof Error ? reason : new Error(String(reason));
        this._changed.emit();
      }
      throw reason;
    }
  }

  /** Fetch `alerts` once; errors are rethrown so that the poll backs off. */
  async refreshAlerts(): Promise<void> {
    try {
      const doc = await requestAPI<IAlertList>(
        alertsEndpoint(),
        { method: 'GET' },
        this._serverSettings
      );
      if (this._isDisposed) {
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
      this._changed.emit();
      this._alertsReceived.emit(this._alerts);
    } catch (reason) {
      if (!this._isDisposed) {
        const state: AlertsState = isNotFound(reason) ? 'unavailable' : 'error';
        if (state !== this._alertsState) {
          this._alertsState = state;
          this._changed.emit();
        }
      }
      throw reason;
    }
  }

  /**
   * Dismiss an alert on the server (`POST alerts/{id}/dismiss`). The alert
   * leaves `alerts` at once; a failure puts it back on the next poll.
   */
  async dismissAlert(id: string): Promise<void> {
    this._hideLocally(id);
    try {
      await dismissAlert(id, this._serverSettings);
    } catch (reason) {
      this._hidden.delete(id);
      throw reason;
    } finally {
      void this._alertsPoll.refresh();
    }
  }

  /** Snooze an alert on the server (`POST alerts/{id}/snooze`, `{"seconds": N}`). */
  async snoozeAlert(id: string, seconds: number): Promise<void> {
    this._hideLocally(id);
    try {
      await snoozeAlert(id, seconds, this._serverSettings);
    } catch (reason) {
      this._hidden.delete(id);
      throw reason;
    } finally {
      void this._alertsPoll.refresh();
    }
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    if (typeof document !== 'undefined') {
      document.removeEventListener('visibilitychange', this._onVisibility);
    }
    this._poll.dispose();
    this._alertsPoll.dispose();
    Signal.clearData(this);
  }

  private _hideLocally(id: string): void {
    this._hidden.add(id);
    const before = this._alerts.length;
    this._alerts = this._alerts.filter(a => a.id !== id);
    if (this._alerts.length !== before) {
      this._changed.emit();
    }
  }

  private _frequency(): IPoll.Frequency {
    return {
      interval: this._refreshInterval * 1000,
      backoff: true,
      max: Math.max(MAX_BACKOFF_MS, this._refreshInterval * 1000)
    };
  }

  /** Catch up at once when the tab becomes visible again. */
  private _onVisibility = (): void => {
    if (this._isDisposed || document.hidden) {
      return;
    }
    if (this._poll.state.phase !== 'constructed' && !this._poll.isDisposed) {
      void this._poll.refresh();
    }
    if (
      this._alertsPoll.state.phase !== 'constructed' &&
      !this._alertsPoll.isDisposed
    ) {
      void this._alertsPoll.refresh();
    }
  };

  private _activePath: string | null = null;
  private _alerts: IAlert[] = [];
  private _alertsPoll: Poll<void, Error, 'standby'>;
  private _alertsReceived = new Signal<this, ReadonlyArray<IAlert>>(this);
  private _alertsSimulated = false;
  private _alertsState: AlertsState = 'loading';
  private _changed = new Signal<this, void>(this);
  private _error: Error | null = null;
  private _hidden = new Set<string>();
  private _isDisposed = false;
  private _notebooks: INotebookDoc[] = [];
  private _notebooksSimulated = false;
  private _poll: Poll<void, Error, 'standby'>;
  private _refreshInterval: number;
  private _serverSettings: ServerConnection.ISettings;
  private _state: CostStatusState = 'loading';
  private _status: ICostStatus | null = null;
  private _summary: ISummaryOptions;
}

export namespace CostStatusModel {
  /** Clamp a refresh interval (seconds) to a sane value. */
  export function clampInterval(seconds: number): number {
    return clampRefresh(seconds);
  }
}
