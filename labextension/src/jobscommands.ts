/**
 * The job commands the Jobs plugin adds: `costguard:open-jobs`,
 * `costguard:cancel-job`, `costguard:rerun-job`,
 * `costguard:insert-job-outputs` and `costguard:load-job-results` (the last
 * two act on the job's notebook when it is open in this JupyterLab). Each
 * takes the job's `id` in its args.
 *
 * Load results first asks the kernel, silently, which of the job's names it
 * already has (`loadresults.ts`); when some exist, a dialog names them
 * (`.jp-costguard-load-dialog`, `data-names` = the clashing names) with the
 * buttons `.jp-costguard-load-cancel`, `.jp-costguard-load-others` ("Load the
 * others only", when there are others) and `.jp-costguard-load-replace`;
 * nothing is replaced without "Replace".
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import type { ICodeCellModel } from '@jupyterlab/cells';
import type { NotebookPanel } from '@jupyterlab/notebook';
import type { Kernel } from '@jupyterlab/services';
import type { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import { Widget } from '@lumino/widgets';

import { CommandIDs } from './commands';
import { jobsIcon } from './icons';
import { applyPlan, ICellModelLike, planInsert } from './insert';
import { errorMessage, IJob, IJobResults, isActive } from './jobsapi';
import type { JobsModel } from './jobsmodel';
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
import { baseName } from './notebooks';

/** What the job commands act with. */
export interface IJobCommandsContext {
  app: JupyterFrontEnd;
  model: JobsModel;
  /** Show the Jobs panel, with the job `id` expanded when given. */
  open(id?: number | null): void;
  /** The open notebook at a server path, if any. */
  findNotebook(path: string): NotebookPanel | null;
}

type Args = ReadonlyPartialJSONObject;

