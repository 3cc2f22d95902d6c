/**
 * `jupyter-costguard:hibernate`: free a kernel's GPUs and keep its variables.
 *
 * - `costguard:hibernate-kernel` (args `{kernelId?, name?, notebook?,
 *   confirm?}`; no `kernelId`: the current notebook's kernel) asks first (the
 *   `confirm` setting of `schema/hibernate.json`, or `{confirm: false}`), then
 *   `POST kernels/{id}/hibernate` and says what was saved and skipped. It is on
 *   the notebook toolbar (from the schema), the cost panel's kernel rows that
 *   hold GPUs and idle-GPU alerts (`alertactions.ts`).
 * - Each notebook gets a banner (`HibernateBanner`) when it has a snapshot:
 *   asked when the notebook opens, is renamed, its kernel changes, and after a
 *   hibernate of its kernel. Restore waits for the notebook's kernel (starting
 *   one when it has none or it is dead) and loads the snapshot into it;
 *   Discard deletes it after asking.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import type { Kernel, ServiceManager } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { Signal } from '@lumino/signaling';

import { JUPYTERLAB_MAX_MESSAGE_LENGTH } from './alerttoasttext';
import { errorStatus } from './api';
import { CommandIDs } from './commands';
import { hibernateKernel } from './hibernateapi';
import { BannerAction, HibernateBanner } from './hibernatebanner';
import {
  bannerText,
  HIBERNATE_QUESTION,
  hibernatedText,
  restoredText,
  SnapshotBannerModel
} from './hibernatemodel';
import { hibernateIcon } from './icons';
import { errorMessage } from './jobsapi';
import { baseName, samePath } from './notebooks';
import { followSettings } from './settings';
import { ICostguard } from './tokens';

/** Id of the plugin; also the id of its settings (`schema/hibernate.json`). */
export const HIBERNATE_PLUGIN_ID = 'jupyter-costguard:hibernate';

/** What a hibernate is about: the kernel, its notebook, how to name it. */
interface ITarget {
  kernelId: string;
  notebook: string | null;
  label: string;
}

/** What the plugin's parts share. */
interface IContext {
  app: JupyterFrontEnd;
  tracker: INotebookTracker;
  localPath: (path: string) => string;
  /** Emitted with the notebook whose kernel was hibernated. */
  hibernated: Signal<object, string | null>;
  costguard: ICostguard | null;
  settings: { confirm: boolean };
}

/** The current notebook's live kernel, or null. */
function liveKernelOf(panel: NotebookPanel | null): { id: string; name: string } | null {
  const kernel = panel?.sessionContext.session?.kernel ?? null;
  if (!kernel || kernel.isDisposed || kernel.status === 'dead') {
    return null;
  }
  return { id: kernel.id, name: kernel.name };
}

/** The command's kernel: `args.kernelId`, else the current notebook's. */
function targetOf(ctx: IContext, args: { [key: string]: unknown }): ITarget | null {
  const text = (value: unknown): string | null =>
    typeof value === 'string' && value ? value : null;
  const kernelId = text(args.kernelId);
  if (kernelId) {
    const notebook = text(args.notebook);
    const name = text(args.name);
    const label = `${name ? `${name} ` : ''}${kernelId.slice(0, 8)}`;
    return { kernelId, notebook, label: notebook ? `${label} (${notebook})` : label };
  }
  const panel = ctx.tracker.currentWidget;
  const kernel = liveKernelOf(panel);
  if (!panel || !kernel) {
    return null;
  }
  const notebook = ctx.localPath(panel.context.path);
  return { kernelId: kernel.id, notebook, label: `${kernel.name} (${notebook})` };
}

/** An error toast; a message JupyterLab would cut gets "Details" with the whole text. */
function notifyError(message: string): void {
  const details = {
    label: 'Details',
    callback: () => {
      void showDialog({ title: 'Costguard', body: message, buttons: [Dialog.okButton()] });
    }
  };
  Notification.error(message, {
    autoClose: 10000,
    actions: message.length > JUPYTERLAB_MAX_MESSAGE_LENGTH ? [details] : []
  });
}

