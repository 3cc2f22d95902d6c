/**
 * Pure logic of the in-notebook cost widget: which kernel and notebook to
 * show, which alert to surface, what to say when the server cannot be
 * reached, and the text of every part, written with format.ts's formatters
 * (the same figure reads the same in the widget, the panel and the status
 * bar). No DOM, no JupyterLab or ipywidgets imports: unit-tested in
 * `__tests__/costwidgetsummary.spec.ts`. `costwidgetfeed.ts` fetches what
 * this module summarises; `costwidget.ts` renders it.
 */
import {
  errorStatus,
  IAlert,
  ICostStatus,
  IKernelDoc,
  IKernelList,
  INotebookDetail
} from './api';
import { severityRank } from './alerts';
import {
  asOfLine,
  formatBytes,
  formatDuration,
  formatMoney,
  formatOwner,
  formatOwnerLine,
  formatPercent,
  formatRate,
  formatTime,
  formatUtilization,
  isNumber,
  ownerOf,
  SEPARATOR,
  UNKNOWN_ACTIVITY_TITLE
} from './format';
import type { ISnapshot } from './hibernateapi';
import { bannerText, bannerTitle, newestSnapshot, snapshotState } from './hibernatemodel';

/** ipywidgets module name of the cost widget (`_model_module` in Python). */
export const MODULE_NAME = 'jupyter-costguard';

/**
 * Version the widget module registers with; the package's version
 * (checked against package.json by the tests). Python asks for `^0.1.0`.
 */
export const MODULE_VERSION = '0.1.0';

/** Default refresh interval of the widget, seconds (Python default too). */
export const DEFAULT_WIDGET_REFRESH_SECONDS = 2;

/** Shortest refresh interval the widget accepts, seconds. */
export const MIN_WIDGET_REFRESH_SECONDS = 0.5;

/** How often the (slowly changing) instance status is re-read, ms. */
export const STATUS_MAX_AGE_MS = 15 * 1000;

/** How often the notebook's snapshots (they change rarely) are re-read, ms. */
export const SNAPSHOTS_MAX_AGE_MS = 15 * 1000;

/** How often to re-check a server that had no alerts endpoint, ms. */
export const ALERTS_RECHECK_MS = 60 * 1000;

/** Text shown while the kernel has not been sampled yet. */
export const WAITING_TEXT = 'costguard: waiting for the first sample…';

/** Text shown before the first response. */
export const WIDGET_LOADING_TEXT = 'costguard: loading…';

/** The expand toggle's text, collapsed and expanded. */
export const CHART_TOGGLE_TEXT = { collapsed: '▸ chart', expanded: '▾ chart' };

/** Its tooltip, collapsed and expanded. */
export const CHART_TOGGLE_TITLE = {
  collapsed: "Show this notebook's spend and waste over time",
  expanded: 'Hide the chart'
};

/**
 * The expanded view's chart box (SVG user units): wider than the panel's,
 * as an output area is; the CSS caps its width so it never grows huge.
 */
export const WIDGET_CHART_LAYOUT = {
  width: 480,
  height: 140,
  left: 46,
  right: 8,
  top: 8,
  bottom: 18
};

/** Whether the widget offers its chart: only for a notebook (a console has none). */
export function canExpand(summary: ICostWidgetSummary | null): boolean {
  return summary !== null && !!summary.notebook;
}

/**
 * The kernel to show: the first candidate id that the server lists.
 *
 * Candidates are, in order, the `kernel_id` trait (found kernel-side from
 * the connection file) and the id of the kernel the page's widget manager
 * talks to (what the server calls it, e.g. behind a gateway).
 */
export function pickKernel(
  kernels: readonly IKernelDoc[] | null | undefined,
  candidates: readonly (string | null | undefined)[]
): IKernelDoc | null {
  if (!kernels) {
    return null;
  }
  for (const id of candidates) {
    if (!id) {
      continue;
    }
    const found = kernels.find(k => k.kernel_id === id);
    if (found) {
      return found;
    }
  }
  return null;
}

