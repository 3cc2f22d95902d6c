/**
 * `jupyter-costguard:jobs`: the Jobs side panel, its model (provided as
 * ICostguardJobs), and the job commands (`jobscommands.ts`): open the panel,
 * cancel, rerun, insert outputs and load results.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { CommandIDs, PALETTE_CATEGORY } from './commands';
import { jobsIcon } from './icons';
import { addJobCommands } from './jobscommands';
import { JobsModel } from './jobsmodel';
import { JobsPanel } from './jobspanel';
import { followCurrentNotebook, samePath } from './notebooks';
import { ICostguardJobs } from './tokens';

export const JOBS_PLUGIN_ID = 'jupyter-costguard:jobs';

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

    addJobCommands({ app, model, open, findNotebook });
    palette?.addItem({ command: CommandIDs.openJobs, category: PALETTE_CATEGORY });

    void app.restored.then(() => model.start());

    return { model, open };
  }
};