async function confirmHibernate(target: ITarget): Promise<boolean> {
  const result = await showDialog({
    title: 'Hibernate kernel?',
    body: `${HIBERNATE_QUESTION}\n\nKernel ${target.label}.`,
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Hibernate' })]
  });
  return result.button.accept;
}

/** Save, shut down, and say what was kept; true when hibernated. */
async function hibernate(ctx: IContext, target: ITarget): Promise<boolean> {
  try {
    const result = await hibernateKernel(target.kernelId, ctx.app.serviceManager.serverSettings);
    const type = result.skipped.length ? 'warning' : 'success';
    Notification[type](hibernatedText(result), { autoClose: 10000 });
    ctx.hibernated.emit(result.notebook ?? target.notebook);
  } catch (error) {
    const message = errorMessage(error).replace(/\.$/, '');
    const keeps =
      errorStatus(error) === 409 && !/keeps running/.test(message) ? ' The kernel keeps running.' : '';
    notifyError(`Not hibernated: ${message}.${keeps}`);
    return false;
  }
  void ctx.costguard?.model.pollNow();
  return true;
}

function addHibernateCommand(ctx: IContext): void {
  ctx.app.commands.addCommand(CommandIDs.hibernateKernel, {
    label: args => (args.isPalette ? 'Hibernate kernel (free its GPUs, keep its variables)' : 'Hibernate'),
    caption:
      'Save the kernel\'s variables, shut it down and free its GPUs; restore them from the banner',
    icon: args => (args.isPalette ? undefined : hibernateIcon),
    isEnabled: args => targetOf(ctx, args) !== null,
    execute: async args => {
      const target = targetOf(ctx, args);
      if (!target) {
        Notification.warning('Open a notebook with a running kernel to hibernate it.', {
          autoClose: 5000
        });
        return false;
      }
      const ask = ctx.settings.confirm && args.confirm !== false;
      if (ask && !(await confirmHibernate(target))) {
        return false;
      }
      return hibernate(ctx, target);
    }
  });
}

/** How long Restore waits for the notebook's kernel to answer. */
const KERNEL_READY_MS = 60_000;

