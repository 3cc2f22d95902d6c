/**
 * `jupyter-costguard:jobs`: the Jobs side panel, its model (provided as
 * ICostguardJobs), and the job commands: `costguard:open-jobs`,
 * `costguard:cancel-job`, `costguard:rerun-job`, `costguard:insert-job-outputs`
 * and `costguard:load-job-results` (the last two act on the job's notebook when
 * it is open in this JupyterLab).
 *
 * Load results first asks the kernel, silently, which of the job's names it
 * already has (`loadresults.ts`); when some exist, a dialog names them
 * (`.jp-costguard-load-dialog`, `data-names` = the clashing names) with the
 * buttons `.jp-costguard-load-cancel`, `.jp-costguard-load-others` ("Load the
 * others only", when there are others) and `.jp-costguard-load-replace`;
 * nothing is replaced without "Replace".
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  Notification,
  showDialog
} from '@jupyterlab/apputils';
import type { ICodeCellModel } from '@jupyterlab/cells';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import type { Kernel } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { CommandIDs, PALETTE_CATEGORY } from './commands';
import { jobsIcon } from './icons';
import { applyPlan, ICellModelLike, planInsert } from './insert';
import { errorMessage, IJob, isActive } from './jobsapi';
import { JobsModel } from './jobsmodel';
import { JobsPanel } from './jobspanel';
import {
  choicesFor,
  existingNamesExpression,
  ILoadPlan,
  LoadChoice,
  loadedMessage,
  namesToLoad,
  needsConfirm,
  parseExistingNames,
  planLoad,
  replaceQuestion
} from './loadresults';
import { baseName, followCurrentNotebook, samePath } from './notebooks';
import { ICostguardJobs } from './tokens';

export const JOBS_PLUGIN_ID = 'jupyter-costguard:jobs';

function jobId(args: { [key: string]: unknown }): number | null {
  const id = Number(args.id);
  return Number.isInteger(id) && id > 0 ? id : null;
}

function fail(what: string) {
  return (reason: unknown): null => {
    Notification.error(`Could not ${what}: ${errorMessage(reason)}`, {
      autoClose: 10000
    });
    return null;
  };
}

/** The notebook's cell models as far as inserting goes. */
function cellModels(panel: NotebookPanel): ICellModelLike[] {
  const model = panel.content.model;
  if (!model) {
    return [];
  }
  return Array.from(model.cells, cell => ({
    id: cell.id,
    type: cell.type,
    outputs: cell.type === 'code' ? (cell as ICodeCellModel).outputs : undefined
  }));
}

/** Which of `names` the kernel has (silent: no output, no history); null when it cannot say. */
async function existingNames(
  kernel: Kernel.IKernelConnection,
  names: string[]
): Promise<string[] | null> {
  try {
    const future = kernel.requestExecute({
      code: '',
      silent: true,
      store_history: false,
      user_expressions: { costguard_names: existingNamesExpression(names) }
    });
    const reply = await future.done;
    const content = reply.content as { status: string; user_expressions?: any };
    if (content.status !== 'ok') {
      return null;
    }
    return parseExistingNames(content.user_expressions?.costguard_names, names);
  } catch {
    return null;
  }
}

/** "Replace x in the kernel?" with Cancel / Load the others only / Replace. */
async function askReplace(plan: ILoadPlan, jobId: number, notebook: string): Promise<LoadChoice> {
  const { title, body } = replaceQuestion(plan, jobId, notebook);
  const node = document.createElement('div');
  node.className = 'jp-costguard-load-dialog';
  node.dataset.names = plan.clashes.join(',');
  node.textContent = body;
  const buttons = {
    cancel: Dialog.cancelButton({ label: 'Cancel', className: 'jp-costguard-load-cancel' }),
    others: Dialog.okButton({
      label: 'Load the others only',
      displayType: 'default',
      className: 'jp-costguard-load-others'
    }),
    replace: Dialog.warnButton({ label: 'Replace', className: 'jp-costguard-load-replace' })
  };
  const choices = choicesFor(plan);
  const result = await showDialog({
    title,
    body: new Widget({ node }),
    buttons: choices.map(c => buttons[c]),
    defaultButton: 0
  });
  const index = choices.findIndex(c => buttons[c].label === result.button.label);
  return index >= 0 && (result.button.accept || choices[index] === 'cancel')
    ? choices[index]
    : 'cancel';
}

