/**
 * jupyter-costguard frontend. One plugin per concern:
 *
 * - `jupyter-costguard:status`: the shared model (polls `status` + `notebooks`
 *   and `alerts`), the settings (schema/status.json, the extension's one
 *   settings page), the active-notebook tracking, and the status-bar item.
 *   Provides ICostguard to the others.
 * - `jupyter-costguard:panel`: the cost side panel and `costguard:open-panel`.
 * - `jupyter-costguard:notifications`: active alerts as notifications.
 * - `jupyter-costguard:kernel-commands`: shut down / interrupt / restart a
 *   kernel through the kernels REST API (never a kernel message).
 * - `jupyter-costguard:cost-widget`: the in-notebook cost widget.
 * - `jupyter-costguard:offload`: "Run as batch job" (`costguard:run-as-job`,
 *   `costguard:offload-cells`; settings schema/offload.json).
 * - `jupyter-costguard:jobs`: the Jobs side panel and the job commands;
 *   provides ICostguardJobs.
 * - `jupyter-costguard:job-notifications`: a notification when a watched job ends.
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
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { KernelAPI } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { CommandIDs } from './commands';
import { costWidgetPlugin } from './costwidget';
import { costguardIcon } from './icons';
import { jobNotificationsPlugin, jobsPlugin } from './jobsplugin';
import { CostStatusModel } from './model';
import { AlertNotifier } from './notifier';
import { CostPanel } from './panel';
import { offloadPlugin } from './offload';
import { CostPanelModel } from './panelmodel';
import { parseSettings, SETTINGS_ID } from './settings';
import { Costguard, ICostguard } from './tokens';
import { CostStatusWidget } from './widget';

export { ICostguard, ICostguardJobs } from './tokens';
export { CommandIDs } from './commands';

/** Plugin id of the status bar item and shared model; also the settings id. */
export const STATUS_PLUGIN_ID = SETTINGS_ID;
export const PANEL_PLUGIN_ID = 'jupyter-costguard:panel';
export const NOTIFICATIONS_PLUGIN_ID = 'jupyter-costguard:notifications';
export const KERNEL_COMMANDS_PLUGIN_ID = 'jupyter-costguard:kernel-commands';

/** Command palette category. */
const CATEGORY = 'Costguard';

/**
 * Shared model, settings, active notebook, status-bar item.
 */
const statusPlugin: JupyterFrontEndPlugin<ICostguard> = {
  id: STATUS_PLUGIN_ID,
  description:
    'Polls costguard and shows the GPU instance rate and the active notebook\'s spend in the status bar.',
  autoStart: true,
  provides: ICostguard,
  optional: [IStatusBar, ISettingRegistry, INotebookTracker, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    statusBar: IStatusBar | null,
    settingRegistry: ISettingRegistry | null,
    tracker: INotebookTracker | null,
    palette: ICommandPalette | null
  ): ICostguard => {
    const model = new CostStatusModel({
      serverSettings: app.serviceManager.serverSettings,
      // Wait for the settings before the first request.
      autoStart: false
    });
    const costguard = new Costguard(model);

    if (tracker) {
      const contents = app.serviceManager.contents;
      let watched: NotebookPanel | null = null;
      const update = (): void => {
        const panel = tracker.currentWidget;
        if (panel !== watched) {
          watched?.context.pathChanged.disconnect(update);
          panel?.context.pathChanged.connect(update);
          watched = panel;
        }
        model.activePath = panel ? contents.localPath(panel.context.path) : null;
      };
      tracker.currentChanged.connect(update);
      update();
    }

    if (statusBar) {
      const item = new CostStatusWidget(model);
      item.clicked.connect(() => {
        if (app.commands.hasCommand(CommandIDs.openPanel)) {
          void app.commands.execute(CommandIDs.openPanel, {
            path: model.activePath ?? ''
          });
        }
      });
      statusBar.registerStatusItem(STATUS_PLUGIN_ID, {
        item,
        align: 'left',
        rank: 100
      });
    }

    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Costguard: Refresh figures',
      execute: async () => {
        await Promise.all([model.poll.refresh(), model.alertsPoll.refresh()]);
      }
    });
    palette?.addItem({ command: CommandIDs.refresh, category: CATEGORY });

    const start = (): void => model.start();
    if (!settingRegistry) {
      start();
      return costguard;
    }
    Promise.all([settingRegistry.load(SETTINGS_ID), app.restored])
      .then(([settings]) => {
        const apply = (): void => {
          costguard.updateSettings(
            parseSettings(settings.composite as { [key: string]: unknown })
          );
        };
        apply();
        settings.changed.connect(apply);
      })
      .catch(reason => {
        console.error(
          `${SETTINGS_ID}: failed to load settings, using defaults`,
          reason
        );
      })
      .then(start);
    return costguard;
  }
};

/**
 * The cost side panel.
 */
