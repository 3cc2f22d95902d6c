/**
 * Turns active alerts into JupyterLab notifications, once each (the decision
 * is AlertDeduplicator's, a pure, unit-tested model). Dismissing the
 * notification (its "Dismiss" button, or dismissing it in the notification
 * center) dismisses the alert on the server; "Snooze" snoozes it for
 * `snoozeSeconds`. Other actions run commands. Buttons and what they do come
 * from `alertactions.ts` (shared with the cost panel's Alerts section); the
 * message is the whole text (AlertToastText shows it whole and lets the
 * buttons wrap, since JupyterLab cuts messages at 140 characters).
 *
 * A notification shows the alert's latest figures and says when they are
 * from ("as of 14:02", the alert's `updated`: the sample that last raised
 * it): when a poll brings new figures for an alert already shown, its toast
 * is updated in place while it is on screen, and otherwise silently (the
 * notification centre's entry follows without the toast popping up again),
 * so that a toast never contradicts the cost panel's Alerts section, which
 * reads the same poll.
 */
import type { Notification, NotificationManager } from '@jupyterlab/apputils';
import type { ISignal } from '@lumino/signaling';

import { Disposable } from './disposable';
import {
  actionCaption,
  actionDisplayType,
  actionLabel,
  IAlertActionTarget,
  ICommandRunner,
  offeredActions,
  runAlertAction
} from './alertactions';
import type { IAlert, IAlertAction } from './api';
import { AlertDeduplicator, notificationType } from './alerts';
import { TOAST_MARK } from './alerttoasttext';
import { formatClock, isNumber } from './format';
import { DEFAULT_SNOOZE_SECONDS, clampSnooze } from './settings';

export type { ICommandRunner } from './alertactions';
export { OFFLOAD_UNAVAILABLE_TEXT, safeUrl } from './alertactions';

/** Where alerts come from (CostStatusModel). */
export interface IAlertSource extends IAlertActionTarget {
  readonly alertsReceived: ISignal<any, ReadonlyArray<IAlert>>;
  readonly alertsSimulated: boolean;
}

/**
 * The text of an alert's notification: title and when its figures are from
 * (`updated`), then the whole message.
 */
export function alertMessage(alert: IAlert, simulated = false): string {
  const asOf =
    isNumber(alert.updated) && alert.updated > 0 ? ` · as of ${formatClock(alert.updated)}` : '';
  const title = `${alert.title || alert.kind}${simulated ? ' (simulated)' : ''}${asOf}`;
  return alert.message ? `${title}\n${alert.message}` : title;
}

/** Whether an alert's toast is on screen now (marked by AlertToastText), not only in the centre. */
export function toastOnScreen(alertId: string): boolean {
  if (typeof document === 'undefined') {
    return false;
  }
  const marked = document.querySelectorAll(`#react-toastify-container [${TOAST_MARK}]`);
  return Array.from(marked).some(node => node.getAttribute(TOAST_MARK) === alertId);
}

export namespace AlertNotifier {
  export interface IOptions {
    source: IAlertSource;
    /** Usually `Notification.manager`. */
    manager: NotificationManager;
    commands: ICommandRunner;
    /** Pop-ups on (default true). */
    enabled?: boolean;
    /** Seconds a "Snooze" lasts (default 3600). */
    snoozeSeconds?: number;
    /** Open a URL in a new tab (default: `window.open(url, '_blank', 'noopener')`). */
    openUrl?: (url: string) => void;
    /** Whether an alert's toast is on screen (default `toastOnScreen`). */
    onScreen?: (alertId: string) => boolean;
  }
}

/**
 * Shows each active alert once as a notification, with its actions as buttons.
 */
export class AlertNotifier extends Disposable {
  constructor(options: AlertNotifier.IOptions) {
    super();
    this._source = options.source;
    this._manager = options.manager;
    this._commands = options.commands;
    this._enabled = options.enabled ?? true;
    this._snoozeSeconds = clampSnooze(
      options.snoozeSeconds ?? DEFAULT_SNOOZE_SECONDS
    );
    this._openUrl =
      options.openUrl ??
      ((url: string) => {
        window.open(url, '_blank', 'noopener,noreferrer');
      });
    this._onScreen = options.onScreen ?? toastOnScreen;
    this._source.alertsReceived.connect(this._onAlerts, this);
    this._manager.changed.connect(this._onManagerChanged, this);
  }

  /** Whether alerts pop up; turning it off closes the ones shown. */
  get enabled(): boolean {
    return this._enabled;
  }
  set enabled(value: boolean) {
    if (value === this._enabled) {
      return;
    }
    this._enabled = value;
    if (!value) {
      for (const alertId of Array.from(this._byAlert.keys())) {
        this._close(alertId);
      }
    }
  }

  /** Seconds a "Snooze" lasts. */
  get snoozeSeconds(): number {
    return this._snoozeSeconds;
  }
  set snoozeSeconds(value: number) {
    this._snoozeSeconds = clampSnooze(value);
  }

  /** Notification id shown for an alert, if any. */
  notificationId(alertId: string): string | undefined {
    return this._byAlert.get(alertId);
  }

  protected onDispose(): void {
    this._source.alertsReceived.disconnect(this._onAlerts, this);
    this._manager.changed.disconnect(this._onManagerChanged, this);
  }

