/**
 * What an alert's buttons say and do, wherever they are shown: the
 * notification (AlertNotifier) and the cost panel's Alerts section
 * (AlertsSection) both build their buttons from `offeredActions`,
 * `actionLabel`, `actionCaption` and `actionDisplayType`, and both run them
 * through `runAlertAction`, so a button behaves the same in either place.
 *
 * Labels are short so that the buttons fit on one line in a 25em toast and
 * in the ~300 px sidebar: a snooze says how long it lasts (`Snooze 1 h`, the
 * duration being the client's `snoozeSeconds` setting, not the server's
 * word), a dismiss without a label is `Dismiss`; the longer description is
 * the button's tooltip (`caption`, prefixed `Costguard:`).
 */
import type { ReadonlyJSONObject, ReadonlyPartialJSONObject } from '@lumino/coreutils';

import type { IAlert, IAlertAction } from './api';
import { CommandIDs } from './commands';

/** Shown when an alert offers offload and no offload command is installed. */
export const OFFLOAD_UNAVAILABLE_TEXT =
  'Costguard: offloading cells to a batch job is not available yet.';

/** Shown when an alert offers hibernate and the hibernate plugin is off. */
export const HIBERNATE_UNAVAILABLE_TEXT =
  'Costguard: hibernating a kernel is not available (the jupyter-costguard:hibernate plugin is off).';

/** Every button's tooltip starts with this. */
export const CAPTION_PREFIX = 'Costguard: ';

/** What the action runner needs of the command registry. */
export interface ICommandRunner {
  hasCommand(id: string): boolean;
  execute(id: string, args?: ReadonlyPartialJSONObject): Promise<any>;
}

/** Who dismisses and snoozes alerts on the server (CostStatusModel). */
export interface IAlertActionTarget {
  dismissAlert(id: string): Promise<void>;
  snoozeAlert(id: string, seconds: number): Promise<void>;
}

/** Button styles, as JupyterLab's notifications name them. */
export type ActionDisplayType = 'default' | 'accent' | 'warn' | 'link';

