/**
 * `jupyter-costguard:status-bar`: the status-bar item (the instance's rate
 * and the active notebook's spend); a click opens the cost panel when the
 * panel plugin is on.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { IStatusBar } from '@jupyterlab/statusbar';

import { CommandIDs } from './commands';
import { CostStatusWidget } from './statusbar';
import { ICostguard } from './tokens';

export const STATUS_BAR_PLUGIN_ID = 'jupyter-costguard:status-bar';

/** Id of the item in the status bar (the one it always had). */
export const STATUS_ITEM_ID = 'jupyter-costguard:status';

export const statusBarPlugin: JupyterFrontEndPlugin<void> = {
  id: STATUS_BAR_PLUGIN_ID,
  description:
    "Shows the GPU instance's rate and the active notebook's spend in the status bar.",
  autoStart: true,
  requires: [ICostguard, IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    costguard: ICostguard,
    statusBar: IStatusBar
  ): void => {
    const model = costguard.model;
    const item = new CostStatusWidget(model);
    item.clicked.connect(() => {
      if (app.commands.hasCommand(CommandIDs.openPanel)) {
        void app.commands.execute(CommandIDs.openPanel, {
          path: model.activePath ?? ''
        });
      }
    });
    statusBar.registerStatusItem(STATUS_ITEM_ID, {
      item,
      align: 'left',
      rank: 100
    });
  }
};