/**
 * The notebook whose spend the widget shows: the `notebook` override when
 * set, else the notebook the server attributes the kernel to, else none
 * (a console or a kernel without a session: the kernel's own figures).
 */
export function notebookPathFor(
  kernel: IKernelDoc | null,
  override?: string | null
): string | null {
  const wanted = (override ?? '').trim().replace(/^\/+/, '');
  if (wanted) {
    return wanted;
  }
  const path = kernel?.notebook;
  return typeof path === 'string' && path.length > 0 ? path : null;
}

/** When an alert was last raised or changed (epoch seconds), else 0. */
function alertTime(alert: IAlert): number {
  for (const value of [alert.updated, alert.created]) {
    if (isNumber(value)) {
      return value;
    }
  }
  return 0;
}

/**
 * The one alert to show for this notebook: active ones only (not resolved,
 * dismissed or snoozed), for this notebook when the alert names one, the
 * most severe first, then the most recently updated.
 */
export function pickAlert(
  alerts: readonly IAlert[] | null | undefined,
  notebook: string | null
): IAlert | null {
  if (!alerts || alerts.length === 0) {
    return null;
  }
  const relevant = alerts.filter(alert => {
    if (!alert || typeof alert !== 'object') {
      return false;
    }
    if (typeof alert.state === 'string' && alert.state !== 'active') {
      return false;
    }
    const resolved: unknown = alert.resolved;
    if (resolved !== undefined && resolved !== null && resolved !== false) {
      return false;
    }
    if (
      notebook &&
      typeof alert.notebook === 'string' &&
      alert.notebook !== notebook
    ) {
      return false;
    }
    return true;
  });
  const rank = (alert: IAlert): number =>
    severityRank(String(alert.severity ?? '').toLowerCase());
  relevant.sort((a, b) => {
    const bySeverity = rank(b) - rank(a);
    if (bySeverity !== 0) {
      return bySeverity;
    }
    return alertTime(b) - alertTime(a);
  });
  return relevant[0] ?? null;
}

/**
 * One line saying why the widget has no figures, for a failed request.
 */
export function offlineMessage(error: unknown): string {
  const status = errorStatus(error);
  if (status === null) {
    return "costguard: can't reach the Jupyter server";
  }
  if (status === 404) {
    return 'costguard: the costguard server extension is not enabled here';
  }
  if (status === 401 || status === 403) {
    return 'costguard: not authorised to read costs on this server';
  }
  return `costguard: the server answered ${status}`;
}

/** Kinds of part, each rendered as `.jp-costguard-widget-<kind>`. */
export type CostWidgetPartKind = 'spend' | 'waste' | 'gpu' | 'idle' | 'rate' | 'snapshot';

/** One piece of the widget's line. */
export interface ICostWidgetPart {
  kind: CostWidgetPartKind;
  text: string;
  title: string;
}

/** What the widget shows for one successful refresh. */
export interface ICostWidgetSummary {
  /** `waiting`: the server does not list this kernel (yet). */
  state: 'ok' | 'waiting';
  parts: ICostWidgetPart[];
  alert: {
    id: string;
    severity: string;
    text: string;
    title: string;
  } | null;
  simulated: boolean;
  kernelId: string | null;
  notebook: string | null;
  /**
   * Whose server this is under JupyterHub (`alice`, `alice · gpu-large`);
   * null when not under a hub or on an older server.
   */
  owner: string | null;
  /** Plain text of the whole widget (parts joined with ` · `). */
  text: string;
  /** Tooltip of the widget: what each figure means. */
  title: string;
}

/** Everything one refresh fetched. */
export interface ICostWidgetInput {
  kernels: IKernelList;
  /** The kernel picked from `kernels` (null: not listed yet). */
  kernel: IKernelDoc | null;
  /** The notebook shown, or null when the kernel has none. */
  notebookPath: string | null;
  /** Its detail; null when it has no costs recorded yet (404). */
  notebook: INotebookDetail | null;
  /** Instance status; null when not (yet) read. */
  status: ICostStatus | null;
  /** Alerts for the notebook; null when the server has no alerts (404). */
  alerts: IAlert[] | null;
  /**
   * The notebook's snapshots (`GET snapshots?notebook=`); null when not read
   * (no notebook, or a server without hibernation).
   */
  snapshots?: ISnapshot[] | null;
}

