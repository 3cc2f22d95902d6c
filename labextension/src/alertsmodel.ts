/**
 * What the cost panel's Alerts section shows: the active alerts, or with
 * "Show dismissed" every alert the server remembers (dismissed, snoozed and
 * resolved ones too), and the actions run on them.
 *
 * No second poll of the same document: the active list is the shared one
 * (CostStatusModel's `alerts` poll, which the notifications read too). Only
 * while "Show dismissed" is on *and* the section is shown does this model
 * poll `GET alerts?include=all` itself (PolledModel's policy: standby while
 * the tab is hidden, back-off on errors), at the shared refresh interval.
 */
import type { ServerConnection } from '@jupyterlab/services';
import type { ISignal } from '@lumino/signaling';

import type { IAlertActionTarget } from './alertactions';
import { IAlert, IAlertList, fetchAlerts } from './api';
import { severityRank } from './alerts';
import { PolledModel, PollState } from './polledmodel';

/** An alert's state as the section shows it. */
export type AlertRowState = 'active' | 'dismissed' | 'snoozed' | 'resolved';

/** `resolved` once its condition ended, else the server's state. */
export function alertRowState(alert: IAlert): AlertRowState {
  if (typeof alert.resolved === 'number') {
    return 'resolved';
  }
  switch (alert.state) {
    case 'dismissed':
    case 'snoozed':
      return alert.state;
    default:
      return 'active';
  }
}

/** Active alerts first (most severe, then newest), then the others (newest first). */
export function sortAlerts(alerts: ReadonlyArray<IAlert>): IAlert[] {
  const key = (a: IAlert) => (alertRowState(a) === 'active' ? 0 : 1);
  return alerts
    .map((alert, index) => ({ alert, index }))
    .sort(
      (x, y) =>
        key(x.alert) - key(y.alert) ||
        (key(x.alert) === 0
          ? severityRank(y.alert.severity) - severityRank(x.alert.severity)
          : 0) ||
        (y.alert.updated ?? 0) - (x.alert.updated ?? 0) ||
        x.index - y.index
    )
    .map(entry => entry.alert);
}

/** What the rows show, in a string: equal strings, nothing to redraw. */
function rowsSignature(alerts: ReadonlyArray<IAlert>): string {
  return JSON.stringify(
    alerts.map(a => [a.id, a.updated, a.state, a.resolved ?? null, a.severity])
  );
}

/** What the model needs of the shared state (CostStatusModel). */
export interface IAlertsFeed extends IAlertActionTarget {
  readonly changed: ISignal<any, void>;
  /** Active alerts of the latest shared `GET alerts`. */
  readonly alerts: ReadonlyArray<IAlert>;
  /** `loading`, `ok`, `unavailable` (no alerts route) or `error`. */
  readonly alertsState: string;
  readonly alertsSimulated: boolean;
  readonly refreshInterval: number;
  readonly serverSettings: ServerConnection.ISettings;
}

export namespace AlertsModel {
  export interface IOptions {
    feed: IAlertsFeed;
  }
}

/** The Alerts section's model (see the file's header). */
export class AlertsModel extends PolledModel<IAlertList, PollState> {
  constructor(options: AlertsModel.IOptions) {
    super({
      name: 'jupyter-costguard:alerts-all',
      interval: options.feed.refreshInterval,
      state: 'idle'
    });
    this._feed = options.feed;
    this._feed.changed.connect(this._onFeedChanged, this);
  }

  /** The shared state this model reads and acts through. */
  get feed(): IAlertsFeed {
    return this._feed;
  }

  /** Whether dismissed, snoozed and resolved alerts are listed too. */
  get showDismissed(): boolean {
    return this._showDismissed;
  }
  set showDismissed(value: boolean) {
    if (value === this._showDismissed) {
      return;
    }
    this._showDismissed = value;
    if (!value) {
      this._all = null;
    }
    this._update();
    this.emitChanged();
  }

  /** Whether the section is shown (it polls only then). */
  get shown(): boolean {
    return this._shown;
  }
  set shown(value: boolean) {
    if (value === this._shown) {
      return;
    }
    this._shown = value;
    this._update();
  }

  /** The rows: active alerts first. */
  get alerts(): ReadonlyArray<IAlert> {
    return this._rows;
  }

