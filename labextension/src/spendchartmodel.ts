/**
 * What a spend chart shows: `GET history` for its window (`minutes`, the
 * most it shows: fitted to the ledger's own history when that is shorter,
 * `fit`) and, optionally, one notebook, only while the chart is shown
 * (`active`). It refreshes with the totals: each new sample of the model it
 * follows (`follow`, the shared status poll) asks again (for windows in
 * minute buckets; coarser ones at most every FOLLOW_GAP_SECONDS), and its own
 * poll (PolledModel's policy, once a minute) only fills the gaps. Hidden, it
 * asks nothing. Changing the window or the notebook asks again at once; an
 * answer to an earlier question is dropped.
 *
 * State `unavailable`: the server answered 404 (a notebook with no costs
 * recorded yet, or a server without the history route); the poll keeps
 * asking, backing off.
 */
import type { ServerConnection } from '@jupyterlab/services';
import type { ISignal } from '@lumino/signaling';

import { fetchSpendHistory, isNotFound, ISpendHistory } from './api';
import { PolledModel, PollState } from './polledmodel';
import { DEFAULT_CHART_MINUTES } from './spendchart';

/** Seconds between two polls of a shown chart that follows nothing (or whose model is quiet). */
export const CHART_REFRESH_SECONDS = 60;

/**
 * Shortest time between two refreshes that follow new samples, seconds, by
 * bucket length: minute buckets follow every sample (a young ledger, a cheap
 * query, and a summary that must agree with the totals); the longer windows
 * of coarser buckets, whose query reads days of minutes, less often.
 */
export const FOLLOW_GAP_SECONDS: { [bucketSeconds: number]: number } = { 60: 0, 300: 30 };
/** The gap for buckets not in FOLLOW_GAP_SECONDS. */
export const FOLLOW_GAP_DEFAULT = 60;

/** What a chart follows: a model whose `status.time` is the sample it shows. */
export interface ISampleSource {
  readonly changed: ISignal<unknown, void>;
  readonly status: { time?: number | null } | null;
}

export namespace SpendChartModel {
  export interface IOptions {
    /** Server settings (the page's by default). */
    serverSettings?: ServerConnection.ISettings;
    /** The window, minutes (default 6 h). */
    minutes?: number;
    /** One notebook's path, or null for all of them stacked (default). */
    notebook?: string | null;
    /** Seconds between two polls (default 60). */
    interval?: number;
    /**
     * Fit the window to the ledger's history when that is shorter (default
     * true): a young server is drawn over its own minutes, not in the right
     * edge of 6 hours.
     */
    fit?: boolean;
    /** Refresh on each new sample of this model (the cost panel's status poll). */
    follow?: ISampleSource;
    /** Stand by also while this answers true (e.g. the widget's view is detached). */
    standby?: () => boolean;
  }
}

/** The polled history of one spend chart. */
export class SpendChartModel extends PolledModel<ISpendHistory> {
  constructor(options: SpendChartModel.IOptions = {}) {
    super({
      name: 'jupyter-costguard:spend-chart',
      interval: options.interval ?? CHART_REFRESH_SECONDS,
      state: 'idle',
      standby: options.standby
    });
    this._settings = options.serverSettings;
    this._minutes = options.minutes ?? DEFAULT_CHART_MINUTES;
    this._notebook = options.notebook ?? null;
    this._fit = options.fit ?? true;
    this._follow = options.follow ?? null;
    this._follow?.changed.connect(this._onFollowed, this);
  }

  /** The last answer for the current window and notebook, or null. */
  get data(): ISpendHistory | null {
    return this._data;
  }

  /** The window, minutes. */
  get minutes(): number {
    return this._minutes;
  }
  set minutes(minutes: number) {
    if (minutes === this._minutes) {
      return;
    }
    this._minutes = minutes;
    this._questionChanged();
  }

  /** One notebook's path, or null for all of them. */
  get notebook(): string | null {
    return this._notebook;
  }
  set notebook(path: string | null) {
    const value = path ? path : null;
    if (value === this._notebook) {
      return;
    }
    this._notebook = value;
    this._questionChanged();
  }

  /**
   * Every notebook the server listed with spend in the window (for a
   * selector), kept from the last answer; the selected one is always there.
   */
  get notebooks(): string[] {
    const list = this._notebooks.slice();
    if (this._notebook && !list.includes(this._notebook)) {
      list.push(this._notebook);
    }
    return list;
  }

  /** Whether the chart is shown: polls while true. */
  get active(): boolean {
    return this.isRunning;
  }
  set active(shown: boolean) {
    if (shown) {
      this.start();
    } else {
      this.stop();
    }
  }

  protected fetch(): Promise<ISpendHistory> {
    this._askedAt = Date.now();
    return fetchSpendHistory(this._minutes, this._notebook, this._settings, this._fit);
  }

  protected onDispose(): void {
    this._follow?.changed.disconnect(this._onFollowed, this);
    super.onDispose();
  }

  /** A change of the followed model: ask again when it holds a new sample. */
  private _onFollowed(): void {
    const time = this._follow?.status?.time;
    if (!this.isRunning || this.isDisposed || typeof time !== 'number' || time === this._followed) {
      return;
    }
    this._followed = time;
    const bucket = this._data?.bucket_seconds ?? 60;
    const gap = FOLLOW_GAP_SECONDS[bucket] ?? FOLLOW_GAP_DEFAULT;
    if (Date.now() - this._askedAt < gap * 1000) {
      return;
    }
    void this.poll.refresh();
  }

  protected apply(doc: ISpendHistory): void {
    if (doc.minutes !== this._minutes || (doc.notebook ?? null) !== this._notebook) {
      return; // an answer to an earlier question
    }
    this._data = doc;
    this._notebooks = Array.isArray(doc.notebooks) ? doc.notebooks.slice() : [];
    this.emitChanged();
  }

  protected failed(reason: unknown): void {
    if (isNotFound(reason)) {
      this._data = null;
      super.failed(reason, 'unavailable' as PollState);
      return;
    }
    super.failed(reason);
  }

  private _questionChanged(): void {
    this._data = null;
    this.emitChanged();
    if (this.isRunning) {
      void this.poll.refresh();
    }
  }

  private _askedAt = -Infinity;
  private _data: ISpendHistory | null = null;
  private _fit: boolean;
  private _follow: ISampleSource | null;
  private _followed: number | null = null;
  private _minutes: number;
  private _notebook: string | null;
  private _notebooks: string[] = [];
  private _settings: ServerConnection.ISettings | undefined;
}