export const jobsPlugin: JupyterFrontEndPlugin<ICostguardJobs> = {
  id: JOBS_PLUGIN_ID,
  description:
    'The Jobs side panel: batch jobs with their state, spend and log; cancel, rerun, insert outputs, load results.',
  autoStart: true,
  provides: ICostguardJobs,
  optional: [INotebookTracker, ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ): ICostguardJobs => {
    const contents = app.serviceManager.contents;
    const localPath = (path: string): string => contents.localPath(path);
    const findNotebook = (path: string): NotebookPanel | null =>
      tracker?.find(p => samePath(path, localPath(p.context.path))) ?? null;

    const model = new JobsModel({
      serverSettings: app.serviceManager.serverSettings,
      isNotebookOpen: path => findNotebook(path) !== null
    });

    if (tracker) {
      followCurrentNotebook(tracker, localPath, path => {
        model.currentNotebook = path;
      });
      // Open, renamed and closed notebooks change what "Insert outputs" can do.
      tracker.widgetAdded.connect((_, panel) => {
        model.notebooksChanged();
        panel.context.pathChanged.connect(() => model.notebooksChanged());
        panel.disposed.connect(() => model.notebooksChanged());
      });
    }

    const panel = new JobsPanel({
      model,
      onAction: (action, job) => {
        const command = {
          cancel: CommandIDs.cancelJob,
          insert: CommandIDs.insertJobOutputs,
          load: CommandIDs.loadJobResults,
          rerun: CommandIDs.rerunJob
        }[action];
        void app.commands.execute(command, { id: job.id });
      }
    });
    panel.title.icon = jobsIcon;
    panel.title.caption = 'Jobs';
    app.shell.add(panel, 'right', { rank: 910 });
    restorer?.add(panel, JOBS_PLUGIN_ID);

    const open = (id?: number | null): void => {
      if (id) {
        const job = model.job(id);
        if (job && model.filterToNotebook && !model.rows.includes(job)) {
          model.filterToNotebook = false;
        }
        model.expanded = id;
      }
      app.shell.activateById(panel.id);
      if (id) {
        panel.reveal(id);
      }
    };

    /**
     * The job, fetching the list once when this page has not seen it yet, then
     * the job itself (it may be older than the pages loaded).
     */
    const getJob = async (id: number): Promise<IJob | null> => {
      if (!model.job(id)) {
        await model.refresh().catch(() => undefined);
      }
      const job = model.job(id) ?? (await model.fetchJob(id).catch(() => undefined));
      if (!job) {
        Notification.error(`Costguard: there is no job ${id}.`, { autoClose: 6000 });
      }
      return job ?? null;
    };

    /** The job's open notebook, or null after saying it must be opened. */
    const notebookOf = (job: IJob, what: string): NotebookPanel | null => {
      const nb = findNotebook(job.notebook);
      if (!nb) {
        Notification.warning(`Open ${job.notebook} to ${what} job ${job.id}.`, {
          autoClose: 8000,
          actions: [
            {
              label: 'Open notebook',
              callback: () => {
                void app.commands.execute('docmanager:open', { path: job.notebook });
              }
            }
          ]
        });
      }
      return nb;
    };

    app.commands.addCommand(CommandIDs.openJobs, {
      label: 'Costguard: Open jobs panel',
      caption: 'Show the batch jobs with their state, spend and log',
      icon: args => (args.isPalette ? undefined : jobsIcon),
      execute: args => open(jobId(args))
    });

    app.commands.addCommand(CommandIDs.cancelJob, {
      label: 'Cancel Batch Job',
      caption: 'Stop a queued or running batch job (asks first)',
      execute: async args => {
        const id = jobId(args);
        const job = id ? await getJob(id) : null;
        if (!job) {
          return null;
        }
        if (args.confirm !== false) {
          const result = await showDialog({
            title: 'Cancel batch job?',
            body: `Stop job ${job.id} (${baseName(job.notebook)})? What it has not written yet is lost.`,
            buttons: [
              Dialog.cancelButton({ label: 'Keep running' }),
              Dialog.warnButton({ label: 'Cancel job' })
            ]
          });
          if (!result.button.accept) {
            return null;
          }
        }
        return model
          .cancel(job.id)
          .then(updated => {
            Notification.info(`Cancelling job ${job.id}…`, { autoClose: 4000 });
            return updated.id;
          })
          .catch(fail(`cancel job ${job.id}`));
      }
    });

    app.commands.addCommand(CommandIDs.rerunJob, {
      label: 'Run Batch Job Again',
      caption: 'Submit the same code, resources and variables as a new job',
      execute: async args => {
        const id = jobId(args);
        if (!id) {
          return null;
        }
        return model
          .rerun(id)
          .then(job => {
            Notification.success(`Job ${job.id} submitted (again from job ${id})`, {
              autoClose: 6000,
              actions: [
                {
                  label: 'Show jobs',
                  displayType: 'link',
                  callback: () => open(job.id)
                }
              ]
            });
            return job.id;
          })
          .catch(fail(`run job ${id} again`));
      }
    });

    app.commands.addCommand(CommandIDs.insertJobOutputs, {
      label: 'Insert Batch Job Outputs',
      caption: 'Put a finished job\'s outputs into its notebook\'s cells',
      execute: async args => {
        const id = jobId(args);
        const job = id ? await getJob(id) : null;
        if (!job) {
          return 0;
        }
        if (isActive(job.state)) {
          Notification.info(`Job ${job.id} has not finished yet.`, { autoClose: 5000 });
          return 0;
        }
        const nb = notebookOf(job, 'insert the outputs of');
        if (!nb) {
          return 0;
        }
        let results;
        try {
          results = await model.fetchResults(job.id);
        } catch (reason) {
          fail(`get the outputs of job ${job.id}`)(reason);
          return 0;
        }
        const cells = cellModels(nb);
        const plan = planInsert(
          cells.map(c => ({ id: c.id, cell_type: c.type })),
          results
        );
        if (!plan.size) {
          Notification.info(
            `Job ${job.id} has no outputs for the cells of ${baseName(job.notebook)}.`,
            { autoClose: 6000 }
          );
          return 0;
        }
        const changed = applyPlan(cells, plan);
        if (nb.content.model) {
          nb.content.model.dirty = true;
        }
        Notification.success(
          `Inserted the outputs of job ${job.id} into ${changed} ${
            changed === 1 ? 'cell' : 'cells'
          } of ${baseName(job.notebook)}.`,
          { autoClose: 5000 }
        );
        return changed;
      }
    });

    app.commands.addCommand(CommandIDs.loadJobResults, {
      label: 'Load Batch Job Results',
      caption: 'Load the names a job brought back into its notebook\'s kernel (asks before replacing a name the kernel has)',
      execute: async args => {
        const id = jobId(args);
        const job = id ? await getJob(id) : null;
        if (!job) {
          return false;
        }
        const nb = notebookOf(job, 'load the results of');
        if (!nb) {
          return false;
        }
        let results;
        try {
          results = await model.fetchResults(job.id);
        } catch (reason) {
          fail(`get the results of job ${job.id}`)(reason);
          return false;
        }
        if (!results.load_code) {
          Notification.info(`Job ${job.id} brought nothing back to load.`, {
            autoClose: 6000
          });
          return false;
        }
        const kernel = nb.sessionContext.session?.kernel;
        if (!kernel) {
          Notification.error(
            `${baseName(job.notebook)} has no running kernel to load job ${job.id}'s results into.`,
            { autoClose: 8000 }
          );
          return false;
        }
        const plan = planLoad(
          results.results.map(r => r.name),
          await existingNames(kernel, results.results.map(r => r.name))
        );
        const name = baseName(job.notebook);
        const choice = needsConfirm(plan) ? await askReplace(plan, job.id, name) : undefined;
        const names = namesToLoad(plan, choice);
        if (!names) {
          if (choice === 'others' || !needsConfirm(plan)) {
            Notification.info(`Nothing loaded from job ${job.id}.`, { autoClose: 5000 });
          }
          return false;
        }
        let code: string | null = results.load_code;
        if (names.length !== plan.names.length) {
          try {
            code = await model.loadCode(job.id, names);
          } catch (reason) {
            fail(`get the results of job ${job.id}`)(reason);
            return false;
          }
        }
        if (!code) {
          Notification.info(`Job ${job.id} brought nothing back to load.`, { autoClose: 6000 });
          return false;
        }
        try {
          const future = kernel.requestExecute({
            code,
            silent: false,
            store_history: false,
            stop_on_error: true
          });
          const reply = await future.done;
          const content = reply.content;
          if (content.status !== 'ok') {
            const detail =
              content.status === 'error'
                ? `${content.ename}: ${content.evalue}`
                : content.status;
            Notification.error(`Could not load job ${job.id}'s results: ${detail}`, {
              autoClose: 10000
            });
            return false;
          }
        } catch (reason) {
          fail(`load job ${job.id}'s results`)(reason);
          return false;
        }
        const kept = plan.names.filter(n => !names.includes(n));
        Notification.success(loadedMessage(names, kept, job.id, name), { autoClose: 6000 });
        return true;
      }
    });

    palette?.addItem({ command: CommandIDs.openJobs, category: PALETTE_CATEGORY });

    void app.restored.then(() => model.start());

    return { model, open };
  }
};
