/**
 * @jest-environment jsdom
 *
 * The plugin graph: one plugin per concern. The ICostguard provider
 * (`jupyter-costguard:status`, which owns schema/status.json) has no UI, so
 * turning the status-bar item off turns nothing else off. JupyterLab's
 * packages ship ESM that jest cannot load: their tokens are stood in for.
 */
jest.mock('@jupyterlab/application', () => {
  const { Token } = jest.requireActual('@lumino/coreutils');
  return { ILayoutRestorer: new Token('@jupyterlab/application:ILayoutRestorer') };
});
jest.mock('@jupyterlab/apputils', () => {
  const { Token } = jest.requireActual('@lumino/coreutils');
  return {
    ICommandPalette: new Token('@jupyterlab/apputils:ICommandPalette'),
    Notification: {},
    Dialog: {},
    showDialog: jest.fn()
  };
});
jest.mock('@jupyterlab/notebook', () => {
  const { Token } = jest.requireActual('@lumino/coreutils');
  return { INotebookTracker: new Token('@jupyterlab/notebook:INotebookTracker') };
});
jest.mock('@jupyterlab/settingregistry', () => {
  const { Token } = jest.requireActual('@lumino/coreutils');
  return { ISettingRegistry: new Token('@jupyterlab/settingregistry:ISettingRegistry') };
});
jest.mock('@jupyterlab/statusbar', () => {
  const { Token } = jest.requireActual('@lumino/coreutils');
  return { IStatusBar: new Token('@jupyterlab/statusbar:IStatusBar') };
});
jest.mock('@jupyterlab/ui-components', () => ({
  LabIcon: class {
    constructor(options: object) {
      Object.assign(this, options);
    }
  }
}));
jest.mock('@jupyter-widgets/base', () => {
  const { Token } = jest.requireActual('@lumino/coreutils');
  return {
    ...jest.requireActual('./fakewidgets'),
    IJupyterWidgetRegistry: new Token('@jupyter-widgets/base:IJupyterWidgetRegistry')
  };
});

import type { JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ILayoutRestorer } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Signal } from '@lumino/signaling';

import plugins from '../index';
import { CommandIDs } from '../commands';
import { costguardPlugin } from '../costguardplugin';
import { CostStatusWidget } from '../statusbar';
import { STATUS_ITEM_ID, statusBarPlugin } from '../statusbarplugin';
import { ICostguard, ICostguardJobs } from '../tokens';

const byId = new Map(plugins.map(p => [p.id, p]));
const requires = (p: JupyterFrontEndPlugin<any>) => p.requires ?? [];
const uses = (p: JupyterFrontEndPlugin<any>) => [...requires(p), ...(p.optional ?? [])];

describe('plugins', () => {
  it('are one per concern', () => {
    expect([...byId.keys()].sort()).toEqual([
      'jupyter-costguard:cost-widget',
      'jupyter-costguard:hibernate',
      'jupyter-costguard:job-notifications',
      'jupyter-costguard:jobs',
      'jupyter-costguard:kernel-commands',
      'jupyter-costguard:notifications',
      'jupyter-costguard:offload',
      'jupyter-costguard:panel',
      'jupyter-costguard:refresh',
      'jupyter-costguard:status',
      'jupyter-costguard:status-bar'
    ]);
    expect(plugins.every(p => p.autoStart === true)).toBe(true);
  });

  it('provide ICostguard from the plugin of schema/status.json, which has no UI', () => {
    const providers = plugins.filter(p => p.provides === ICostguard);
    expect(providers).toEqual([costguardPlugin]);
    expect(costguardPlugin.id).toBe('jupyter-costguard:status');
    expect(requires(costguardPlugin)).toEqual([]);
    expect(costguardPlugin.optional).toEqual([ISettingRegistry, INotebookTracker]);
    for (const ui of [IStatusBar, ICommandPalette, ILayoutRestorer]) {
      expect(uses(costguardPlugin)).not.toContain(ui);
    }
  });

  it('need the status bar only for the status-bar item, which nobody needs', () => {
    expect(plugins.filter(p => uses(p).includes(IStatusBar))).toEqual([statusBarPlugin]);
    expect(requires(statusBarPlugin)).toEqual([ICostguard, IStatusBar]);
    expect(statusBarPlugin.provides).toBeUndefined();
    for (const id of [
      'jupyter-costguard:status-bar',
      'jupyter-costguard:refresh',
      'jupyter-costguard:panel',
      'jupyter-costguard:notifications',
      'jupyter-costguard:kernel-commands'
    ]) {
      expect(requires(byId.get(id)!)).toContain(ICostguard);
    }
    expect(byId.get('jupyter-costguard:jobs')!.provides).toBe(ICostguardJobs);
    expect(requires(byId.get('jupyter-costguard:job-notifications')!)).toEqual([
      ICostguardJobs
    ]);
  });
});

describe('activation', () => {
  function app() {
    const commands = {
      executed: [] as [string, unknown][],
      hasCommand: (id: string) => id === CommandIDs.openPanel,
      execute: async (id: string, args: unknown) => {
        commands.executed.push([id, args]);
      }
    };
    return {
      commands,
      restored: Promise.resolve(),
      serviceManager: {
        serverSettings: {},
        contents: { localPath: (path: string) => path.replace(/^RTC:/, '') }
      }
    };
  }

  it('reads the settings of jupyter-costguard:status, then polls', async () => {
    const changed = new Signal<object, void>({});
    const loaded: string[] = [];
    const registry = {
      load: async (id: string) => {
        loaded.push(id);
        return { composite: { refreshInterval: 5 }, changed };
      }
    };
    const current = new Signal<object, unknown>({});
    const tracker = {
      currentWidget: {
        context: { path: 'RTC:work/a.ipynb', pathChanged: new Signal<object, string>({}) }
      },
      currentChanged: current
    };
    const costguard = costguardPlugin.activate(app() as any, registry, tracker) as ICostguard;
    try {
      expect(costguard.model.activePath).toBe('work/a.ipynb');
      expect(costguard.model.isRunning).toBe(false);
      await new Promise(resolve => setTimeout(resolve, 0));
      expect(loaded).toEqual(['jupyter-costguard:status']);
      expect(costguard.settings.refreshInterval).toBe(5);
      expect(costguard.model.refreshInterval).toBe(5);
      expect(costguard.model.isRunning).toBe(true);
    } finally {
      costguard.model.dispose();
    }
  });

  it('puts the status item in the status bar; a click opens the panel', () => {
    const a = app();
    const costguard = costguardPlugin.activate(a as any, null, null) as ICostguard;
    const items: [string, any][] = [];
    const statusBar = { registerStatusItem: (id: string, item: any) => items.push([id, item]) };
    try {
      statusBarPlugin.activate(a as any, costguard, statusBar);
      expect(items.map(([id, item]) => [id, item.align, item.rank])).toEqual([
        [STATUS_ITEM_ID, 'left', 100]
      ]);
      const widget = items[0][1].item as CostStatusWidget;
      expect(widget).toBeInstanceOf(CostStatusWidget);
      expect(widget.node.id).toBe('jp-costguard-status');
      costguard.model.activePath = 'work/a.ipynb';
      (widget.clicked as Signal<CostStatusWidget, void>).emit();
      expect(a.commands.executed).toEqual([[CommandIDs.openPanel, { path: 'work/a.ipynb' }]]);
      widget.dispose();
    } finally {
      costguard.model.dispose();
    }
  });
});
