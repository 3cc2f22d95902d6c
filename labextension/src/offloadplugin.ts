/**
 * `jupyter-costguard:offload`: "Run as batch job".
 *
 * - `costguard:run-as-job` submits the selected code cells (the active cell
 *   when none is selected) of the current notebook with the defaults of
 *   `schema/offload.json`; it shows the slice and editable resources first when
 *   the `confirm` setting is on, when run with `{confirm: true}`, or when the
 *   toolbar button is Shift-clicked. It is on the notebook toolbar ("Run as
 *   job", always there, enabled on code cells), the cell toolbar (hidden by
 *   JupyterLab when it would cover the cell's first line, e.g. with the right
 *   sidebar open) and the cell context menu (all from the schema), and bound
 *   to Accel Alt Enter.
 * - `costguard:offload-cells` (the guard's "Offload heavy cells" alert action)
 *   opens the alert's notebook, selects its heavy cell (the one that ran
 *   longest, or its only code cell) and shows the dialog on it.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  Notification,
  showDialog
} from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import type * as nbformat from '@jupyterlab/nbformat';
import type { Kernel, ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { CommandIDs, PALETTE_CATEGORY } from './commands';
import { EstimateModel } from './estimatemodel';
import { runAsJobIcon } from './icons';
import { estimateJob, ISlice, ISubmitRequest, previewSliceDoc } from './jobsapi';
import { samePath } from './notebooks';
import { OffloadDialogBody } from './offloaddialog';
import { CellRunTimes, heavyCells, IHeavyCells } from './heavycells';
import { applyForm, IOffloadForm } from './offloadform';
import {
  defaultEstimateRequest,
  IConfirmContext,
  INotebookSnapshot,
  Offloader,
  runAsJobCaption,
  shouldConfirm
} from './offloadmodel';
import {
  DEFAULT_OFFLOAD_SETTINGS,
  IOffloadSettings,
  OFFLOAD_SETTINGS_ID,
  parseOffloadSettings
} from './offloadsettings';
import { ShiftClickTracker } from './shiftclick';
import { parseValueSizes, providedNames, valueSizesExpression } from './sendoffer';
import { followSettings } from './settings';
import { ICostguardJobs } from './tokens';

/** Id of the plugin; also the id of its settings (`schema/offload.json`). */
export const OFFLOAD_PLUGIN_ID = OFFLOAD_SETTINGS_ID;

/** How often the toolbar's estimate of a one-click submit is asked again. */
const DEFAULT_ESTIMATE_REFRESH_MS = 5 * 60 * 1000;

/** `args.where` of the notebook toolbar's button (`schema/offload.json`). */
const NOTEBOOK_TOOLBAR = 'notebook-toolbar';

/** The notebook as the user sees it: cells with unsaved edits, selection, kernel. */
export function snapshotNotebook(
  panel: NotebookPanel,
  localPath: (path: string) => string
): INotebookSnapshot | null {
  const content = panel.content;
  const model = content.model;
  if (!model) {
    return null;
  }
  const cells: nbformat.ICell[] = [];
  for (const cell of model.cells) {
    cells.push({ ...cell.toJSON(), id: cell.id } as nbformat.ICell);
  }
  const selected = content.widgets
    .filter(widget => content.isSelectedOrActive(widget))
    .map(widget => widget.model.id);
  const kernel = panel.sessionContext.session?.kernel ?? null;
  const spec = model.getMetadata('kernelspec') as { name?: unknown } | undefined;
  const specName = typeof spec?.name === 'string' && spec.name ? spec.name : null;
  return {
    path: localPath(panel.context.path),
    cells,
    selected,
    kernelId: kernel?.id ?? null,
    kernelName: specName ?? kernel?.name ?? null
  };
}

/** Whether the notebook's active cell or any selected cell is a code cell. */
function hasCodeSelection(panel: NotebookPanel | null): boolean {
  if (!panel) {
    return false;
  }
  const content = panel.content;
  if (content.activeCell?.model.type === 'code') {
    return true;
  }
  return content.widgets.some(
    w => w.model.type === 'code' && content.isSelected(w)
  );
}

/** How long the dialog waits for the kernel to say what it holds. */
const SIZES_TIMEOUT_MS = 3000;

/**
 * The estimated size of each of `names` the kernel holds (null: cannot be
 * sent), asked silently (no output, no history); null when the kernel is
 * busy, is not Python, or does not answer in time, so the dialog never waits
 * on a running cell.
 */
async function kernelValueSizes(
  kernel: Kernel.IKernelConnection | null | undefined,
  names: string[]
): Promise<Map<string, number | null> | null> {
  if (!kernel || names.length === 0 || kernel.status !== 'idle') {
    return null;
  }
  const ask = (async () => {
    try {
      const future = kernel.requestExecute({
        code: '',
        silent: true,
        store_history: false,
        user_expressions: { costguard_sizes: valueSizesExpression(names) }
      });
      const reply = await future.done;
      const content = reply.content as { status: string; user_expressions?: any };
      return content.status === 'ok'
        ? parseValueSizes(content.user_expressions?.costguard_sizes, names)
        : null;
    } catch {
      return null;
    }
  })();
  const late = new Promise<null>(resolve => setTimeout(() => resolve(null), SIZES_TIMEOUT_MS));
  return Promise.race([ask, late]);
}

