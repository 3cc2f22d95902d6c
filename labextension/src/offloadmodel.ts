/**
 * "Run as batch job", without the DOM: the offload settings
 * (`schema/offload.json`), the SubmitRequest built from what the user sees
 * and selected, the confirm dialog's form, and the submit flow (`Offloader`),
 * with the dialog and the notification manager injected so jest can drive it.
 */
import type { Notification } from '@jupyterlab/apputils';
import type * as nbformat from '@jupyterlab/nbformat';
import type { ServerConnection } from '@jupyterlab/services';

import { formatDuration, isNumber } from './format';
import { estimatePhrase } from './estimatemodel';
import {
  errorMessage,
  IEstimate,
  IEstimateRequest,
  IJobResources,
  ISlice,
  ISlicePreview,
  ISubmitRequest,
  ISubmittedJob,
  previewSliceDoc,
  submitJob
} from './jobsapi';
import { lastRunSeconds } from './sendoffer';

/** Settings id of the offload plugin (`schema/offload.json`). */
export const OFFLOAD_SETTINGS_ID = 'jupyter-costguard:offload';

/** Highest `retries` the server accepts. */
export const MAX_RETRIES = 10;

/** Highest GPU count the server accepts. */
export const MAX_GPUS = 64;

/** Highest CPU count the server accepts. */
export const MAX_CPUS = 1024;

/** Longest time limit the server accepts (30 days). */
export const MAX_TIME_LIMIT_SECONDS = 30 * 24 * 3600;

/** Resources with every field present (null: the backend's default). */
export interface IResourceSettings {
  gpus: number | null;
  cpus: number | null;
  memory_gib: number | null;
  time_limit_seconds: number | null;
}

/** What `schema/offload.json` controls. */
export interface IOffloadSettings {
  /** Defaults of each job's resources. */
  resources: IResourceSettings;
  /** Attempts after the first one fails. */
  retries: number;
  /** Show the slice and editable resources before submitting. */
  confirm: boolean;
  /** Backend name; '' for the server's default. */
  backend: string;
  /** Pop up a notification when a job this page saw running ends. */
  notifications: boolean;
}

export const DEFAULT_OFFLOAD_SETTINGS: IOffloadSettings = {
  // No time limit unless asked for (README, "Offloading cells to batch jobs"): with every
  // resource null the request leaves them to the server's defaults (offload_time_limit_seconds).
  resources: { gpus: null, cpus: null, memory_gib: null, time_limit_seconds: null },
  retries: 0,
  confirm: false,
  backend: '',
  notifications: true
};

/** A positive number up to `max`, or null (also for anything odd). */
function positiveOrNull(value: unknown, max: number): number | null {
  return isNumber(value) && value > 0 && value <= max ? value : null;
}

/** Read the offload settings, with defaults for anything missing or odd. */
export function parseOffloadSettings(
  composite: { [key: string]: unknown } | null | undefined
): IOffloadSettings {
  const raw = composite ?? {};
  const d = DEFAULT_OFFLOAD_SETTINGS;
  const gpus =
    isNumber(raw.gpus) && Number.isInteger(raw.gpus) && raw.gpus >= 0 && raw.gpus <= MAX_GPUS
      ? raw.gpus
      : null;
  const retries =
    isNumber(raw.retries) && Number.isInteger(raw.retries)
      ? Math.min(MAX_RETRIES, Math.max(0, raw.retries))
      : d.retries;
  return {
    resources: {
      gpus,
      cpus: positiveOrNull(raw.cpus, MAX_CPUS),
      memory_gib: positiveOrNull(raw.memory_gib, 1 << 16),
      time_limit_seconds:
        raw.time_limit_seconds === undefined
          ? d.resources.time_limit_seconds
          : positiveOrNull(raw.time_limit_seconds, MAX_TIME_LIMIT_SECONDS)
    },
    retries,
    confirm: typeof raw.confirm === 'boolean' ? raw.confirm : d.confirm,
    backend: typeof raw.backend === 'string' ? raw.backend.trim() : d.backend,
    notifications:
      typeof raw.notifications === 'boolean' ? raw.notifications : d.notifications
  };
}

