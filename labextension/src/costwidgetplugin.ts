/**
 * `jupyter-costguard:cost-widget`: registers the `jupyter-costguard` widget
 * module (`CostWidgetModel`, `CostWidgetView`, in `costwidget.ts`) with the
 * widget registry of `@jupyter-widgets/jupyterlab-manager`, in JupyterLab 4
 * and Notebook 7 alike.
 *
 * Python shows it with `%load_ext jupyter_costguard`, `%costguard` or
 * `jupyter_costguard.widget()`. The view polls the costguard REST API from
 * the page: it keeps updating while the kernel is busy and never sends a
 * kernel message.
 *
 * The registry is optional: where the widget manager is not installed or is
 * disabled the plugin logs and does nothing, and the rest of costguard works.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { IJupyterWidgetRegistry } from '@jupyter-widgets/base';

import {
  CostWidgetModel,
  CostWidgetView,
  setCostWidgetServerSettings
} from './costwidget';
import { MODULE_NAME, MODULE_VERSION } from './costwidgetsummary';

export const COST_WIDGET_PLUGIN_ID = 'jupyter-costguard:cost-widget';

export const costWidgetPlugin: JupyterFrontEndPlugin<void> = {
  id: COST_WIDGET_PLUGIN_ID,
  description: 'The in-notebook cost widget (%load_ext jupyter_costguard).',
  autoStart: true,
  optional: [IJupyterWidgetRegistry],
  activate: (
    app: JupyterFrontEnd,
    registry: IJupyterWidgetRegistry | null
  ): void => {
    if (!registry) {
      console.info(
        `${COST_WIDGET_PLUGIN_ID}: no Jupyter widget manager; ` +
          'the in-notebook cost widget is unavailable'
      );
      return;
    }
    setCostWidgetServerSettings(app.serviceManager.serverSettings);
    registry.registerWidget({
      name: MODULE_NAME,
      version: MODULE_VERSION,
      exports: { CostWidgetModel, CostWidgetView }
    });
  }
};
