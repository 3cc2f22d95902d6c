/**
 * A stand-in for CostStatusModel as the Alerts section's model reads it: the
 * shared active list, and dismiss/snooze that hide the alert at once (as the
 * real one does) and record the request.
 */
import type { ServerConnection } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';

import type { IAlert } from '../api';
import type { IAlertsFeed } from '../alertsmodel';
import type { FakeServer } from './fakeserver';

/** Just enough of CostStatusModel: its alert list, and dismiss/snooze that hide at once. */
export class FakeFeed implements IAlertsFeed {
  /** Without a server, only an include=all fetch (which asks for `serverSettings`) fails. */
  constructor(readonly server?: FakeServer) {}

  changed = new Signal<this, void>(this);
  alerts: IAlert[] = [];
  alertsState = 'ok';
  alertsSimulated = false;
  refreshInterval = 2;
  get serverSettings(): ServerConnection.ISettings {
    if (!this.server) {
      throw new Error('FakeFeed: no server');
    }
    return this.server.settings();
  }
  dismissed: string[] = [];
  snoozed: [string, number][] = [];

  set(...alerts: IAlert[]): void {
    this.alerts = alerts;
    this.changed.emit();
  }

  dismissAlert(id: string): Promise<void> {
    this.dismissed.push(id);
    this.set(...this.alerts.filter(a => a.id !== id));
    return Promise.resolve();
  }

  snoozeAlert(id: string, seconds: number): Promise<void> {
    this.snoozed.push([id, seconds]);
    this.set(...this.alerts.filter(a => a.id !== id));
    return Promise.resolve();
  }
}
