/**
 * jupyter-costguard frontend: the status-bar cost item.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { CostStatusModel, DEFAULT_REFRESH_SECONDS } from './model';
import { CostStatusWidget } from './widget';
import { DEFAULT_SUMMARY_OPTIONS, ISummaryOptions } from './format';
import { costWidgetPlugin } from './costwidget';

/** Plugin id; also the settings id (`schema/status.json`). */
export const STATUS_PLUGIN_ID = 'jupyter-costguard:status';

/**
 * Status-bar item with the instance's rate and the spend so far.
 */
const statusPlugin: JupyterFrontEndPlugin<void> = {
  id: STATUS_PLUGIN_ID,
  description: 'Shows the GPU instance rate and spend in the status bar.',
  autoStart: true,
  requires: [IStatusBar],
  optional: [ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    statusBar: IStatusBar,
    settingRegistry: ISettingRegistry | null
  ): void => {
    const model = new CostStatusModel({
      serverSettings: app.serviceManager.serverSettings,
      // Wait for the settings before the first request.
      autoStart: !settingRegistry
    });
    const item = new CostStatusWidget(model);
    statusBar.registerStatusItem(STATUS_PLUGIN_ID, {
      item,
      align: 'left',
      rank: 100
    });

    if (!settingRegistry) {
      return;
    }
    const apply = (settings: ISettingRegistry.ISettings): void => {
      const interval = settings.get('refreshInterval').composite as number;
      const bar = (settings.get('statusBar').composite ??
        {}) as Partial<ISummaryOptions>;
      model.refreshInterval = interval ?? DEFAULT_REFRESH_SECONDS;
      model.summaryOptions = { ...DEFAULT_SUMMARY_OPTIONS, ...bar };
    };
    Promise.all([settingRegistry.load(STATUS_PLUGIN_ID), app.restored])
      .then(([settings]) => {
        apply(settings);
        settings.changed.connect(apply);
      })
      .catch(reason => {
        console.error(
          `${STATUS_PLUGIN_ID}: failed to load settings, using defaults`,
          reason
        );
      })
      .then(() => model.poll.start());
  }
};

const plugins: JupyterFrontEndPlugin<any>[] = [statusPlugin, costWidgetPlugin];

export default plugins;