/** The alert the widget shows, from the picked alert. */
function shownAlertOf(alert: IAlert | null): ICostWidgetSummary['alert'] {
  return alert
    ? {
        id: String(alert.id),
        severity: (alert.severity || 'warning').toLowerCase(),
        text: alert.title || alert.message || alert.kind || 'costguard alert',
        title: [alert.title, alert.message].filter(Boolean).join('\n')
      }
    : null;
}

/**
 * Spend and waste: the notebook's (all kernels that ever served it) when the
 * server has recorded it, else this kernel's.
 */
function spendParts(input: ICostWidgetInput, kernel: IKernelDoc, currency: string): ICostWidgetPart[] {
  const { notebook, notebookPath } = input;
  const parts: ICostWidgetPart[] = [];
  const useNotebook = notebook !== null && isNumber(notebook.spend);
  const scope = useNotebook
    ? `notebook ${notebookPath}, every kernel that served it`
    : 'this kernel';
  const spend = useNotebook ? notebook.spend : kernel.spend;
  const waste = useNotebook ? notebook.waste : kernel.waste;
  if (isNumber(spend)) {
    const since =
      useNotebook && isNumber(notebook.first_seen)
        ? ` since ${formatTime(notebook.first_seen)}`
        : '';
    parts.push({
      kind: 'spend',
      text: `spent ${formatMoney(spend, currency)}`,
      title: `Spend of ${scope}${since}`
    });
  }
  if (isNumber(waste)) {
    const share =
      isNumber(spend) && spend > 0
        ? ` (${formatPercent((100 * waste) / spend)})`
        : '';
    parts.push({
      kind: 'waste',
      text: `waste ${formatMoney(waste, currency)}${share}`,
      title:
        `Waste of ${scope}: GPU time held while the GPU was idle ` +
        'and the kernel was not busy'
    });
  }
  return parts;
}

/** The kernel's GPUs: none, or their utilisation and memory. */
function gpuPart(kernel: IKernelDoc): ICostWidgetPart {
  const gpus = Array.isArray(kernel.gpus) ? kernel.gpus : [];
  if (gpus.length === 0) {
    return { kind: 'gpu', text: 'no GPU', title: 'This kernel holds no GPU memory' };
  }
  const util = kernel.gpu_utilization_percent;
  const label = gpus.length === 1 ? 'GPU' : `${gpus.length} GPUs`;
  const unknown = kernel.gpu_activity === 'unknown';
  const utilText = formatUtilization(util, kernel.gpu_activity);
  const memText = isNumber(kernel.gpu_memory_bytes)
    ? `, ${formatBytes(kernel.gpu_memory_bytes)}`
    : '';
  const how =
    kernel.attribution && kernel.attribution !== 'none'
      ? ` (attribution: ${kernel.attribution})`
      : '';
  return {
    kind: 'gpu',
    text: `${label} ${utilText}${memText}`,
    title:
      `This kernel's GPU utilisation and GPU memory on ${gpus.join(', ')}` +
      how +
      (unknown ? ` (${UNKNOWN_ACTIVITY_TITLE})` : '')
  };
}

/** Running, starting, or idle for how long (null when the server does not say). */
function idlePart(kernel: IKernelDoc): ICostWidgetPart | null {
  const state = kernel.execution_state ?? '';
  if (state === 'busy') {
    return { kind: 'idle', text: 'running', title: 'The kernel is executing' };
  }
  if (state === 'starting') {
    return { kind: 'idle', text: 'starting', title: 'The kernel is starting' };
  }
  if (isNumber(kernel.idle_seconds)) {
    return {
      kind: 'idle',
      text: `idle ${formatDuration(kernel.idle_seconds)}`,
      title: 'Time since the kernel last did anything'
    };
  }
  return null;
}

