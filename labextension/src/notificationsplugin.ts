/**
 * `jupyter-costguard:notifications`: each active alert once as a JupyterLab
 * notification (AlertNotifier), with the alert's actions as buttons.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';

import { AlertNotifier } from './alertnotifier';
import { ICostguard } from './tokens';

export const NOTIFICATIONS_PLUGIN_ID = 'jupyter-costguard:notifications';

export const notificationsPlugin: JupyterFrontEndPlugin<void> = {
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
