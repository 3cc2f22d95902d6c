/**
 * `jupyter-costguard:job-notifications`: a notification when a batch job
 * this page saw queued or running ends (the `notifications` setting of
 * `schema/offload.json` turns it off).
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { JobNotifier } from './jobnotifier';
import { OFFLOAD_SETTINGS_ID, parseOffloadSettings } from './offloadsettings';
import { followSettings } from './settings';
import { ICostguardJobs } from './tokens';

export const JOB_NOTIFICATIONS_PLUGIN_ID = 'jupyter-costguard:job-notifications';

export const jobNotificationsPlugin: JupyterFrontEndPlugin<void> = {
  id: JOB_NOTIFICATIONS_PLUGIN_ID,
  description: 'A notification when a batch job this page saw running ends.',
  autoStart: true,
  requires: [ICostguardJobs],
  optional: [ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    jobs: ICostguardJobs,
    settingRegistry: ISettingRegistry | null
  ): void => {
    const notifier = new JobNotifier({
      source: jobs.model,
      manager: Notification.manager,
      commands: app.commands
    });
    if (settingRegistry) {
      void followSettings(settingRegistry, OFFLOAD_SETTINGS_ID, composite => {
        notifier.enabled = parseOffloadSettings(composite).notifications;
      });
    }
  }
};