/** The instance and its rate (or unpriced), with what this kernel costs now. */
function ratePart(status: ICostStatus, kernel: IKernelDoc, currency: string): ICostWidgetPart {
  const instance = status.instance?.instance_type;
  const rate = status.rate_per_hour;
  const kernelRate = isNumber(kernel.spend_rate_per_hour)
    ? `; this kernel now costs ${formatRate(kernel.spend_rate_per_hour, currency)}`
    : '';
  if (isNumber(rate)) {
    return {
      kind: 'rate',
      text: `${instance ? `${instance} ` : ''}${formatRate(rate, status.currency || currency)}`,
      title: `Instance rate${status.market ? ` (${status.market})` : ''}` + kernelRate
    };
  }
  return {
    kind: 'rate',
    text: instance ? `${instance} unpriced` : 'unpriced',
    title: `No price known for this instance${
      status.price_detail ? `: ${status.price_detail}` : ''
    }`
  };
}

/**
 * The notebook's snapshot still to restore, as its banner says it:
 * "Hibernated at 14:02 · 3.2 GiB · 42 variables" (null when there is none).
 */
function snapshotPart(input: ICostWidgetInput, currency: string): ICostWidgetPart | null {
  const path = input.notebookPath;
  const pending = (input.snapshots ?? []).filter(s => snapshotState(s) === 'hibernated');
  const snapshot = path ? newestSnapshot(pending, path) : null;
  if (!snapshot) {
    return null;
  }
  return {
    kind: 'snapshot',
    text: bannerText(snapshot),
    title:
      `This notebook's variables, saved when its kernel was hibernated; restore them from ` +
      `the notebook's banner\n${bannerTitle(snapshot, currency)}`
  };
}

/**
 * Summarise one refresh for display.
 */
export function summarizeWidget(input: ICostWidgetInput): ICostWidgetSummary {
  const { kernel, notebook, status } = input;
  const simulated =
    input.kernels.simulated === true ||
    notebook?.simulated === true ||
    status?.simulated === true;
  const currency =
    input.kernels.currency || notebook?.currency || status?.currency || 'USD';
  const found = ownerOf([input.kernels, notebook, status]);
  const owner = found ? formatOwner(found.user, found.server) : null;
  const ownerLine = found ? formatOwnerLine(found.user, found.server) : null;
  const notebookPath = input.notebookPath;
  const shownAlert = shownAlertOf(pickAlert(input.alerts, notebookPath));
  const common = { alert: shownAlert, simulated, notebook: notebookPath, owner };

  if (!kernel) {
    return {
      ...common,
      state: 'waiting',
      parts: [],
      kernelId: null,
      text: WAITING_TEXT,
      title:
        (ownerLine ? `${ownerLine}\n` : '') +
        "Costguard has not sampled this notebook's kernel yet; " +
        'figures appear after the first sample.'
    };
  }

  const parts = [...spendParts(input, kernel, currency), gpuPart(kernel)];
  const idle = idlePart(kernel);
  if (idle) {
    parts.push(idle);
  }
  if (status) {
    parts.push(ratePart(status, kernel, currency));
  }
  const snapshot = snapshotPart(input, currency);
  if (snapshot) {
    parts.push(snapshot);
  }

  const lines = parts.map(p => `${p.title}: ${p.text}`);
  if (ownerLine) {
    lines.unshift(ownerLine);
  }
  if (shownAlert) {
    lines.push(`Alert: ${shownAlert.text}`);
  }
  if (simulated) {
    lines.push('Simulated: GPU figures come from a replayed trace, not this machine');
  }
  // The widget polls on its own: its sample can differ from the panel's and the status bar's.
  const asOf = asOfLine(input.kernels.time);
  if (asOf) {
    lines.push(asOf);
  }
  return {
    ...common,
    state: 'ok',
    parts,
    kernelId: kernel.kernel_id,
    text: parts.map(p => p.text).join(SEPARATOR),
    title: lines.join('\n')
  };
}

/** Clamp a refresh interval (seconds) to a sane value. */
export function clampWidgetRefresh(seconds: unknown): number {
  if (!isNumber(seconds) || seconds <= 0) {
    return DEFAULT_WIDGET_REFRESH_SECONDS;
  }
  return Math.max(MIN_WIDGET_REFRESH_SECONDS, seconds);
}
