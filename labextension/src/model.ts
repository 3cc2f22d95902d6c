/**
 * State of the costguard status: the latest `/costguard/api/status` response,
 * polled with a lumino `Poll` that backs off on errors and stands by while
 * the page is hidden.
 */
import { ServerConnection } from '@jupyterlab/services';
import { IPoll, Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { ICostStatus, requestAPI } from './api';
import { DEFAULT_SUMMARY_OPTIONS, ISummaryOptions } from './format';

/** Connection state of the model. */
export type CostStatusState = 'loading' | 'ok' | 'offline';

/** Default refresh interval, in seconds (mirrors schema/status.json). */
export const DEFAULT_REFRESH_SECONDS = 2;

/** Longest interval the poll backs off to after errors, in milliseconds. */
const MAX_BACKOFF_MS = 60 * 1000;

/** Shortest allowed refresh interval, in seconds. */
const MIN_REFRESH_SECONDS = 0.5;

export namespace CostStatusModel {
  export interface IOptions {
    /** Refresh interval in seconds. */
    refreshInterval?: number;
    /** What the summary shows. */
    summary?: ISummaryOptions;
    /** Server connection settings (defaults to the page's). */
    serverSettings?: ServerConnection.ISettings;
    /** Start polling immediately (default true). */
    autoStart?: boolean;
  }
}

/**
 * Holds the latest status and the polling machinery. Widgets listen to
 * `changed` and render; they never fetch themselves.
 */
export class CostStatusModel {
  constructor(options: CostStatusModel.IOptions = {}) {
    this._serverSettings =
      options.serverSettings ?? ServerConnection.makeSettings();
    this._summary = { ...DEFAULT_SUMMARY_OPTIONS, ...options.summary };
    this._refreshInterval = CostStatusModel.clampInterval(
      options.refreshInterval ?? DEFAULT_REFRESH_SECONDS
    );
    this._poll = new Poll<ICostStatus | null, Error, 'standby'>({
      auto: options.autoStart ?? true,
      factory: () => this.refresh(),
      frequency: this._frequency(),
      name: 'jupyter-costguard:status',
      standby: 'when-hidden'
    });
  }

  /** Emitted whenever the status, state or display options change. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The latest successful response, or null. */
  get status(): ICostStatus | null {
    return this._status;
  }

  /** Whether the last request succeeded. */
  get state(): CostStatusState {
    return this._state;
  }

  /** The error of the last failed request, if any. */
  get error(): Error | null {
    return this._error;
  }

  /** What the summary shows. */
  get summaryOptions(): ISummaryOptions {
    return this._summary;
  }
  set summaryOptions(value: ISummaryOptions) {
    const next = { ...DEFAULT_SUMMARY_OPTIONS, ...value };
    if (
      next.showRate === this._summary.showRate &&
      next.showSpend === this._summary.showSpend
    ) {
      return;
    }
    this._summary = next;
    this._changed.emit();
  }

  /** Refresh interval in seconds. */
  get refreshInterval(): number {
    return this._refreshInterval;
  }
  set refreshInterval(seconds: number) {
    const value = CostStatusModel.clampInterval(seconds);
    if (value === this._refreshInterval) {
      return;
    }
    this._refreshInterval = value;
    this._poll.frequency = this._frequency();
  }

  /** The underlying poll (exposed for tests and for forcing a refresh). */
  get poll(): Poll<ICostStatus | null, Error, 'standby'> {
    return this._poll;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Fetch the status once. Errors mark the model offline and are rethrown
   * so that the poll backs off.
   */
  async refresh(): Promise<ICostStatus | null> {
    try {
      const status = await requestAPI<ICostStatus>(
        'status',
        { method: 'GET' },
        this._serverSettings
      );
      if (this._isDisposed) {
        return status;
      }
      this._status = status;
      this._state = 'ok';
      this._error = null;
      this._changed.emit();
      return status;
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

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._poll.dispose();
    Signal.clearData(this);
  }

  private _frequency(): IPoll.Frequency {
    return {
      interval: this._refreshInterval * 1000,
      backoff: true,
      max: Math.max(MAX_BACKOFF_MS, this._refreshInterval * 1000)
    };
  }

  private _changed = new Signal<this, void>(this);
  private _error: Error | null = null;
  private _isDisposed = false;
  private _poll: Poll<ICostStatus | null, Error, 'standby'>;
  private _refreshInterval: number;
  private _serverSettings: ServerConnection.ISettings;
  private _state: CostStatusState = 'loading';
  private _status: ICostStatus | null = null;
  private _summary: ISummaryOptions;
}

export namespace CostStatusModel {
  /** Clamp a refresh interval (seconds) to a sane value. */
  export function clampInterval(seconds: number): number {
    if (!Number.isFinite(seconds) || seconds <= 0) {
      return DEFAULT_REFRESH_SECONDS;
    }
    return Math.max(MIN_REFRESH_SECONDS, seconds);
  }
}