/** `promise`, or a rejection saying `why` after `ms`. */
function within<T>(promise: Promise<T>, ms: number, why: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(why)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** Once the kernel has answered kernel_info and says it is idle. */
async function untilIdle(kernel: Kernel.IKernelConnection): Promise<void> {
  await kernel.info;
  while (kernel.status !== 'idle' && !kernel.isDisposed) {
    await new Promise<void>(resolve => {
      const changed = (): void => {
        kernel.statusChanged.disconnect(changed);
        resolve();
      };
      kernel.statusChanged.connect(changed);
    });
  }
}

/**
 * The notebook's kernel, ready to load a snapshot into: started (the
 * notebook's kernelspec, else the snapshot's) when it has none or the server
 * no longer runs it (a hibernated kernel's connection can linger in the
 * page), connected, its kernel_info answered, idle.
 */
async function readyKernel(
  panel: NotebookPanel,
  services: ServiceManager.IManager,
  fallbackName: string | null
): Promise<string> {
  const context = panel.sessionContext;
  await context.ready;
  await Promise.all([services.sessions.refreshRunning(), services.kernels.refreshRunning()]);
  let kernel = context.session?.kernel ?? null;
  const id = kernel?.id;
  const running = Array.from(services.kernels.running()).some(k => k.id === id);
  if (!kernel || kernel.isDisposed || kernel.status === 'dead' || !running) {
    const spec = panel.model?.getMetadata('kernelspec') as { name?: unknown } | undefined;
    const name = typeof spec?.name === 'string' && spec.name ? spec.name : fallbackName;
    kernel = await context.changeKernel(name ? { name } : {});
  }
  if (!kernel) {
    throw new Error('the notebook has no kernel: start one and try again');
  }
  const seconds = KERNEL_READY_MS / 1000;
  await within(untilIdle(kernel), KERNEL_READY_MS, `the notebook's kernel was not idle within ${seconds} s`);
  return kernel.id;
}

async function restore(ctx: IContext, panel: NotebookPanel, model: SnapshotBannerModel): Promise<void> {
  const services = ctx.app.serviceManager;
  const fallback = model.snapshot?.kernel_name ?? null;
  const result = await model.restore(() => readyKernel(panel, services, fallback));
  if (result) {
    const type = result.skipped.length ? 'warning' : 'success';
    Notification[type](restoredText(result), { autoClose: 10000 });
  } else if (model.error) {
    notifyError(`Not restored: ${model.error}`);
  }
}

async function discard(panel: NotebookPanel, model: SnapshotBannerModel): Promise<void> {
  const snapshot = model.snapshot;
  if (!snapshot) {
    return;
  }
  const result = await showDialog({
    title: 'Discard snapshot?',
    body:
      `Delete the snapshot of ${baseName(panel.context.path)} (${bannerText(snapshot)})? ` +
      'Its variables cannot be restored afterwards.',
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Discard' })]
  });
  if (result.button.accept && !(await model.discard()) && model.error) {
    notifyError(`Not discarded: ${model.error}`);
  }
}

/** A banner above the notebook's cells, asked again when its snapshot may have changed. */
function attachBanner(ctx: IContext, panel: NotebookPanel): void {
  const model = new SnapshotBannerModel({
    notebook: null,
    serverSettings: ctx.app.serviceManager.serverSettings
  });
  const onAction = (action: BannerAction): void => {
    void (action === 'restore' ? restore(ctx, panel, model) : discard(panel, model));
  };
  const banner = new HibernateBanner({ model, onAction });
  panel.contentHeader.addWidget(banner);
  const refresh = (): void => {
    model.notebook = ctx.localPath(panel.context.path);
    void model.refresh();
  };
  const hibernated = (_: unknown, notebook: string | null): void => {
    if (!notebook || (model.notebook && samePath(notebook, model.notebook))) {
      refresh();
    }
  };
  void panel.context.ready.then(refresh);
  panel.context.pathChanged.connect(refresh);
  panel.sessionContext.kernelChanged.connect(refresh);
  ctx.hibernated.connect(hibernated);
  panel.disposed.connect(() => {
    ctx.hibernated.disconnect(hibernated);
    banner.dispose();
    model.dispose();
  });
}

/**
 * Every notebook gets its banner, and the toolbar button follows the current
 * notebook's kernel (enabled while it has a live one).
 */
function followNotebooks(ctx: IContext): void {
  const changed = (): void => ctx.app.commands.notifyCommandChanged(CommandIDs.hibernateKernel);
  const follow = (panel: NotebookPanel): void => {
    panel.sessionContext.sessionChanged.connect(changed);
    panel.sessionContext.kernelChanged.connect(changed);
    panel.sessionContext.statusChanged.connect(changed);
    attachBanner(ctx, panel);
  };
  ctx.tracker.currentChanged.connect(changed);
  ctx.tracker.forEach(follow);
  ctx.tracker.widgetAdded.connect((_, panel) => follow(panel));
}

export const hibernatePlugin: JupyterFrontEndPlugin<void> = {
  id: HIBERNATE_PLUGIN_ID,
  description:
    'Hibernate a kernel (save its variables, free its GPUs) and restore them from a banner.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICostguard, ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    costguard: ICostguard | null,
    settingRegistry: ISettingRegistry | null
  ): void => {
    const contents = app.serviceManager.contents;
    const ctx: IContext = {
      app,
      tracker,
      localPath: path => contents.localPath(path),
      hibernated: new Signal<object, string | null>({}),
      costguard,
      settings: { confirm: true }
    };
    addHibernateCommand(ctx);
    followNotebooks(ctx);
    if (settingRegistry) {
      void followSettings(
        settingRegistry,
        HIBERNATE_PLUGIN_ID,
        composite => {
          ctx.settings.confirm = composite.confirm !== false;
        },
        app.restored
      );
    }
  }
};
