/**
 * Turns active alerts into JupyterLab notifications, once each (the decision
 * is AlertDeduplicator's, a pure, unit-tested model). Dismissing the
 * notification (its "Dismiss" button, or dismissing it in the notification
 * center) dismisses the alert on the server; "Snooze" snoozes it for
 * `snoozeSeconds`. Other actions run commands.
 */
import type { Notification, NotificationManager } from '@jupyterlab/apputils';
import type { ReadonlyJSONObject, ReadonlyPartialJSONObject } from '@lumino/coreutils';
import type { ISignal } from '@lumino/signaling';

import type { IAlert, IAlertAction } from './api';
import { AlertDeduplicator, notificationType } from './alerts';
import { CommandIDs } from './commands';
import { DEFAULT_SNOOZE_SECONDS, clampSnooze } from './settings';

/** The longest message a JupyterLab notification shows untruncated. */
export const MAX_NOTIFICATION_LENGTH = 140;

/** Shown when an alert offers offload and no offload command is installed. */
export const OFFLOAD_UNAVAILABLE_TEXT =
  'Costguard: offloading cells to a batch job is not available yet.';

/** Where alerts come from (CostStatusModel). */
export interface IAlertSource {
  readonly alertsReceived: ISignal<any, ReadonlyArray<IAlert>>;
  readonly alertsSimulated: boolean;
  dismissAlert(id: string): Promise<void>;
  snoozeAlert(id: string, seconds: number): Promise<void>;
}

/** What the notifier needs of the command registry. */
export interface ICommandRunner {
  hasCommand(id: string): boolean;
  execute(id: string, args?: ReadonlyPartialJSONObject): Promise<any>;
}

/** The text of an alert's notification: title, then the message. */
export function alertMessage(alert: IAlert, simulated = false): string {
  const title = `${alert.title || alert.kind}${simulated ? ' (simulated)' : ''}`;
  return alert.message ? `${title}\n${alert.message}` : title;
}

/** Only http(s) URLs may be opened from an alert. */
export function safeUrl(url: unknown): string | null {
  if (typeof url !== 'string') {
    return null;
  }
  try {
    const base =
      typeof window !== 'undefined' ? window.location.href : 'http://localhost/';
    const parsed = new URL(url, base);
    return parsed.protocol === 'http:' || parsed.protocol === 'https:'
      ? parsed.href
      : null;
  } catch {
    return null;
  }
}

function kernelIdOf(alert: IAlert, action: IAlertAction): string | null {
  const fromArgs = action.args?.kernel_id ?? action.args?.kernelId;
  if (typeof fromArgs === 'string' && fromArgs) {
    return fromArgs;
  }
  return alert.kernel_id || null;
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
  }
}

/**
 * Shows each active alert once as a notification, with its actions as buttons.
 */
export class AlertNotifier {
  constructor(options: AlertNotifier.IOptions) {
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

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
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
    for (const alert of decisions.notify) {
      this._show(alert);
    }
    for (const alert of decisions.escalate) {
      this._show(alert);
    }
  }