/** The notebook as the user sees it when they ask to run cells as a job. */
export interface INotebookSnapshot {
  /** Server-relative path. */
  path: string;
  /** `model.toJSON().cells`, unsaved edits included, each with its `id`. */
  cells: nbformat.ICell[];
  /** Ids of the selected cells, or of the active cell when none is (any type). */
  selected: string[];
  /** The notebook's running kernel, if any. */
  kernelId?: string | null;
  /** The notebook's kernelspec name, if known. */
  kernelName?: string | null;
}

/** A cell as sent: code cells without outputs, no attachments. */
export function requestCell(cell: nbformat.ICell): nbformat.ICell {
  const copy: { [key: string]: unknown } = { ...cell };
  if (copy.cell_type === 'code') {
    copy.outputs = [];
  }
  delete copy.attachments;
  return copy as unknown as nbformat.ICell;
}

/** The selected ids that are code cells, in notebook order, without duplicates. */
export function selectedCodeCells(
  cells: ReadonlyArray<nbformat.ICell>,
  selected: ReadonlyArray<string>
): string[] {
  const wanted = new Set(selected);
  const ids: string[] = [];
  for (const cell of cells) {
    const id = typeof cell.id === 'string' ? cell.id : '';
    if (cell.cell_type === 'code' && id && wanted.has(id) && !ids.includes(id)) {
      ids.push(id);
    }
  }
  return ids;
}

/** Whether every resource is null (the server's defaults then apply). */
function allNull(resources: IResourceSettings): boolean {
  return Object.values(resources).every(v => v === null);
}

/** The SubmitRequest for a notebook snapshot with the settings' defaults. */
export function buildSubmitRequest(
  snapshot: INotebookSnapshot,
  settings: IOffloadSettings = DEFAULT_OFFLOAD_SETTINGS
): ISubmitRequest {
  const request: ISubmitRequest = {
    notebook: snapshot.path,
    cells: snapshot.cells.map(requestCell),
    selected: selectedCodeCells(snapshot.cells, snapshot.selected),
    retries: settings.retries
  };
  if (snapshot.kernelId) {
    request.kernel_id = snapshot.kernelId;
  }
  if (snapshot.kernelName) {
    request.kernel_name = snapshot.kernelName;
  }
  if (!allNull(settings.resources)) {
    request.resources = { ...settings.resources };
  }
  if (settings.backend) {
    request.backend = settings.backend;
  }
  return request;
}

/**
 * What a one-click submit with `settings` asks of its backend: the request
 * `buildSubmitRequest` would make, for its estimate.
 */
export function defaultEstimateRequest(settings: IOffloadSettings): IEstimateRequest {
  return {
    backend: settings.backend || null,
    resources: allNull(settings.resources) ? null : { ...settings.resources }
  };
}

/**
 * Whether to show the confirm dialog: the setting, or `confirm: true` in the
 * command's args, or a Shift-click on the toolbar button. `confirm: false` in
 * the args skips it whatever the setting.
 */
export function shouldConfirm(
  settings: IOffloadSettings,
  args: { [key: string]: unknown } = {},
  shiftClick = false
): boolean {
  if (args.confirm === true || shiftClick) {
    return true;
  }
  if (args.confirm === false) {
    return false;
  }
  return settings.confirm;
}

/** "Job 12 submitted: 3 cells (1 selected)". */
export function submittedMessage(job: ISubmittedJob): string {
  const cells = Array.isArray(job.slice?.cells) ? job.slice.cells : [];
  const total = cells.length || job.selected.length;
  const selected = cells.length
    ? cells.filter(c => c.selected).length
    : job.selected.length;
  const head = `Job ${job.id} submitted: ${total} ${total === 1 ? 'cell' : 'cells'} (${selected} selected)`;
  const figure = job.estimate ? estimatePhrase(job.estimate, job.backend) : null;
  return figure ? `${head}, ${figure}` : head;
}

/**
 * The "Run as job" button's tooltip: what a one-click submit with the
 * default settings is about to cost, before the click (`estimate`: the
 * default request's estimate, null while unknown).
 */
