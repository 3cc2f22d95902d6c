/**
 * `jupyter-costguard:kernel-commands`: `costguard:shutdown-kernel`,
 * `costguard:restart-kernel` (both ask first unless `{confirm: false}`) and
 * `costguard:interrupt-kernel`, args `{kernelId, name?, notebook?}`, through
 * the kernels REST API (never a kernel message). The cost panel's buttons and
 * the alerts' actions run them.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { KernelAPI } from '@jupyterlab/services';

import { CommandIDs } from './commands';
import { ICostguard } from './tokens';

export const KERNEL_COMMANDS_PLUGIN_ID = 'jupyter-costguard:kernel-commands';

/** Describe a kernel for dialogs and messages. */
function kernelLabel(args: { [key: string]: unknown }): string {
  const id = String(args.kernelId ?? '');
  const name = typeof args.name === 'string' && args.name ? `${args.name} ` : '';
  const notebook =
    typeof args.notebook === 'string' && args.notebook
      ? ` (${args.notebook})`
      : '';
  return `${name}${id.slice(0, 8)}${notebook}`;
}

/** One kernel command. */
interface IKernelCommand {
  id: string;
  label: string;
  caption: string;
  /** For "Could not {what} kernel …". */
  what: string;
  /** The question asked first, if any. */
  confirm?: { title: string; body: (kernel: string) => string; button: string };
  /** The REST call. */
  run: (kernelId: string) => Promise<unknown>;
  /** Said once done, if anything. */
  done?: (kernel: string) => void;
}

export const kernelCommandsPlugin: JupyterFrontEndPlugin<void> = {
  id: KERNEL_COMMANDS_PLUGIN_ID,
  description:
    'Commands to shut down, interrupt or restart a kernel from the cost panel and alerts.',
  autoStart: true,
  requires: [ICostguard],
  activate: (app: JupyterFrontEnd, costguard: ICostguard): void => {
    const settings = app.serviceManager.serverSettings;
    const hasKernel = (args: { [key: string]: unknown }): boolean =>
      typeof args.kernelId === 'string' && args.kernelId.length > 0;
    const commands: IKernelCommand[] = [
      {
        id: CommandIDs.shutdownKernel,
        label: 'Shut Down Kernel',
        caption: 'Shut the kernel down (asks first)',
        what: 'shut down',
        confirm: {
          title: 'Shut down kernel?',
          body: kernel =>
            `Shut down kernel ${kernel}? Its variables are lost; the notebook stays open.`,
          button: 'Shut Down'
        },
        run: id => app.serviceManager.kernels.shutdown(id),
        done: kernel => {
          Notification.success(`Kernel ${kernel} shut down.`, { autoClose: 4000 });
        }
      },
      {
        id: CommandIDs.restartKernel,
        label: 'Restart Kernel',
        caption: 'Restart the kernel (asks first)',
        what: 'restart',
        confirm: {
          title: 'Restart kernel?',
          body: kernel => `Restart kernel ${kernel}? Its variables are lost.`,
          button: 'Restart'
        },
        run: id => KernelAPI.restartKernel(id, settings)
      },
      {
        id: CommandIDs.interruptKernel,
        label: 'Interrupt Kernel',
        caption: 'Interrupt what the kernel is running',
        what: 'interrupt',
        run: id => KernelAPI.interruptKernel(id, settings)
      }
    ];

    for (const command of commands) {
      app.commands.addCommand(command.id, {
        label: command.label,
        caption: command.caption,
        isEnabled: hasKernel,
        execute: async args => {
          const kernel = kernelLabel(args);
          const ask = command.confirm;
          if (ask && args.confirm !== false) {
            const result = await showDialog({
              title: ask.title,
              body: ask.body(kernel),
              buttons: [
                Dialog.cancelButton(),
                Dialog.warnButton({ label: ask.button })
              ]
            });
            if (!result.button.accept) {
              return false;
            }
          }
          try {
            await command.run(String(args.kernelId));
          } catch (reason) {
            const message =
              reason instanceof Error ? reason.message : String(reason);
            Notification.error(
              `Could not ${command.what} kernel ${kernel}: ${message}`,
              { autoClose: 8000 }
            );
            return false;
          }
          command.done?.(kernel);
          void costguard.model.pollNow();
          return true;
        }
      });
    }
  }
};