  /** Process one poll's active alerts (connected to `alertsReceived`). */
  sync(alerts: ReadonlyArray<IAlert>): void {
    const decisions = this._dedup.update(alerts);
    for (const alert of alerts) {
      this._latest.set(alert.id, alert);
    }
    for (const id of decisions.gone) {
      this._latest.delete(id);
      this._close(id);
    }
    if (!this._enabled) {
      return;
    }
    const shown = new Set<IAlert>([...decisions.notify, ...decisions.escalate]);
    for (const alert of shown) {
      this._show(alert);
    }
    for (const alert of alerts) {
      if (!shown.has(alert)) {
        this._refresh(alert);
      }
    }
  }

  /**
   * Run one of an alert's actions (`runAlertAction`, shared with the cost
   * panel's Alerts section). Returns whether the notification should stay
   * open (the button then calls `preventDefault`).
   */
  runAction(alert: IAlert, action: IAlertAction): boolean {
    return runAlertAction(alert, action, {
      target: this._source,
      commands: this._commands,
      snoozeSeconds: this._snoozeSeconds,
      openUrl: this._openUrl,
      notify: (message, type) => {
        this._manager.notify(message, type, {
          autoClose: type === 'error' ? 8000 : 5000
        });
      },
      // Shut down / restart asked first: close only once done.
      onConfirmedDone: done => this._close(done.id)
    });
  }

  private _onAlerts(_: unknown, alerts: ReadonlyArray<IAlert>): void {
    this.sync(alerts);
  }

  private _actions(alert: IAlert): Notification.IAction[] {
    return offeredActions(alert).map(action => ({
      label: actionLabel(action, this._snoozeSeconds),
      caption: actionCaption(action, this._snoozeSeconds),
      displayType: actionDisplayType(action),
      callback: (event: MouseEvent) => {
        const latest = this._latest.get(alert.id) ?? alert;
        const nid = this._byAlert.get(alert.id);
        const keepOpen = this.runAction(latest, action);
        if (keepOpen) {
          event.preventDefault();
        } else if (nid) {
          // The notification closes next: not a user dismissal to forward.
          this._handled.add(nid);
        }
      }
    }));
  }

  /** The notification of an alert as it is now. */
  private _notification(alert: IAlert) {
    return {
      message: alertMessage(alert, this._source.alertsSimulated),
      type: notificationType(alert.severity),
      options: {
        actions: this._actions(alert),
        autoClose: (alert.severity === 'info' ? 10000 : false) as number | false,
        data: {
          costguardAlertId: alert.id,
          kind: alert.kind,
          severity: alert.severity,
          notebook: alert.notebook ?? null
        }
      }
    };
  }

  private _show(alert: IAlert): void {
    const { message, type, options } = this._notification(alert);
    this._message.set(alert.id, message);
    const existing = this._byAlert.get(alert.id);
    if (existing && this._manager.has(existing)) {
      this._manager.update({ id: existing, message, type, ...options });
      return;
    }
    const nid = this._manager.notify(message, type, options);
    this._byAlert.set(alert.id, nid);
    this._byNotification.set(nid, alert.id);
  }

  /**
   * New figures for an alert already shown: its toast follows in place while
   * on screen; otherwise only the notification centre's entry does (an
   * `autoClose` of 0 is JupyterLab's silent update: no toast pops up again).
   */
  private _refresh(alert: IAlert): void {
    const nid = this._byAlert.get(alert.id);
    if (!nid || !this._manager.has(nid)) {
      return;
    }
    const { message, type, options } = this._notification(alert);
    if (this._message.get(alert.id) === message) {
      return;
    }
    this._message.set(alert.id, message);
    const autoClose = this._onScreen(alert.id) ? options.autoClose : 0;
    this._manager.update({ id: nid, message, type, ...options, autoClose });
  }

  /** Close an alert's notification without dismissing the alert on the server. */
  private _close(alertId: string): void {
    const nid = this._byAlert.get(alertId);
    if (!nid) {
      return;
    }
    this._byAlert.delete(alertId);
    this._byNotification.delete(nid);
    this._message.delete(alertId);
    if (this._manager.has(nid)) {
      this._internal.add(nid);
      this._manager.dismiss(nid);
    }
  }

  private _onManagerChanged(
    _: NotificationManager,
    change: Notification.IChange
  ): void {
    if (change.type !== 'removed') {
      return;
    }
    const nid = change.notification.id;
    if (this._internal.delete(nid)) {
      return;
    }
    const alertId = this._byNotification.get(nid);
    if (alertId === undefined) {
      return;
    }
    this._byNotification.delete(nid);
    this._byAlert.delete(alertId);
    this._message.delete(alertId);
    if (this._handled.delete(nid)) {
      return;
    }
    // The user dismissed the notification: dismiss the alert too.
    this._source.dismissAlert(alertId).catch(reason => {
      const message = reason instanceof Error ? reason.message : String(reason);
      this._manager.notify(
        `Costguard: could not dismiss the alert: ${message}`,
        'error',
        { autoClose: 8000 }
      );
    });
  }

  private _byAlert = new Map<string, string>();
  private _byNotification = new Map<string, string>();
  private _commands: ICommandRunner;
  private _dedup = new AlertDeduplicator();
  private _enabled: boolean;
  private _handled = new Set<string>();
  private _internal = new Set<string>();
  private _latest = new Map<string, IAlert>();
  private _manager: NotificationManager;
  /** The text each alert's notification shows now. */
  private _message = new Map<string, string>();
  private _onScreen: (alertId: string) => boolean;
  private _openUrl: (url: string) => void;
  private _snoozeSeconds: number;
  private _source: IAlertSource;
}