/** Ask with the slice and the resource form; the request to submit, or null. */
async function confirmSubmit(
  slice: ISlice,
  request: ISubmitRequest,
  context: IConfirmContext,
  kernel: Kernel.IKernelConnection | null,
  serverSettings: ServerConnection.ISettings
): Promise<ISubmitRequest | null> {
  const sizes = await kernelValueSizes(kernel, providedNames(slice));
  const estimate = new EstimateModel({ fetch: r => estimateJob(r, serverSettings) });
  const body = new OffloadDialogBody(slice, request, {
    estimate,
    sizes,
    maxSendBytes: context.maxSendBytes,
    bringBack: context.bringBack,
    reslice: send =>
      previewSliceDoc(
        { ...request, send: [...(request.send ?? []).filter(n => !send.includes(n)), ...send] },
        serverSettings
      )
  });
  const result = await showDialog<IOffloadForm>({
    title: 'Run as batch job',
    body,
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Submit' })],
    focusNodeSelector: 'input'
  });
  estimate.dispose();
  if (!result.button.accept || !result.value) {
    return null;
  }
  const applied = applyForm(request, result.value);
  if ('error' in applied) {
    Notification.error(`Batch job not submitted: ${applied.error}`, {
      autoClose: 8000
    });
    return null;
  }
  return applied.request;
}

/**
 * The Offloader of this JupyterLab: its confirm dialog reads the sizes of
 * what `kernel()` holds; submitted jobs show in the Jobs panel.
 */
function createOffloader(
  app: JupyterFrontEnd,
  jobs: ICostguardJobs | null,
  kernel: () => Kernel.IKernelConnection | null
): Offloader {
  return new Offloader({
    manager: Notification.manager,
    serverSettings: app.serviceManager.serverSettings,
    confirm: (slice, request, context) =>
      confirmSubmit(slice, request, context, kernel(), app.serviceManager.serverSettings),
    showJobs: job => {
      if (jobs) {
        jobs.open(job.id);
      } else {
        void app.commands.execute(CommandIDs.openJobs, { id: job.id });
      }
    },
    submitted: job => jobs?.model.track(job)
  });
}

/**
 * The notebook an alert's "Offload heavy cells" is about: the one at `wanted`
 * (activated, opened first when it is not open), else the current one.
 */
async function alertNotebook(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  localPath: (path: string) => string,
  wanted: string
): Promise<NotebookPanel | null> {
  const find = (): NotebookPanel | undefined =>
    tracker.find(p => samePath(wanted, localPath(p.context.path)));
  const current = tracker.currentWidget;
  if (!wanted || (current && samePath(wanted, localPath(current.context.path)))) {
    return current;
  }
  let panel = find();
  if (!panel) {
    try {
      await app.commands.execute('docmanager:open', { path: wanted });
    } catch {
      return null;
    }
    panel = find();
  }
  if (!panel) {
    return null;
  }
  app.shell.activateById(panel.id);
  await panel.context.ready;
  return panel;
}

/**
 * Select the notebook's heavy cells (`heavyCells`: the one that ran longest,
 * or its only code cell) and scroll to the first; null when nothing tells
 * which cell is heavy.
 */
function selectHeavyCells(
  panel: NotebookPanel,
  ranFor: ReadonlyMap<string, number>
): IHeavyCells | null {
  const content = panel.content;
  const model = content.model;
  if (!model) {
    return null;
  }
  const cells = Array.from(model.cells, cell => ({ ...cell.toJSON(), id: cell.id }) as nbformat.ICell);
  const heavy = heavyCells(cells, ranFor);
  const first = heavy ? content.widgets.findIndex(w => w.model.id === heavy.ids[0]) : -1;
  if (!heavy || first < 0) {
    return null;
  }
  content.activeCellIndex = first;
  content.deselectAll();
  for (const widget of content.widgets) {
    if (heavy.ids.includes(widget.model.id) && widget !== content.activeCell) {
      content.select(widget);
    }
  }
  void content.scrollToCell(content.widgets[first]);
  return heavy;
}

/**
 * `costguard:offload-cells`, the alert's "Offload heavy cells": the alert's
 * notebook, its heavy cell selected, then `review` (the dialog on it).
 */
function addOffloadCellsCommand(
  app: JupyterFrontEnd,
  tracker: INotebookTracker,
  localPath: (path: string) => string,
  review: (panel: NotebookPanel | null) => Promise<unknown>
): void {
  // How long each cell ran in this page: which cell is heavy.
  const runTimes = new CellRunTimes();
  NotebookActions.executionScheduled.connect((_, { notebook, cell }) =>
    runTimes.scheduled(notebook, cell.model.id)
  );
  NotebookActions.executed.connect((_, { notebook, cell }) =>
    runTimes.executed(notebook, cell.model.id)
  );
  app.commands.addCommand(CommandIDs.offloadCells, {
    label: 'Offload heavy cells to a batch job',
    caption: 'Select the heavy cell of the alert\'s notebook and review it as a batch job',
    execute: async args => {
      const wanted = typeof args.notebook === 'string' ? args.notebook : '';
      const panel = await alertNotebook(app, tracker, localPath, wanted);
      if (panel && !selectHeavyCells(panel, runTimes.seconds)) {
        Notification.warning(
          `Costguard cannot tell which cell of ${PathExt.basename(panel.context.path)} is heavy: ` +
            'none of its cells has run in this page yet. Select it and click Run as job.',
          { autoClose: 8000 }
        );
        return null;
      }
      return review(panel);
    }
  });
}

