/**
 * `jupyter-costguard:refresh`: `costguard:refresh` ("Costguard: Refresh
 * figures", in the palette) polls the shared model now.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';

import { CommandIDs, PALETTE_CATEGORY } from './commands';
import { ICostguard } from './tokens';

export const REFRESH_PLUGIN_ID = 'jupyter-costguard:refresh';

export const refreshPlugin: JupyterFrontEndPlugin<void> = {
  id: REFRESH_PLUGIN_ID,
  description: 'A command that refreshes every costguard figure now.',
  autoStart: true,
  requires: [ICostguard],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    costguard: ICostguard,
    palette: ICommandPalette | null
  ): void => {
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Costguard: Refresh figures',
      execute: () => costguard.model.pollNow()
    });
    palette?.addItem({ command: CommandIDs.refresh, category: PALETTE_CATEGORY });
  }
};