  /** How many of the rows are active. */
  get activeCount(): number {
    return this._rows.filter(a => alertRowState(a) === 'active').length;
  }

  /** Whether the figures in the alerts come from a replayed trace. */
  get simulated(): boolean {
    return this._all ? this._allSimulated : this._feed.alertsSimulated;
  }

  /**
   * What the rows are: `loading` before the first answer, `ok`,
   * `unavailable` (a server without alerts) or `offline`.
   */
  get listState(): 'loading' | 'ok' | 'unavailable' | 'offline' {
    if (this._showDismissed && !this._all) {
      if (this.state === 'offline') {
        return 'offline';
      }
      if (this.state === 'unavailable') {
        return 'unavailable';
      }
    }
    if (this._all) {
      return 'ok';
    }
    switch (this._feed.alertsState) {
      case 'ok':
        return 'ok';
      case 'unavailable':
        return 'unavailable';
      case 'error':
        return 'offline';
      default:
        return 'loading';
    }
  }

  /** Dismiss on the server; the list follows at once. */
  async dismiss(id: string): Promise<void> {
    await this._after(this._feed.dismissAlert(id));
  }

  /** Snooze on the server; the list follows at once. */
  async snooze(id: string, seconds: number): Promise<void> {
    await this._after(this._feed.snoozeAlert(id, seconds));
  }

  protected onDispose(): void {
    this._feed.changed.disconnect(this._onFeedChanged, this);
    super.onDispose();
  }

  protected fetch(): Promise<IAlertList> {
    return fetchAlerts({ include: 'all' }, this._feed.serverSettings);
  }

  protected apply(doc: IAlertList): void {
    if (!this._showDismissed) {
      return;
    }
    this._all = Array.isArray(doc?.alerts)
      ? doc.alerts.filter(a => a && typeof a.id === 'string')
      : [];
    this._allSimulated = doc?.simulated === true;
    this._rows = sortAlerts(this._all);
    this._signature = rowsSignature(this._rows);
    this.emitChanged();
  }

  protected failed(reason: unknown): void {
    const status = (reason as { response?: { status?: number } } | null)?.response
      ?.status;
    super.failed(reason, status === 404 ? 'unavailable' : 'offline');
  }

  /** After an action, show the server's word on the whole list. */
  private async _after(request: Promise<void>): Promise<void> {
    try {
      await request;
    } finally {
      if (this._showDismissed && this.isRunning) {
        void this.pollNow().catch(() => undefined);
      }
    }
  }

  /** Poll `include=all` only while shown and asked for. */
  private _update(): void {
    if (this.isDisposed) {
      return;
    }
    if (this._feed.refreshInterval !== this.interval) {
      this.setInterval(this._feed.refreshInterval);
    }
    if (this._shown && this._showDismissed) {
      // Starting polls at once.
      this.start();
    } else {
      this.stop();
    }
    if (!this._all) {
      this._rows = sortAlerts(this._feed.alerts);
      this._signature = rowsSignature(this._rows);
    }
  }

  private _onFeedChanged(): void {
    if (this._feed.refreshInterval !== this.interval) {
      this.setInterval(this._feed.refreshInterval);
    }
    if (this._all) {
      // A dismiss or snooze through the feed hides the alert there at once:
      // mirror that here until the next `include=all` says its new state.
      const active = new Set(this._feed.alerts.map(a => a.id));
      const hidden = this._all.some(
        a =>
          alertRowState(a) === 'active' &&
          !active.has(a.id) &&
          this._feed.alertsState === 'ok'
      );
      if (!hidden) {
        return;
      }
      this._rows = sortAlerts(
        this._all.filter(
          a => alertRowState(a) !== 'active' || active.has(a.id)
        )
      );
      this.emitChanged();
      return;
    }
    const next = sortAlerts(this._feed.alerts);
    const signature = rowsSignature(next);
    if (signature === this._signature) {
      return;
    }
    this._rows = next;
    this._signature = signature;
    this.emitChanged();
  }

  private _all: IAlert[] | null = null;
  private _allSimulated = false;
  private _feed: IAlertsFeed;
  private _rows: IAlert[] = [];
  private _showDismissed = false;
  private _signature = '';
  private _shown = false;
}