  /**
   * Run one of an alert's actions. Returns whether the notification should
   * stay open (the button then calls `preventDefault`).
   */
  runAction(alert: IAlert, action: IAlertAction): boolean {
    const report = (what: string) => (reason: unknown) => {
      const message = reason instanceof Error ? reason.message : String(reason);
      this._manager.notify(`Costguard: could not ${what}: ${message}`, 'error', {
        autoClose: 8000
      });
    };
    const notebook = alert.notebook ?? null;
    switch (action.id) {
      case 'dismiss':
        this._source.dismissAlert(alert.id).catch(report('dismiss the alert'));
        return false;
      case 'snooze':
        this._source
          .snoozeAlert(alert.id, this._snoozeSeconds)
          .catch(report('snooze the alert'));
        return false;
      case 'open-panel':
        this._execute(CommandIDs.openPanel, notebook ? { path: notebook } : {}).catch(
          report('open the cost panel')
        );
        return true;
      case 'shutdown-kernel':
      case 'restart-kernel':
      case 'interrupt-kernel': {
        const kernelId = kernelIdOf(alert, action);
        if (!kernelId) {
          return true;
        }
        const command =
          action.id === 'shutdown-kernel'
            ? CommandIDs.shutdownKernel
            : action.id === 'restart-kernel'
              ? CommandIDs.restartKernel
              : CommandIDs.interruptKernel;
        const args: ReadonlyJSONObject = notebook
          ? { kernelId, notebook }
          : { kernelId };
        const confirmed = action.id !== 'interrupt-kernel';
        this._execute(command, args)
          .then(done => {
            // Shut down / restart ask first: close only once done.
            if (confirmed && done) {
              this._close(alert.id);
            }
          })
          .catch(report(action.label.toLowerCase() || 'run the kernel action'));
        return confirmed;
      }
      case 'offload': {
        if (!this._commands.hasCommand(CommandIDs.offloadCells)) {
          this._manager.notify(OFFLOAD_UNAVAILABLE_TEXT, 'info', {
            autoClose: 5000
          });
          return true;
        }
        const args: { [key: string]: any } = {
          ...(action.args ?? {}),
          alertId: alert.id
        };
        if (notebook) {
          args.notebook = notebook;
        }
        if (alert.kernel_id) {
          args.kernelId = alert.kernel_id;
        }
        this._execute(CommandIDs.offloadCells, args).catch(report('offload'));
        return false;
      }
      case 'open-url': {
        const url = safeUrl(action.args?.url);
        if (url) {
          this._openUrl(url);
        }
        return true;
      }
      default:
        return true;
    }
  }

  private _execute(id: string, args: ReadonlyPartialJSONObject): Promise<any> {
    if (!this._commands.hasCommand(id)) {
      return Promise.reject(new Error(`command ${id} is not available`));
    }
    return this._commands.execute(id, args);
  }

  private _onAlerts(_: unknown, alerts: ReadonlyArray<IAlert>): void {
    this.sync(alerts);
  }

  /** Whether an action can be offered for this alert. */
  private _offered(alert: IAlert, action: IAlertAction): boolean {
    switch (action.id) {
      case 'dismiss':
      case 'snooze':
      case 'open-panel':
      case 'offload':
        return true;
      case 'shutdown-kernel':
      case 'restart-kernel':
      case 'interrupt-kernel':
        return kernelIdOf(alert, action) !== null;
      case 'open-url':
        return safeUrl(action.args?.url) !== null;
      default:
        return false;
    }
  }

  private _actions(alert: IAlert): Notification.IAction[] {
    const actions = Array.isArray(alert.actions) ? alert.actions : [];
    return actions
      .filter(action => action && this._offered(alert, action))
      .map(action => ({
        label: action.label || action.id,
        caption: action.id === 'snooze' ? `Snooze for ${Math.round(this._snoozeSeconds / 60)} min` : undefined,
        displayType:
          action.id === 'shutdown-kernel' || action.id === 'restart-kernel'
            ? 'warn'
            : action.id === 'offload'
              ? 'accent'
              : action.id === 'open-panel' || action.id === 'open-url'
                ? 'link'
                : 'default',
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

  private _show(alert: IAlert): void {
    const message = alertMessage(alert, this._source.alertsSimulated);
    const type = notificationType(alert.severity);
    const options = {
      actions: this._actions(alert),
      autoClose: (alert.severity === 'info' ? 10000 : false) as number | false,
      data: {
        costguardAlertId: alert.id,
        kind: alert.kind,
        severity: alert.severity,
        notebook: alert.notebook ?? null
      }
    };
    const existing = this._byAlert.get(alert.id);
    if (existing && this._manager.has(existing)) {
      this._manager.update({ id: existing, message, type, ...options });
      return;
    }
    const nid = this._manager.notify(message, type, options);
    this._byAlert.set(alert.id, nid);
    this._byNotification.set(nid, alert.id);
  }

  /** Close an alert's notification without dismissing the alert on the server. */
  private _close(alertId: string): void {
    const nid = this._byAlert.get(alertId);
    if (!nid) {
      return;
    }
    this._byAlert.delete(alertId);
    this._byNotification.delete(nid);
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
  private _isDisposed = false;
  private _latest = new Map<string, IAlert>();
  private _manager: NotificationManager;
  private _openUrl: (url: string) => void;
  private _snoozeSeconds: number;
  private _source: IAlertSource;
}
