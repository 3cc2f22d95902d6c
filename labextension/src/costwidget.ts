/**
 * The in-notebook cost widget (ipywidgets 8): model and view registered with the widget
 * registry. Placeholder until the widget lands; index.ts already lists the plugin.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';

export const COST_WIDGET_PLUGIN_ID = 'jupyter-costguard:cost-widget';

export const costWidgetPlugin: JupyterFrontEndPlugin<void> = {
  id: COST_WIDGET_PLUGIN_ID,
  description: 'The in-notebook cost widget (%load_ext jupyter_costguard).',
  autoStart: true,
  activate: (_app: JupyterFrontEnd): void => {
    // registered by the cost-widget work
  }
};
