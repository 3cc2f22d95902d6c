/**
 * jupyter-costguard frontend: one plugin per concern, each in its own file.
 *
 * - `jupyter-costguard:status` (costguardplugin.ts): the shared model and the
 *   settings (schema/status.json), no UI; provides ICostguard.
 * - `jupyter-costguard:status-bar` (statusbarplugin.ts): the status-bar item.
 * - `jupyter-costguard:refresh` (refreshplugin.ts): `costguard:refresh`.
 * - `jupyter-costguard:panel` (costpanelplugin.ts): the cost side panel and
 *   `costguard:open-panel`.
 * - `jupyter-costguard:notifications` (notificationsplugin.ts): active alerts
 *   as notifications.
 * - `jupyter-costguard:kernel-commands` (kernelcommandsplugin.ts): shut down,
 *   interrupt or restart a kernel through the kernels REST API.
 * - `jupyter-costguard:cost-widget` (costwidgetplugin.ts): the in-notebook
 *   cost widget.
 * - `jupyter-costguard:jobs` (jobsplugin.ts): the Jobs side panel and the job
 *   commands; provides ICostguardJobs.
 * - `jupyter-costguard:job-notifications` (jobnotificationsplugin.ts): a
 *   notification when a watched job ends.
 * - `jupyter-costguard:offload` (offloadplugin.ts): "Run as batch job"
 *   (settings schema/offload.json).
 * - `jupyter-costguard:hibernate` (hibernateplugin.ts): Hibernate a kernel
 *   (save its variables, free its GPUs) and the restore banner (settings
 *   schema/hibernate.json).
 */
import type { JupyterFrontEndPlugin } from '@jupyterlab/application';

import { costguardPlugin } from './costguardplugin';
import { costPanelPlugin } from './costpanelplugin';
import { costWidgetPlugin } from './costwidgetplugin';
import { hibernatePlugin } from './hibernateplugin';
import { jobNotificationsPlugin } from './jobnotificationsplugin';
import { jobsPlugin } from './jobsplugin';
import { kernelCommandsPlugin } from './kernelcommandsplugin';
import { notificationsPlugin } from './notificationsplugin';
import { offloadPlugin } from './offloadplugin';
import { refreshPlugin } from './refreshplugin';
import { statusBarPlugin } from './statusbarplugin';

export { ICostguard, ICostguardJobs } from './tokens';
export { CommandIDs } from './commands';

const plugins: JupyterFrontEndPlugin<any>[] = [
  costguardPlugin,
  statusBarPlugin,
  refreshPlugin,
  costPanelPlugin,
  notificationsPlugin,
  kernelCommandsPlugin,
  costWidgetPlugin,
  jobsPlugin,
  jobNotificationsPlugin,
  offloadPlugin,
  hibernatePlugin
];

export default plugins;