const panelPlugin: JupyterFrontEndPlugin<void> = {
  id: PANEL_PLUGIN_ID,
  description:
    'A side panel with the instance, totals, and every notebook and kernel with its spend.',
  autoStart: true,
  requires: [ICostguard],
  optional: [ICommandPalette, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    costguard: ICostguard,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null
  ): void => {
    const model = new CostPanelModel({
      data: costguard.model,
      refreshInterval: costguard.settings.refreshInterval
    });
    costguard.settingsChanged.connect((_, settings) => {
      model.refreshInterval = settings.refreshInterval;
    });
    const panel = new CostPanel({
      model,
      onKernelAction: (action, kernel) => {
        const command =
          action === 'shutdown'
            ? CommandIDs.shutdownKernel
            : CommandIDs.interruptKernel;
        void app.commands.execute(command, {
          kernelId: kernel.kernel_id,
          name: kernel.name,
          notebook: kernel.notebook ?? ''
        });
      },
      onOpenNotebook: path => {
        void app.commands.execute('docmanager:open', { path });
      }
    });
    panel.title.icon = costguardIcon;
    panel.title.caption = 'Costguard: GPU spend';
    app.shell.add(panel, 'right', { rank: 900 });
    restorer?.add(panel, PANEL_PLUGIN_ID);

    app.commands.addCommand(CommandIDs.openPanel, {
      label: 'Costguard: Open cost panel',
      caption: 'Show the instance, totals, notebooks and kernels with their spend',
      icon: args => (args.isPalette ? undefined : costguardIcon),
      execute: args => {
        const path = typeof args.path === 'string' && args.path ? args.path : null;
        model.highlightPath = path;
        app.shell.activateById(panel.id);
      }
    });
    palette?.addItem({ command: CommandIDs.openPanel, category: CATEGORY });
  }
};

/**
 * Active alerts as JupyterLab notifications.
 */
const notificationsPlugin: JupyterFrontEndPlugin<void> = {
  id: NOTIFICATIONS_PLUGIN_ID,
  description: 'Shows each active costguard alert once as a notification.',
  autoStart: true,
  requires: [ICostguard],
  activate: (app: JupyterFrontEnd, costguard: ICostguard): void => {
    const notifier = new AlertNotifier({
      source: costguard.model,
      manager: Notification.manager,
      commands: app.commands,
      enabled: costguard.settings.notifications,
      snoozeSeconds: costguard.settings.snoozeSeconds
    });
    costguard.settingsChanged.connect((_, settings) => {
      notifier.enabled = settings.notifications;
      notifier.snoozeSeconds = settings.snoozeSeconds;
    });
  }
};

/** Describe a kernel for dialogs and messages. */
function kernelLabel(args: { [key: string]: unknown }): string {
  const id = String(args.kernelId ?? '');
  const name = typeof args.name === 'string' && args.name ? `${args.name} ` : '';
  const notebook =
    typeof args.notebook === 'string' && args.notebook
      ? ` (${args.notebook})`
      : '';
  return `${name}${id.slice(0, 8)}${notebook}`;
}

/**
 * Kernel actions over the kernels REST API: never a kernel message.
 */
const kernelCommandsPlugin: JupyterFrontEndPlugin<void> = {
  id: KERNEL_COMMANDS_PLUGIN_ID,
  description:
    'Commands to shut down, interrupt or restart a kernel from the cost panel and alerts.',
  autoStart: true,
  requires: [ICostguard],
  activate: (app: JupyterFrontEnd, costguard: ICostguard): void => {
    const settings = app.serviceManager.serverSettings;
    const refresh = (): void => {
      void costguard.model.poll.refresh();
      void costguard.model.alertsPoll.refresh();
    };
    const hasKernel = (args: { [key: string]: unknown }): boolean =>
      typeof args.kernelId === 'string' && args.kernelId.length > 0;
    const fail = (what: string, label: string) => (reason: unknown) => {
      const message = reason instanceof Error ? reason.message : String(reason);
      Notification.error(`Could not ${what} kernel ${label}: ${message}`, {
        autoClose: 8000
      });
      return false;
    };
    const confirm = async (
      args: { [key: string]: unknown },
      title: string,
      body: string,
      label: string
    ): Promise<boolean> => {
      if (args.confirm === false) {
        return true;
      }
      const result = await showDialog({
        title,
        body,
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label })]
      });
      return result.button.accept;
    };

    app.commands.addCommand(CommandIDs.shutdownKernel, {
      label: 'Shut Down Kernel',
      caption: 'Shut the kernel down (asks first)',
      isEnabled: hasKernel,
      execute: async args => {
        const label = kernelLabel(args);
        if (
          !(await confirm(
            args,
            'Shut down kernel?',
            `Shut down kernel ${label}? Its variables are lost; the notebook stays open.`,
            'Shut Down'
          ))
        ) {
          return false;
        }
        return app.serviceManager.kernels
          .shutdown(String(args.kernelId))
          .then(() => {
            Notification.success(`Kernel ${label} shut down.`, { autoClose: 4000 });
            refresh();
            return true;
          })
          .catch(fail('shut down', label));
      }
    });

    app.commands.addCommand(CommandIDs.restartKernel, {
      label: 'Restart Kernel',
      caption: 'Restart the kernel (asks first)',
      isEnabled: hasKernel,
      execute: async args => {
        const label = kernelLabel(args);
        if (
          !(await confirm(
            args,
            'Restart kernel?',
            `Restart kernel ${label}? Its variables are lost.`,
            'Restart'
          ))
        ) {
          return false;
        }
        return KernelAPI.restartKernel(String(args.kernelId), settings)
          .then(() => {
            refresh();
            return true;
          })
          .catch(fail('restart', label));
      }
    });

    app.commands.addCommand(CommandIDs.interruptKernel, {
      label: 'Interrupt Kernel',
      caption: 'Interrupt what the kernel is running',
      isEnabled: hasKernel,
      execute: args => {
        const label = kernelLabel(args);
        return KernelAPI.interruptKernel(String(args.kernelId), settings)
          .then(() => {
            refresh();
            return true;
          })
          .catch(fail('interrupt', label));
      }
    });
  }
};

const plugins: JupyterFrontEndPlugin<any>[] = [
  statusPlugin,
  panelPlugin,
  notificationsPlugin,
  kernelCommandsPlugin,
  costWidgetPlugin,
  jobsPlugin,
  jobNotificationsPlugin,
  offloadPlugin
];

export default plugins;