function jobId(args: Args): number | null {
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

/**
 * The job, fetching the list once when this page has not seen it yet, then
 * the job itself (it may be older than the pages loaded).
 */
async function jobOfArgs(ctx: IJobCommandsContext, args: Args): Promise<IJob | null> {
  const id = jobId(args);
  if (!id) {
    return null;
  }
  const model = ctx.model;
  if (!model.job(id)) {
    await model.refresh().catch(() => undefined);
  }
  const job = model.job(id) ?? (await model.fetchJob(id).catch(() => undefined));
  if (!job) {
    Notification.error(`Costguard: there is no job ${id}.`, { autoClose: 6000 });
  }
  return job ?? null;
}

/** The job's open notebook, or null after saying it must be opened. */
function notebookOf(ctx: IJobCommandsContext, job: IJob, what: string): NotebookPanel | null {
  const nb = ctx.findNotebook(job.notebook);
  if (!nb) {
    Notification.warning(`Open ${job.notebook} to ${what} job ${job.id}.`, {
      autoClose: 8000,
      actions: [
        {
          label: 'Open notebook',
          callback: () => {
            void ctx.app.commands.execute('docmanager:open', { path: job.notebook });
          }
        }
      ]
    });
  }
  return nb;
}

/** The job's results, or null after saying they could not be fetched. */
async function fetchResults(
  ctx: IJobCommandsContext,
  job: IJob,
  what: string
): Promise<IJobResults | null> {
  try {
    return await ctx.model.fetchResults(job.id);
  } catch (reason) {
    return fail(`get the ${what} of job ${job.id}`)(reason);
  }
}

/** `costguard:cancel-job`: asks first unless `confirm` is false; answers the job's id. */
async function cancelCommand(ctx: IJobCommandsContext, args: Args): Promise<number | null> {
  const job = await jobOfArgs(ctx, args);
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
  return ctx.model
    .cancel(job.id)
    .then(updated => {
      Notification.info(`Cancelling job ${job.id}…`, { autoClose: 4000 });
      return updated.id;
    })
    .catch(fail(`cancel job ${job.id}`));
}

/** `costguard:rerun-job`: answers the new job's id. */
async function rerunCommand(ctx: IJobCommandsContext, args: Args): Promise<number | null> {
  const id = jobId(args);
  if (!id) {
    return null;
  }
  return ctx.model
    .rerun(id)
    .then(job => {
      Notification.success(`Job ${job.id} submitted (again from job ${id})`, {
        autoClose: 6000,
        actions: [{ label: 'Show jobs', displayType: 'link', callback: () => ctx.open(job.id) }]
      });
      return job.id;
    })
    .catch(fail(`run job ${id} again`));
}

/** `costguard:insert-job-outputs`: answers how many cells changed. */
async function insertOutputsCommand(ctx: IJobCommandsContext, args: Args): Promise<number> {
  const job = await jobOfArgs(ctx, args);
  if (!job) {
    return 0;
  }
  if (isActive(job.state)) {
    Notification.info(`Job ${job.id} has not finished yet.`, { autoClose: 5000 });
    return 0;
  }
  const nb = notebookOf(ctx, job, 'insert the outputs of');
  const results = nb ? await fetchResults(ctx, job, 'outputs') : null;
  if (!nb || !results) {
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

/**
 * The code that loads what the user lets load (asking before replacing a
 * name the kernel has), with the plan and the names; null when nothing is to
 * be loaded (said where the user did not choose it).
 */
async function chooseLoad(
  ctx: IJobCommandsContext,
  job: IJob,
  results: IJobResults,
  kernel: Kernel.IKernelConnection
): Promise<{ code: string; plan: ILoadPlan; names: string[] } | null> {
  const all = results.results.map(r => r.name);
  const plan = planLoad(all, await existingNames(kernel, all));
  const choice = needsConfirm(plan)
    ? await askReplace(plan, job.id, baseName(job.notebook))
    : undefined;
  const names = namesToLoad(plan, choice);
  if (!names) {
    if (choice === 'others' || !needsConfirm(plan)) {
      Notification.info(`Nothing loaded from job ${job.id}.`, { autoClose: 5000 });
    }
    return null;
  }
  let code: string | null = results.load_code;
  if (names.length !== plan.names.length) {
    try {
      code = await ctx.model.loadCode(job.id, names);
    } catch (reason) {
      return fail(`get the results of job ${job.id}`)(reason);
    }
  }
  if (!code) {
    Notification.info(`Job ${job.id} brought nothing back to load.`, { autoClose: 6000 });
    return null;
  }
  return { code, plan, names };
}

/** Run the load code in the kernel; whether it ran without error (said otherwise). */
async function runLoad(kernel: Kernel.IKernelConnection, job: IJob, code: string): Promise<boolean> {
  try {
    const future = kernel.requestExecute({
      code,
      silent: false,
      store_history: false,
      stop_on_error: true
    });
    const content = (await future.done).content;
    if (content.status !== 'ok') {
      const detail =
        content.status === 'error' ? `${content.ename}: ${content.evalue}` : content.status;
      Notification.error(`Could not load job ${job.id}'s results: ${detail}`, {
        autoClose: 10000
      });
      return false;
    }
    return true;
  } catch (reason) {
    fail(`load job ${job.id}'s results`)(reason);
    return false;
  }
}

/** `costguard:load-job-results`: whether anything was loaded. */
async function loadResultsCommand(ctx: IJobCommandsContext, args: Args): Promise<boolean> {
  const job = await jobOfArgs(ctx, args);
  const nb = job ? notebookOf(ctx, job, 'load the results of') : null;
  const results = job && nb ? await fetchResults(ctx, job, 'results') : null;
  if (!job || !nb || !results) {
    return false;
  }
  if (!results.load_code) {
    Notification.info(`Job ${job.id} brought nothing back to load.`, { autoClose: 6000 });
    return false;
  }
  const name = baseName(job.notebook);
  const kernel = nb.sessionContext.session?.kernel;
  if (!kernel) {
    Notification.error(
      `${name} has no running kernel to load job ${job.id}'s results into.`,
      { autoClose: 8000 }
    );
    return false;
  }
  const load = await chooseLoad(ctx, job, results, kernel);
  if (!load || !(await runLoad(kernel, job, load.code))) {
    return false;
  }
  const kept = load.plan.names.filter(n => !load.names.includes(n));
  Notification.success(loadedMessage(load.names, kept, job.id, name), { autoClose: 6000 });
  return true;
}

/** Add the job commands (see the file's header). */
export function addJobCommands(ctx: IJobCommandsContext): void {
  const commands = ctx.app.commands;
  commands.addCommand(CommandIDs.openJobs, {
    label: 'Costguard: Open jobs panel',
    caption: 'Show the batch jobs with their state, spend and log',
    icon: args => (args.isPalette ? undefined : jobsIcon),
    execute: args => ctx.open(jobId(args))
  });
  commands.addCommand(CommandIDs.cancelJob, {
    label: 'Cancel Batch Job',
    caption: 'Stop a queued or running batch job (asks first)',
    execute: args => cancelCommand(ctx, args)
  });
  commands.addCommand(CommandIDs.rerunJob, {
    label: 'Run Batch Job Again',
    caption: 'Submit the same code, resources and variables as a new job',
    execute: args => rerunCommand(ctx, args)
  });
  commands.addCommand(CommandIDs.insertJobOutputs, {
    label: 'Insert Batch Job Outputs',
    caption: "Put a finished job's outputs into its notebook's cells",
    execute: args => insertOutputsCommand(ctx, args)
  });
  commands.addCommand(CommandIDs.loadJobResults, {
    label: 'Load Batch Job Results',
    caption:
      "Load the names a job brought back into its notebook's kernel (asks before replacing a name the kernel has)",
    execute: args => loadResultsCommand(ctx, args)
  });
}
