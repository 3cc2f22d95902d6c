/**
 * `jupyter-costguard:panel`: the cost side panel (right sidebar) and
 * `costguard:open-panel`. While it is visible the shared poll fetches
 * `kernels` + `gpus` too (one poll, one sample, for every table); its row
 * buttons run the kernel commands (Hibernate: the hibernate plugin's).
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';

import { HIBERNATE_UNAVAILABLE_TEXT } from './alertactions';
import { AlertsSection } from './alertssection';
import { CommandIDs, PALETTE_CATEGORY } from './commands';
import { CostPanel, KernelAction } from './costpanel';
import { CostPanelModel } from './costpanelmodel';
import { costguardIcon } from './icons';
import { SpendChartModel } from './spendchartmodel';
import { SpendChartSection } from './spendchartsection';
import { ICostguard } from './tokens';

export const PANEL_PLUGIN_ID = 'jupyter-costguard:panel';

/** The command each kernel row button runs (hibernate: `jupyter-costguard:hibernate`'s). */
const KERNEL_ACTION_COMMANDS: { [action in KernelAction]: string } = {
  shutdown: CommandIDs.shutdownKernel,
  interrupt: CommandIDs.interruptKernel,
  hibernate: CommandIDs.hibernateKernel
};

export const costPanelPlugin: JupyterFrontEndPlugin<void> = {
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
    const model = new CostPanelModel({ data: costguard.model });
    const alertsSection = AlertsSection.create(
      costguard,
      app.commands,
      Notification.manager
    );
    // "Spend over time": asks `history` again with each new sample of the
    // totals above it, while the panel is shown (and nothing while hidden).
    const spendChart = new SpendChartSection({
      model: new SpendChartModel({
        serverSettings: costguard.serverSettings,
        follow: costguard.model
      }),
      className: 'jp-costguard-section'
    });
    const panel = new CostPanel({
      model,
      // Alerts first, then the other sections.
      sections: [alertsSection, spendChart],
      onKernelAction: (action, kernel) => {
        const command = KERNEL_ACTION_COMMANDS[action];
        if (action === 'hibernate' && !app.commands.hasCommand(command)) {
          Notification.info(HIBERNATE_UNAVAILABLE_TEXT, { autoClose: 5000 });
          return;
        }
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
    palette?.addItem({ command: CommandIDs.openPanel, category: PALETTE_CATEGORY });
  }
};
