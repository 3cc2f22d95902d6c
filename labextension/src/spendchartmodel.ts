/**
 * What a spend chart shows: `GET history` for its window (`minutes`) and,
 * optionally, one notebook, polled once a minute (PolledModel's policy) and
 * only while the chart is shown (`active`). Changing the window or the
 * notebook asks again at once; an answer to an earlier question is dropped.
 *
 * State `unavailable`: the server answered 404 (a notebook with no costs
 * recorded yet, or a server without the history route); the poll keeps
 * asking, backing off.
 */
import type { ServerConnection } from '@jupyterlab/services';

import { fetchSpendHistory, isNotFound, ISpendHistory } from './api';
import { PolledModel, PollState } from './polledmodel';
import { DEFAULT_CHART_MINUTES } from './spendchart';

/** Seconds between two polls of a shown chart. */
export const CHART_REFRESH_SECONDS = 60;

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
    return fetchSpendHistory(this._minutes, this._notebook, this._settings);
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

  private _data: ISpendHistory | null = null;
  private _minutes: number;
  private _notebook: string | null;
  private _notebooks: string[] = [];
  private _settings: ServerConnection.ISettings | undefined;
}