/** What running an action needs. */
export interface IAlertActionContext {
  target: IAlertActionTarget;
  commands: ICommandRunner;
  /** Seconds a snooze lasts. */
  snoozeSeconds: number;
  /** Open an http(s) URL (e.g. in a new tab). */
  openUrl(url: string): void;
  /** Tell the user something (a failure is an `error`). */
  notify(message: string, type: 'error' | 'info'): void;
  /** A shut down / restart the user confirmed has been done. */
  onConfirmedDone?(alert: IAlert): void;
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

/** The kernel an action concerns: its `args.kernel_id`, else the alert's. */
export function kernelIdOf(alert: IAlert, action: IAlertAction): string | null {
  const fromArgs = action.args?.kernel_id ?? action.args?.kernelId;
  if (typeof fromArgs === 'string' && fromArgs) {
    return fromArgs;
  }
  return alert.kernel_id || null;
}

/** Whether an action can be offered for this alert (known id, usable args). */
export function isActionOffered(alert: IAlert, action: IAlertAction): boolean {
  if (!action || typeof action.id !== 'string') {
    return false;
  }
  switch (action.id) {
    case 'dismiss':
    case 'snooze':
    case 'open-panel':
    case 'offload':
      return true;
    case 'shutdown-kernel':
    case 'restart-kernel':
    case 'interrupt-kernel':
    case 'hibernate':
      return kernelIdOf(alert, action) !== null;
    case 'open-url':
      return safeUrl(action.args?.url) !== null;
    default:
      return false;
  }
}

/**
 * The actions of an alert a UI offers, in the server's order: the server
 * says which (an idle-GPU alert's Hibernate comes first, from the guard).
 */
export function offeredActions(alert: IAlert): IAlertAction[] {
  const actions = Array.isArray(alert.actions) ? alert.actions : [];
  return actions.filter(action => isActionOffered(alert, action));
}

/** A snooze duration, short: `15 min`, `1 h`, `1 h 30 min`, `2 d`. */
export function formatSnooze(seconds: number): string {
  const minutes = Math.max(1, Math.round(seconds / 60));
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const days = Math.floor(minutes / 1440);
  const hours = Math.floor((minutes % 1440) / 60);
  const rest = minutes % 60;
  if (days > 0) {
    return hours > 0 ? `${days} d ${hours} h` : `${days} d`;
  }
  return rest > 0 ? `${hours} h ${rest} min` : `${hours} h`;
}

/** A button's text: short, one line. */
export function actionLabel(action: IAlertAction, snoozeSeconds: number): string {
  if (action.id === 'snooze') {
    return `Snooze ${formatSnooze(snoozeSeconds)}`;
  }
  const label = typeof action.label === 'string' ? action.label.trim() : '';
  if (label) {
    return label;
  }
  return action.id === 'dismiss' ? 'Dismiss' : String(action.id);
}

/** A button's tooltip: what it does, in full. */
export function actionCaption(action: IAlertAction, snoozeSeconds: number): string {
  switch (action.id) {
    case 'snooze':
      return `${CAPTION_PREFIX}hide this alert for ${formatSnooze(snoozeSeconds)}`;
    case 'dismiss':
      return `${CAPTION_PREFIX}dismiss this alert while its condition lasts`;
    case 'hibernate':
      return (
        `${CAPTION_PREFIX}save the kernel's variables, shut it down and free its GPUs; ` +
        'restore them from the notebook\'s banner (asks first)'
      );
    default:
      return `${CAPTION_PREFIX}${actionLabel(action, snoozeSeconds)}`;
  }
}

/** A button's style. */
export function actionDisplayType(action: IAlertAction): ActionDisplayType {
  switch (action.id) {
    case 'shutdown-kernel':
    case 'restart-kernel':
      return 'warn';
    case 'offload':
    case 'hibernate':
      return 'accent';
    case 'open-panel':
    case 'open-url':
      return 'link';
    default:
      return 'default';
  }
}

function execute(
  commands: ICommandRunner,
  id: string,
  args: ReadonlyPartialJSONObject
): Promise<any> {
  if (!commands.hasCommand(id)) {
    return Promise.reject(new Error(`command ${id} is not available`));
  }
  return commands.execute(id, args);
}

/** The command of each kernel action; those that ask first are done only once confirmed. */
const KERNEL_ACTIONS: { [id: string]: { command: string; confirmed: boolean } } = {
  'shutdown-kernel': { command: CommandIDs.shutdownKernel, confirmed: true },
  'restart-kernel': { command: CommandIDs.restartKernel, confirmed: true },
  'interrupt-kernel': { command: CommandIDs.interruptKernel, confirmed: false },
  hibernate: { command: CommandIDs.hibernateKernel, confirmed: true }
};

/**
 * Shut down, restart, interrupt or hibernate the alert's kernel through its
 * command; whether the notification stays open (see `runAlertAction`).
 */
function runKernelAction(
  alert: IAlert,
  action: IAlertAction,
  context: IAlertActionContext,
  report: (what: string) => (reason: unknown) => void
): boolean {
  const kernelId = kernelIdOf(alert, action);
  const { command, confirmed } = KERNEL_ACTIONS[action.id];
  if (!kernelId) {
    return true;
  }
  if (action.id === 'hibernate' && !context.commands.hasCommand(command)) {
    context.notify(HIBERNATE_UNAVAILABLE_TEXT, 'info');
    return true;
  }
  const notebook = alert.notebook ?? null;
  const args: ReadonlyJSONObject = notebook ? { kernelId, notebook } : { kernelId };
  execute(context.commands, command, args)
    .then(done => {
      // Shut down, restart and hibernate ask first: done only once confirmed.
      if (confirmed && done) {
        context.onConfirmedDone?.(alert);
      }
    })
    .catch(
      report(
        (typeof action.label === 'string' && action.label.toLowerCase()) ||
          'run the kernel action'
      )
    );
  return confirmed;
}

/**
 * Run one of an alert's actions. Returns whether the alert's notification
 * should stay open (true for actions that leave the alert as it is, and for
 * shut down / restart / hibernate, which ask first: `onConfirmedDone` says when done).
 */
export function runAlertAction(
  alert: IAlert,
  action: IAlertAction,
  context: IAlertActionContext
): boolean {
  const report = (what: string) => (reason: unknown) => {
    const message = reason instanceof Error ? reason.message : String(reason);
    context.notify(`Costguard: could not ${what}: ${message}`, 'error');
  };
  const notebook = alert.notebook ?? null;
  switch (action.id) {
    case 'dismiss':
      context.target.dismissAlert(alert.id).catch(report('dismiss the alert'));
      return false;
    case 'snooze':
      context.target
        .snoozeAlert(alert.id, context.snoozeSeconds)
        .catch(report('snooze the alert'));
      return false;
    case 'open-panel':
      execute(
        context.commands,
        CommandIDs.openPanel,
        notebook ? { path: notebook } : {}
      ).catch(report('open the cost panel'));
      return true;
    case 'shutdown-kernel':
    case 'restart-kernel':
    case 'interrupt-kernel':
    case 'hibernate':
      return runKernelAction(alert, action, context, report);
    case 'offload': {
      if (!context.commands.hasCommand(CommandIDs.offloadCells)) {
        context.notify(OFFLOAD_UNAVAILABLE_TEXT, 'info');
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
      execute(context.commands, CommandIDs.offloadCells, args).catch(
        report('offload')
      );
      return false;
    }
    case 'open-url': {
      const url = safeUrl(action.args?.url);
      if (url) {
        context.openUrl(url);
      }
      return true;
    }
    default:
      return true;
  }
}
