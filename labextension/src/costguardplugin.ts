/**
 * `jupyter-costguard:status`: the shared state, no UI. It polls `status` +
 * `notebooks` and `alerts` (CostStatusModel), follows the notebook the user
 * is looking at, reads the extension's settings page (`schema/status.json`,
 * whose settings id is this plugin's id) and provides all of it to the other
 * plugins as ICostguard.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { followCurrentNotebook } from './notebooks';
import { followSettings, parseSettings, SETTINGS_ID } from './settings';
import { CostStatusModel } from './statusmodel';
import { Costguard, ICostguard } from './tokens';

/** Id of the plugin that provides ICostguard; also the settings id. */
export const COSTGUARD_PLUGIN_ID = SETTINGS_ID;

export const costguardPlugin: JupyterFrontEndPlugin<ICostguard> = {
  id: COSTGUARD_PLUGIN_ID,
  description:
    'Polls costguard (instance, notebooks, alerts), follows the active notebook and reads the settings; provides ICostguard.',
  autoStart: true,
  provides: ICostguard,
  optional: [ISettingRegistry, INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    settingRegistry: ISettingRegistry | null,
    tracker: INotebookTracker | null
  ): ICostguard => {
    const model = new CostStatusModel({
      serverSettings: app.serviceManager.serverSettings,
      // Wait for the settings before the first request.
      autoStart: false
    });
    const costguard = new Costguard(model);

    if (tracker) {
      const contents = app.serviceManager.contents;
      followCurrentNotebook(
        tracker,
        path => contents.localPath(path),
        path => {
          model.activePath = path;
        }
      );
    }

    if (!settingRegistry) {
      model.start();
      return costguard;
    }
    void followSettings(
      settingRegistry,
      SETTINGS_ID,
      composite => costguard.updateSettings(parseSettings(composite)),
      app.restored
    ).then(() => model.start());
    return costguard;
  }
};
