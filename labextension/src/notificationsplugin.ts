/**
 * `jupyter-costguard:notifications`: each active alert once as a JupyterLab
 * notification (AlertNotifier), with the alert's actions as buttons, its
 * whole text shown (AlertToastText) and its buttons one line each
 * (`style/alerts.css`).
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';

import { AlertNotifier } from './alertnotifier';
import { AlertToastText } from './alerttoasttext';
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
    // JupyterLab cuts messages at 140 characters: show costguard's whole.
    new AlertToastText({ manager: Notification.manager });
    costguard.settingsChanged.connect((_, settings) => {
      notifier.enabled = settings.notifications;
      notifier.snoozeSeconds = settings.snoozeSeconds;
    });
  }
};