/**
 * What a one-click submit is about to cost, for the button's tooltip before
 * the click: the default request's estimate, asked once the app is restored,
 * again on `ask()` (the settings changed) and every few minutes (the
 * machine's share moves with its samples). A new answer re-renders the button.
 */
function followDefaultEstimate(
  app: JupyterFrontEnd,
  settings: () => IOffloadSettings
): { estimate: EstimateModel; ask: () => void } {
  const serverSettings = app.serviceManager.serverSettings;
  const estimate = new EstimateModel({ fetch: r => estimateJob(r, serverSettings), delayMs: 0 });
  const ask = (): void => estimate.request(defaultEstimateRequest(settings()), true);
  estimate.changed.connect(() => app.commands.notifyCommandChanged(CommandIDs.runAsJob));
  const refresh = setInterval(() => {
    estimate.forget(); // the same request is not asked twice in a row otherwise
    ask();
  }, DEFAULT_ESTIMATE_REFRESH_MS);
  window.addEventListener('unload', () => clearInterval(refresh));
  void app.restored.then(ask);
  return { estimate, ask };
}

export const offloadPlugin: JupyterFrontEndPlugin<void> = {
  id: OFFLOAD_PLUGIN_ID,
  description:
    'Run the selected notebook cells (and the earlier cells they need) as a batch job.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICostguardJobs, ISettingRegistry, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    jobs: ICostguardJobs | null,
    settingRegistry: ISettingRegistry | null,
    palette: ICommandPalette | null
  ): void => {
    const contents = app.serviceManager.contents;
    const localPath = (path: string): string => contents.localPath(path);
    let settings: IOffloadSettings = DEFAULT_OFFLOAD_SETTINGS;

    // The notebook a confirm dialog is about (its kernel holds what may be sent).
    let confirming: NotebookPanel | null = null;
    const shiftClicks = new ShiftClickTracker(CommandIDs.runAsJob);
    // On mousedown: the notebook toolbar's buttons run their command on
    // mousedown (noFocusOnClick), the cell toolbar's on the click after it.
    document.addEventListener('mousedown', event => shiftClicks.handleEvent(event), true);

    const offloader = createOffloader(
      app,
      jobs,
      () => confirming?.sessionContext.session?.kernel ?? null
    );

    const run = async (
      panel: NotebookPanel | null,
      confirm: boolean
    ): Promise<unknown> => {
      if (!panel) {
        Notification.warning('Open a notebook and select code cells to run as a batch job.', {
          autoClose: 5000
        });
        return null;
      }
      const snapshot = snapshotNotebook(panel, localPath);
      if (!snapshot) {
        return null;
      }
      confirming = panel;
      const job = await offloader.run(snapshot, settings, confirm);
      return job ? job.id : null;
    };

    const { estimate: defaultEstimate, ask: askDefault } = followDefaultEstimate(
      app,
      () => settings
    );

    app.commands.addCommand(CommandIDs.runAsJob, {
      label: 'Run as batch job',
      caption: () =>
        runAsJobCaption(defaultEstimate.state === 'ok' ? defaultEstimate.estimate : null),
      icon: args => (args.isPalette ? undefined : runAsJobIcon),
      // The notebook toolbar's button stays put (disabled on a markdown cell);
      // the cell toolbar's and the context menu's show only for code cells.
      isEnabled: args =>
        tracker.currentWidget !== null &&
        (args.where !== NOTEBOOK_TOOLBAR || hasCodeSelection(tracker.currentWidget)),
      isVisible: args =>
        args.where === NOTEBOOK_TOOLBAR || hasCodeSelection(tracker.currentWidget),
      execute: args => {
        const shift = shiftClicks.consume();
        return run(tracker.currentWidget, shouldConfirm(settings, args, shift));
      }
    });

    addOffloadCellsCommand(app, tracker, localPath, panel => run(panel, true));

    palette?.addItem({ command: CommandIDs.runAsJob, category: PALETTE_CATEGORY });

    // The toolbar button and menu entry show only for code cells.
    const changed = (): void => app.commands.notifyCommandChanged(CommandIDs.runAsJob);
    tracker.activeCellChanged.connect(changed);
    tracker.selectionChanged.connect(changed);

    if (settingRegistry) {
      void followSettings(
        settingRegistry,
        OFFLOAD_SETTINGS_ID,
        composite => {
          settings = parseOffloadSettings(composite);
          askDefault();
        },
        app.restored
      );
    }
  }
};
