/**
 * Pure alert logic: severity ordering, which alerts concern a notebook, and
 * the de-duplication that decides when an alert becomes a pop-up. No DOM, no
 * JupyterLab imports: unit-tested in `__tests__/alerts.spec.ts`.
 */
import type {
  AlertSeverity,
  IAlert,
  INotebookAlerts,
  INotebookDoc
} from './api';
import { samePath } from './notebooks';

/** Severities, lowest first. */
export const SEVERITIES: ReadonlyArray<AlertSeverity> = [
  'info',
  'warning',
  'critical'
];

/** Rank of a severity (info 1, warning 2, critical 3; unknown 0). */
export function severityRank(severity: string | null | undefined): number {
  const index = SEVERITIES.indexOf(severity as AlertSeverity);
  return index + 1;
}

/** The highest of some severities, or null when there is none. */
export function maxSeverity(
  severities: ReadonlyArray<string | null | undefined>
): AlertSeverity | null {
  let best: AlertSeverity | null = null;
  for (const s of severities) {
    if (severityRank(s) > severityRank(best)) {
      best = s as AlertSeverity;
    }
  }
  return best;
}

/** JupyterLab notification type for an alert severity. */
export function notificationType(
  severity: string
): 'info' | 'warning' | 'error' {
  switch (severity) {
    case 'critical':
      return 'error';
    case 'warning':
      return 'warning';
    default:
      return 'info';
  }
}

/** The severity a notebook document reports (`alerts.severity`), if any. */
export function notebookDocSeverity(
  doc: INotebookDoc | null | undefined
): AlertSeverity | null {
  const summary = doc?.alerts as INotebookAlerts | null | undefined;
  if (!summary || typeof summary !== 'object') {
    return null;
  }
  return maxSeverity([summary.severity, summary.highest_severity]);
}

/**
 * Active alerts that concern a notebook: those naming its path, and those
 * naming a kernel that serves it now.
 */
export function alertsForNotebook(
  alerts: ReadonlyArray<IAlert>,
  path: string | null | undefined,
  doc?: INotebookDoc | null
): IAlert[] {
  if (!path) {
    return [];
  }
  const kernels = new Set(doc?.kernel_ids ?? []);
  return alerts.filter(
    a =>
      (a.notebook != null && samePath(a.notebook, path)) ||
      (a.kernel_id != null && kernels.has(a.kernel_id))
  );
}

/**
 * Highest severity of the alerts concerning a notebook: from the alert list
 * when the server has one (`alertsKnown`), else from the notebook document's
 * own `alerts` summary.
 */
export function notebookSeverity(
  alerts: ReadonlyArray<IAlert>,
  path: string | null | undefined,
  doc: INotebookDoc | null | undefined,
  alertsKnown: boolean
): AlertSeverity | null {
  if (!path) {
    return null;
  }
  const fromList = alertsKnown
    ? maxSeverity(alertsForNotebook(alerts, path, doc).map(a => a.severity))
    : null;
  return maxSeverity([fromList, notebookDocSeverity(doc)]);
}

/** What to do with one poll's alerts. */
export interface IAlertDecisions {
  /** Alerts never notified (or back after having gone): notify. */
  notify: IAlert[];
  /** Alerts updated to a severity above anything notified for them: notify again. */
  escalate: IAlert[];
  /** Ids that were active and no longer are (resolved, dismissed or snoozed). */
  gone: string[];
}

/** What the de-duplicator remembers about one alert. */
interface ISeen {
  updated: number;
  /** Highest severity notified for this id. */
  notified: AlertSeverity;
}

/**
 * Decides which alerts become pop-ups, so that each active alert appears once:
 *
 * - a new id is notified;
 * - a known id is notified again only when the server updated it
 *   (`updated` grew) to a severity above the highest already notified;
 * - an id that leaves the active list is forgotten, so if it comes back
 *   (a snooze ran out) it is notified again.
 *
 * Feed it only successful responses: a failed poll must not make alerts "go".
 */
export class AlertDeduplicator {
  /** Process one poll's active alerts. */
  update(alerts: ReadonlyArray<IAlert>): IAlertDecisions {
    const decisions: IAlertDecisions = { notify: [], escalate: [], gone: [] };
    const present = new Set<string>();
    for (const alert of alerts) {
      if (!alert || typeof alert.id !== 'string' || present.has(alert.id)) {
        continue;
      }
      present.add(alert.id);
      const updated = Number.isFinite(alert.updated) ? alert.updated : 0;
      const seen = this._seen.get(alert.id);
      if (!seen) {
        this._seen.set(alert.id, { updated, notified: alert.severity });
        decisions.notify.push(alert);
        continue;
      }
      if (updated <= seen.updated) {
        continue;
      }
      seen.updated = updated;
      if (severityRank(alert.severity) > severityRank(seen.notified)) {
        seen.notified = alert.severity;
        decisions.escalate.push(alert);
      }
    }
    for (const id of Array.from(this._seen.keys())) {
      if (!present.has(id)) {
        this._seen.delete(id);
        decisions.gone.push(id);
      }
    }
    return decisions;
  }

  /** Whether an id is currently remembered. */
  has(id: string): boolean {
    return this._seen.has(id);
  }

  /** Forget everything (e.g. after a server restart). */
  clear(): void {
    this._seen.clear();
  }

  private _seen = new Map<string, ISeen>();
}
