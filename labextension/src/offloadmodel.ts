/**
 * "Run as batch job", without the DOM: the SubmitRequest built from what the
 * user sees and selected, and the submit flow (`Offloader`), with the dialog
 * and the notification manager injected so jest can drive it. The settings
 * are `offloadsettings.ts`, the confirm dialog's form `offloadform.ts`, the
 * heavy cells an alert means `heavycells.ts`.
 */
import type { Notification } from '@jupyterlab/apputils';
import type * as nbformat from '@jupyterlab/nbformat';
import type { ServerConnection } from '@jupyterlab/services';

import type { Schemas } from './api';
import { estimatePhrase } from './estimatemodel';
import {
  errorMessage,
  IEstimate,
  IEstimateRequest,
  ISlice,
  ISlicePreview,
  ISubmitRequest,
  ISubmittedJob,
  previewSliceDoc,
  submitJob
} from './jobsapi';
import { allNull, DEFAULT_OFFLOAD_SETTINGS, IOffloadSettings } from './offloadsettings';

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

// ---- the submit flow ----------------------------------------------------------

/**
 * What the job will bring back, as the server chooses it for the submit
 * (`bring_back`, `bring_back_from` of `POST jobs/slice`).
 */
export interface IBringBack {
  names: string[];
  /** `request`, `later_cells` or `selected_cells` (a newer server's own word kept). */
  from: Schemas['BringBackFrom'] | string;
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