export function runAsJobCaption(estimate: IEstimate | null): string {
  const base =
    'Run the selected code cells, with the earlier cells they need, as a batch job';
  const figure = estimate ? estimatePhrase(estimate, estimate.backend) : null;
  const priced = figure ? `: ${figure}` : estimate ? `: not priced on ${estimate.backend}` : '';
  return `${base}${priced} (Shift-click to review the cells and resources first)`;
}

// ---- the confirm dialog's form ---------------------------------------------

/** The editable fields of the confirm dialog, as typed. */
export interface IOffloadForm {
  gpus: string;
  cpus: string;
  memory_gib: string;
  time_limit_seconds: string;
  retries: string;
  /** Variables to send, comma- or space-separated. */
  send: string;
}

/** Keys of the resource fields, in dialog order. */
export const RESOURCE_FIELDS: ReadonlyArray<keyof IResourceSettings> = [
  'gpus',
  'cpus',
  'memory_gib',
  'time_limit_seconds'
];

function fieldText(value: number | null | undefined): string {
  return value === null || value === undefined ? '' : String(value);
}

/** The form's initial values from a request. */
export function formFromRequest(request: ISubmitRequest): IOffloadForm {
  const r: IJobResources = request.resources ?? {};
  return {
    gpus: fieldText(r.gpus),
    cpus: fieldText(r.cpus),
    memory_gib: fieldText(r.memory_gib),
    time_limit_seconds: fieldText(r.time_limit_seconds),
    retries: fieldText(request.retries ?? 0),
    send: (request.send ?? []).join(', ')
  };
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Names typed in a field: split on commas and spaces. */
export function parseNames(text: string): string[] {
  return text
    .split(/[\s,]+/)
    .map(s => s.trim())
    .filter(Boolean)
    .filter((name, i, all) => all.indexOf(name) === i);
}

/** The request with the form's values, or the first problem found. */
export function applyForm(
  request: ISubmitRequest,
  form: IOffloadForm
): { request: ISubmitRequest } | { error: string } {
  const resources: IResourceSettings = {
    gpus: null,
    cpus: null,
    memory_gib: null,
    time_limit_seconds: null
  };
  const limits: { [K in keyof IResourceSettings]: [number, boolean, string] } = {
    gpus: [MAX_GPUS, true, 'GPUs must be a whole number from 0 to 64'],
    cpus: [MAX_CPUS, false, 'CPUs must be a number above 0, at most 1024'],
    memory_gib: [1 << 16, false, 'Memory must be a number of GiB above 0'],
    time_limit_seconds: [
      MAX_TIME_LIMIT_SECONDS,
      false,
      'The time limit must be a number of seconds above 0, at most 30 days'
    ]
  };
  for (const key of RESOURCE_FIELDS) {
    const text = (form[key] ?? '').trim();
    if (!text) {
      continue;
    }
    const value = Number(text);
    const [max, integer, message] = limits[key];
    const ok =
      Number.isFinite(value) &&
      value <= max &&
      (integer ? Number.isInteger(value) && value >= 0 : value > 0);
    if (!ok) {
      return { error: message };
    }
    resources[key] = value;
  }
  const retriesText = (form.retries ?? '').trim();
  const retries = retriesText ? Number(retriesText) : 0;
  if (!Number.isInteger(retries) || retries < 0 || retries > MAX_RETRIES) {
    return { error: `Retries must be a whole number from 0 to ${MAX_RETRIES}` };
  }
  const send = parseNames(form.send ?? '');
  const bad = send.find(name => !IDENTIFIER.test(name));
  if (bad !== undefined) {
    return { error: `Not a variable name: ${bad}` };
  }
  if (send.length && !request.kernel_id) {
    return { error: 'Sending variables needs the notebook\'s kernel to be running' };
  }
  const next: ISubmitRequest = { ...request, retries };
  if (allNull(resources)) {
    delete next.resources;
  } else {
    next.resources = resources;
  }
  if (send.length) {
    next.send = send;
  } else {
    delete next.send;
  }
  return { request: next };
}

/** First line of a cell's source, shortened for the dialog. */
export function firstLine(source: string, max = 80): string {
  const line = (source ?? '').split('\n').find(l => l.trim()) ?? '';
  const text = line.trim();
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

// ---- the heavy cells an alert means -------------------------------------------

/** The cells "Offload heavy cells" selects, and why (for the tooltip). */
export interface IHeavyCells {
  ids: string[];
  why: string;
}

/** A cell's source as one string. */
function sourceOf(cell: nbformat.ICell): string {
  const source = cell.source as unknown;
  return Array.isArray(source) ? source.join('') : typeof source === 'string' ? source : '';
}

/**
 * The heavy cell of a notebook an alert names: the code cell that ran
 * longest (`ranFor`, this page's own timing, else JupyterLab's recorded
 * `metadata.execution`); with no cell timed, the only code cell when there is
 * one. Null when nothing tells: guessing would offload the wrong cell.
 */
export function heavyCells(
  cells: ReadonlyArray<nbformat.ICell>,
  ranFor: ReadonlyMap<string, number> = new Map()
): IHeavyCells | null {
  const code = cells.filter(
    c => c.cell_type === 'code' && typeof c.id === 'string' && c.id && sourceOf(c).trim()
  );
  let best: { id: string; seconds: number } | null = null;
  for (const cell of code) {
    const id = cell.id as string;
    const seconds = ranFor.get(id) ?? lastRunSeconds(cell);
    if (seconds !== null && seconds !== undefined && (!best || seconds > best.seconds)) {
      best = { id, seconds };
    }
  }
  if (best) {
    return { ids: [best.id], why: `it ran longest (${formatDuration(best.seconds)})` };
  }
  return code.length === 1 ? { ids: [code[0].id as string], why: 'it is the only code cell' } : null;
}

/**
 * How long each cell took when it last ran in this page, by cell id, from
 * JupyterLab's `executionScheduled` and `executed` signals. A cell's run
 * starts when it was scheduled or when the notebook's previous cell finished,
 * whichever is later, so "Run all" does not count the queue as work.
 */
export class CellRunTimes {
  constructor(private _now: () => number = Date.now) {}

  /** A cell of `notebook` was queued to run. */
  scheduled(notebook: object, cellId: string): void {
    this._scheduled.set(cellId, this._now());
  }

  /** A cell of `notebook` finished (or failed). */
  executed(notebook: object, cellId: string): void {
    const now = this._now();
    const scheduled = this._scheduled.get(cellId);
    this._scheduled.delete(cellId);
    const previous = this._lastEnd.get(notebook);
    this._lastEnd.set(notebook, now);
    if (scheduled === undefined) {
      return;
    }
    const start = previous !== undefined && previous > scheduled ? previous : scheduled;
    this._seconds.set(cellId, Math.max(0, (now - start) / 1000));
  }

  /** Seconds by cell id. */
  get seconds(): ReadonlyMap<string, number> {
    return this._seconds;
  }

  private _lastEnd = new WeakMap<object, number>();
  private _scheduled = new Map<string, number>();
  private _seconds = new Map<string, number>();
}

// ---- Shift-click on the toolbar button --------------------------------------

/** The bits of a click event the tracker reads. */
export interface IClickLike {
  shiftKey: boolean;
  target: EventTarget | null;
}

/**
 * Remembers whether the last click on a command's toolbar button
 * (`[data-command="<id>"]`, as JupyterLab renders command buttons) had Shift
 * held: the toolbar runs the command without the event.
 */
export class ShiftClickTracker {
  constructor(
    readonly command: string,
    readonly windowMs = 1500,
    private _now: () => number = Date.now
  ) {}

  /** Record a click (a document listener, capture phase). */
  handleEvent(event: IClickLike): void {
    const target = event.target as { closest?: (s: string) => unknown } | null;
    const hit =
      target && typeof target.closest === 'function'
        ? target.closest(`[data-command="${this.command}"]`)
        : null;
    this._last = hit ? { shift: event.shiftKey, time: this._now() } : null;
  }

  /** Whether the command runs from a Shift-click just now (asked once). */
  consume(): boolean {
    const last = this._last;
    this._last = null;
    return !!last && last.shift && this._now() - last.time <= this.windowMs;
  }

  private _last: { shift: boolean; time: number } | null = null;
}

// ---- the submit flow ----------------------------------------------------------

/**
 * What the job will bring back, as the server chooses it for the submit
 * (`bring_back`, `bring_back_from` of `POST jobs/slice`).
 */
export interface IBringBack {
  names: string[];
  /** `request`, `later_cells` or `selected_cells` (`BringBackFrom`). */
  from: string;
}

/** The preview's bring-back, or null from a server that does not say it. */
export function bringBackOf(preview: ISlicePreview): IBringBack | null {
  const names = preview.bring_back;
  const from = preview.bring_back_from;
  if (!Array.isArray(names) || typeof from !== 'string') {
    return null;
  }
  return { names: names.filter(n => typeof n === 'string'), from };
}

/** What the server said besides the slice, for the confirm dialog. */
export interface IConfirmContext {
  /** The largest pickle of `send` variables a submit accepts (null: not said). */
  maxSendBytes: number | null;
  /** What the job will bring back (null: the server did not say). */
  bringBack: IBringBack | null;
}

/** What the offloader needs of the notification manager. */
export interface INotifier {
  notify(
    message: string,
    type: Notification.TypeOptions,
    options?: Partial<Notification.IOptions<any>>
  ): string;
}

export namespace Offloader {
  export interface IOptions {
    manager: INotifier;
    serverSettings?: ServerConnection.ISettings;
    /**
     * Show the slice and let the user edit the request; resolves the request
     * to submit, or null when cancelled.
     */
    confirm: (
      slice: ISlice,
      request: ISubmitRequest,
      context: IConfirmContext
    ) => Promise<ISubmitRequest | null>;
    /** "Show jobs" on the submitted notification. */
    showJobs?: (job: ISubmittedJob) => void;
    /** Called with each submitted job (e.g. to start watching it). */
    submitted?: (job: ISubmittedJob) => void;
  }
}

/** Builds, optionally confirms, and submits "run as batch job" requests. */
export class Offloader {
  constructor(options: Offloader.IOptions) {
    this._options = options;
  }

  /**
   * Submit the selected code cells of a notebook. Resolves the job, or null
   * when nothing was submitted (no code cell selected, cancelled, or refused:
   * then an error notification says why).
   */
  async run(
    snapshot: INotebookSnapshot,
    settings: IOffloadSettings,
    confirm: boolean
  ): Promise<ISubmittedJob | null> {
    const { manager, serverSettings } = this._options;
    let request = buildSubmitRequest(snapshot, settings);
    if (!request.selected.length) {
      manager.notify('Select one or more code cells to run as a batch job.', 'warning', {
        autoClose: 5000
      });
      return null;
    }
    if (confirm) {
      let preview: ISlicePreview;
      try {
        preview = await previewSliceDoc(request, serverSettings);
      } catch (reason) {
        this._fail('prepare the batch job', reason);
        return null;
      }
      const edited = await this._options.confirm(preview.slice, request, {
        maxSendBytes: typeof preview.max_send_bytes === 'number' ? preview.max_send_bytes : null,
        bringBack: bringBackOf(preview)
      });
      if (!edited) {
        return null;
      }
      request = edited;
    }
    let job: ISubmittedJob;
    try {
      job = await submitJob(request, serverSettings);
    } catch (reason) {
      this._fail('submit the batch job', reason);
      return null;
    }
    const actions: Notification.IAction[] = [];
    if (this._options.showJobs) {
      const show = this._options.showJobs;
      actions.push({
        label: 'Show jobs',
        caption: 'Open the Jobs panel',
        displayType: 'link',
        callback: () => show(job)
      });
    }
    manager.notify(submittedMessage(job), 'success', {
      autoClose: 6000,
      actions,
      data: { costguardJobId: job.id }
    });
    this._options.submitted?.(job);
    return job;
  }

  private _fail(what: string, reason: unknown): void {
    this._options.manager.notify(
      `Could not ${what}: ${errorMessage(reason)}`,
      'error',
      { autoClose: 10000 }
    );
  }

  private _options: Offloader.IOptions;
}
