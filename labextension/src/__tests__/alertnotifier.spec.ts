import type { Notification, NotificationManager } from '@jupyterlab/apputils';
import { Signal } from '@lumino/signaling';

import type { IAlert } from '../api';
import { CommandIDs } from '../commands';
import {
  AlertNotifier,
  alertMessage,
  IAlertSource,
  OFFLOAD_UNAVAILABLE_TEXT,
  safeUrl
} from '../alertnotifier';
import { formatClock } from '../format';
import { alert } from './fixtures';

/** The title line of the fixture's alert, dated by its `updated` (100). */
const TITLE = `GPU idle · as of ${formatClock(100)}`;

/** NotificationManager's semantics (apputils ships ESM only, which jest cannot load). */
class FakeManager {
  changed = new Signal<this, Notification.IChange>(this);
  list: Notification.INotification[] = [];
  private _n = 0;

  notify(message: string, type: Notification.TypeOptions, options: any): string {
    const n = {
      id: `n${++this._n}`,
      message,
      type,
      options: { autoClose: 0, ...options },
      createdAt: 0,
      modifiedAt: 0
    } as Notification.INotification;
    this.list.unshift(n);
    this.changed.emit({ type: 'added', notification: n });
    return n.id;
  }

  update(args: any): boolean {
    const i = this.list.findIndex(n => n.id === args.id);
    if (i < 0) {
      return false;
    }
    const old = this.list[i];
    const n = {
      ...old,
      message: args.message ?? old.message,
      type: args.type ?? old.type,
      options: {
        ...old.options,
        actions: args.actions ?? old.options.actions,
        autoClose: args.autoClose ?? old.options.autoClose,
        data: args.data ?? old.options.data
      }
    };
    this.list.splice(i, 1);
    this.list.unshift(n);
    this.changed.emit({ type: 'updated', notification: n });
    return true;
  }

  dismiss(id?: string): void {
    const gone = id === undefined ? this.list.splice(0) : this.list.filter(n => n.id === id);
    this.list = this.list.filter(n => !gone.includes(n));
    for (const n of gone) {
      this.changed.emit({ type: 'removed', notification: n });
    }
  }

  has(id: string): boolean {
    return this.list.some(n => n.id === id);
  }

  get(id: string): Notification.INotification | undefined {
    return this.list.find(n => n.id === id);
  }

  /** What a toast button does: run the callback, then close unless prevented. */
  click(id: string, label: string): void {
    const n = this.get(id)!;
    const action = n.options.actions!.find(a => a.label === label)!;
    const event = {
      defaultPrevented: false,
      preventDefault() {
        this.defaultPrevented = true;
      }
    };
    action.callback(event as unknown as MouseEvent);
    if (!event.defaultPrevented) {
      this.dismiss(id);
    }
  }
}

class FakeSource implements IAlertSource {
  alertsReceived = new Signal<this, ReadonlyArray<IAlert>>(this);
  alertsSimulated = false;
  dismissed: string[] = [];
  snoozed: [string, number][] = [];
  failDismiss = false;

  dismissAlert(id: string): Promise<void> {
    this.dismissed.push(id);
    return this.failDismiss ? Promise.reject(new Error('nope')) : Promise.resolve();
  }

  snoozeAlert(id: string, seconds: number): Promise<void> {
    this.snoozed.push([id, seconds]);
    return Promise.resolve();
  }

  push(...alerts: IAlert[]): void {
    this.alertsReceived.emit(alerts);
  }
}

class FakeCommands {
  executed: [string, any][] = [];
  available = new Set<string>([
    CommandIDs.openPanel,
    CommandIDs.shutdownKernel,
    CommandIDs.restartKernel,
    CommandIDs.interruptKernel
  ]);
  result: unknown = true;

  hasCommand(id: string): boolean {
    return this.available.has(id);
  }

  execute(id: string, args?: any): Promise<any> {
    this.executed.push([id, args]);
    return Promise.resolve(this.result);
  }
}

function setup(options: Partial<AlertNotifier.IOptions> = {}) {
  const source = new FakeSource();
  const manager = new FakeManager();
  const commands = new FakeCommands();
  const opened: string[] = [];
  const notifier = new AlertNotifier({
    source,
    manager: manager as unknown as NotificationManager,
    commands,
    openUrl: url => opened.push(url),
    ...options
  });
  return { source, manager, commands, notifier, opened };
}

const flush = () => new Promise(resolve => setTimeout(resolve, 0));

describe('alert text', () => {
  it('puts the title first and labels simulated figures', () => {
    const a = alert('a1');
    expect(alertMessage(a)).toBe(
      `${TITLE}\nThe GPU held by explore.ipynb has been idle for 30 min.`
    );
    expect(alertMessage({ ...a, message: '' }, true)).toBe(
      `GPU idle (simulated) · as of ${formatClock(100)}`
    );
    // no time known: no date
    expect(alertMessage({ ...a, updated: undefined as never, message: '' })).toBe('GPU idle');
  });

  it('only lets http(s) URLs through', () => {
    expect(safeUrl('https://example.com/x')).toBe('https://example.com/x');
    expect(safeUrl('javascript:alert(1)')).toBeNull();
    expect(safeUrl(42)).toBeNull();
  });
});

describe('AlertNotifier', () => {
  it('shows each alert once, typed by severity, with its actions', () => {
    const { source, manager, notifier } = setup({ onScreen: () => true });
    source.push(alert('a1', 'warning'), alert('a2', 'critical'), alert('a3', 'info'));
    source.push(alert('a1', 'warning'), alert('a2', 'critical'), alert('a3', 'info'));
    source.push(
      alert('a1', 'warning', { updated: 200, message: 'still idle' }),
      alert('a2', 'critical'),
      alert('a3', 'info')
    );
    expect(manager.list).toHaveLength(3);
    const n1 = manager.get(notifier.notificationId('a1')!)!;
    expect(n1.message).toContain('still idle'); // once, with its latest figures
    expect(n1.type).toBe('warning');
    expect(n1.options.autoClose).toBe(false);
    expect(n1.options.actions!.map(a => a.label)).toEqual([
      'Details',
      'Shut down kernel',
      'Snooze 1 h',
      'Dismiss'
    ]);
    expect((n1.options.data as any).costguardAlertId).toBe('a1');
    expect(manager.get(notifier.notificationId('a2')!)!.type).toBe('error');
    expect(manager.get(notifier.notificationId('a3')!)!.options.autoClose).toBe(10000);
  });

  it('keeps the whole message, however long (JupyterLab would cut it at 140)', () => {
    const { source, manager } = setup();
    const long = 'word '.repeat(60).trim() + ' the-end.';
    source.push(alert('a1', 'warning', { message: long }));
    expect(manager.list[0].message).toBe(`${TITLE}\n${long}`);
    expect(manager.list[0].message.length).toBeGreaterThan(300);
  });

  it('gives buttons short one-line labels and a Costguard tooltip', () => {
    const { source, manager, notifier } = setup({ snoozeSeconds: 7200 });
    source.push(
      alert('a1', 'warning', {
        actions: [
          { id: 'snooze', label: 'Snooze this alert for a while' },
          { id: 'dismiss', label: '' },
          { id: 'offload', label: 'Offload heavy cells' }
        ]
      })
    );
    const actions = manager.get(notifier.notificationId('a1')!)!.options.actions!;
    expect(actions.map(a => a.label)).toEqual([
      'Snooze 2 h',
      'Dismiss',
      'Offload heavy cells'
    ]);
    expect(actions.map(a => a.displayType)).toEqual(['default', 'default', 'accent']);
    expect(actions.every(a => (a.caption ?? '').startsWith('Costguard: '))).toBe(true);
    expect(actions[0].caption).toBe('Costguard: hide this alert for 2 h');
  });

  it('follows a changed snooze setting in later notifications', () => {
    const { source, manager, notifier } = setup();
    notifier.snoozeSeconds = 1800;
    source.push(alert('a1'));
    manager.click(notifier.notificationId('a1')!, 'Snooze 30 min');
    expect(source.snoozed).toEqual([['a1', 1800]]);
  });

  it('re-notifies when the severity goes up, updating the same notification', () => {
    const { source, manager, notifier } = setup();
    const changes: string[] = [];
    manager.changed.connect((_, c) => changes.push(c.type));
    source.push(alert('a1', 'info'));
    const id = notifier.notificationId('a1');
    source.push(alert('a1', 'critical', { updated: 200, title: 'GPU idle for 2 h' }));
    expect(notifier.notificationId('a1')).toBe(id);
    expect(manager.get(id!)!.type).toBe('error');
    expect(manager.get(id!)!.message).toContain('GPU idle for 2 h');
    expect(changes).toEqual(['added', 'updated']);
  });

  it('shows the latest figures of an alert, in place, dated, while its toast is on screen', () => {
    // the demo: "88% idle, ~10.88 USD/h" in the toast beside "98%, ~12.11 USD/h" in the panel
    const { source, manager, notifier } = setup({ onScreen: () => true });
    const changes: string[] = [];
    manager.changed.connect((_, c) => changes.push(c.type));
    source.push(alert('a1', 'warning', { updated: 100, message: '88% idle, ~10.88 USD/h' }));
    const id = notifier.notificationId('a1')!;
    source.push(alert('a1', 'warning', { updated: 100, message: '88% idle, ~10.88 USD/h' }));
    expect(changes).toEqual(['added']); // nothing new: nothing redrawn
    source.push(alert('a1', 'warning', { updated: 700, message: '98% idle, ~12.11 USD/h' }));
    expect(changes).toEqual(['added', 'updated']);
    expect(notifier.notificationId('a1')).toBe(id);
    const n = manager.get(id)!;
    expect(n.message).toBe(`GPU idle · as of ${formatClock(700)}\n98% idle, ~12.11 USD/h`);
    expect(n.type).toBe('warning');
    expect(n.options.autoClose).toBe(false); // still a toast that stays
    expect(n.options.actions!.map(a => a.label)).toContain('Dismiss');
  });

  it('updates silently when the alert\'s toast is not on screen (the centre follows)', () => {
    let onScreen = false;
    const { source, manager, notifier } = setup({ onScreen: () => onScreen });
    source.push(alert('a1', 'info', { updated: 100, message: 'idle 40%' }));
    const id = notifier.notificationId('a1')!;
    expect(manager.get(id)!.options.autoClose).toBe(10000);
    // its toast closed by itself: new figures reach the centre without popping it up again
    source.push(alert('a1', 'info', { updated: 400, message: 'idle 60%' }));
    expect(manager.get(id)!.message).toContain('idle 60%');
    expect(manager.get(id)!.options.autoClose).toBe(0);
    // on screen again (an escalation shows it): in place, with its own autoClose
    source.push(alert('a1', 'warning', { updated: 500, message: 'idle 80%' }));
    expect(manager.get(id)!.options.autoClose).toBe(false);
    onScreen = true;
    source.push(alert('a1', 'warning', { updated: 800, message: 'idle 90%' }));
    expect(manager.get(id)!.message).toContain('idle 90%');
    expect(manager.get(id)!.options.autoClose).toBe(false);
    expect(manager.list).toHaveLength(1);
  });

  it('re-notifies an escalated alert whose notification was closed', () => {
    const { source, manager, notifier } = setup();
    source.push(alert('a1', 'info'));
    manager.click(notifier.notificationId('a1')!, 'Details'); // keeps it open
    expect(manager.list).toHaveLength(1);
    source.push(alert('a1', 'info'));
    source.push(alert('a1', 'warning', { updated: 300 }));
    expect(manager.list).toHaveLength(1);
    expect(manager.list[0].type).toBe('warning');
  });

  it('dismissing the notification dismisses the alert, once', async () => {
    const { source, manager, notifier } = setup();
    source.push(alert('a1'));
    manager.dismiss(notifier.notificationId('a1')); // e.g. from the notification center
    expect(source.dismissed).toEqual(['a1']);
    // The next poll still lists it: not shown again.
    source.push(alert('a1'));
    expect(manager.list).toHaveLength(0);
    await flush();
  });

  it('the Dismiss button POSTs dismiss without a second request', () => {
    const { source, manager, notifier } = setup();
    source.push(alert('a1'));
    manager.click(notifier.notificationId('a1')!, 'Dismiss');
    expect(source.dismissed).toEqual(['a1']);
    expect(manager.list).toHaveLength(0);
  });

  it('the Snooze button snoozes for the configured time and does not dismiss', () => {
    const { source, manager, notifier } = setup({ snoozeSeconds: 900 });
    source.push(alert('a1'));
    manager.click(notifier.notificationId('a1')!, 'Snooze 15 min');
    expect(source.snoozed).toEqual([['a1', 900]]);
    expect(source.dismissed).toEqual([]);
    expect(manager.list).toHaveLength(0);
    // Snoozed: gone from the active list; when it comes back it is shown again.
    source.push();
    source.push(alert('a1', 'warning', { updated: 5000 }));
    expect(manager.list).toHaveLength(1);
  });

  it('closes notifications of alerts that are no longer active, without dismissing', () => {
    const { source, manager } = setup();
    source.push(alert('a1'), alert('a2'));
    source.push(alert('a2'));
    expect(manager.list).toHaveLength(1);
    expect(source.dismissed).toEqual([]);
  });

  it('opens the panel on the notebook and stays open', () => {
    const { source, manager, notifier, commands } = setup();
    source.push(alert('a1'));
    manager.click(notifier.notificationId('a1')!, 'Details');
    expect(commands.executed).toEqual([
      [CommandIDs.openPanel, { path: 'explore.ipynb' }]
    ]);
    expect(manager.list).toHaveLength(1);
    expect(source.dismissed).toEqual([]);
  });

  it('shuts the kernel down through the command, closing once confirmed', async () => {
    const { source, manager, notifier, commands } = setup();
    source.push(alert('a1'));
    commands.result = false; // the user cancelled the dialog
    manager.click(notifier.notificationId('a1')!, 'Shut down kernel');
    await flush();
    expect(commands.executed[0]).toEqual([
      CommandIDs.shutdownKernel,
      { kernelId: 'k-explore', notebook: 'explore.ipynb' }
    ]);
    expect(manager.list).toHaveLength(1);
    commands.result = true;
    manager.click(notifier.notificationId('a1')!, 'Shut down kernel');
    await flush();
    expect(manager.list).toHaveLength(0);
    expect(source.dismissed).toEqual([]);
  });

  it('runs restart and interrupt on the kernel named by the action', async () => {
    const { source, manager, notifier, commands } = setup();
    source.push(
      alert('a1', 'warning', {
        actions: [{ id: 'restart-kernel', label: 'Restart', args: { kernel_id: 'k-other' } }]
      }),
      alert('a2', 'warning', {
        actions: [{ id: 'interrupt-kernel', label: 'Interrupt' }]
      })
    );
    manager.click(notifier.notificationId('a1')!, 'Restart');
    await flush();
    manager.click(notifier.notificationId('a2')!, 'Interrupt');
    await flush();
    expect(commands.executed.map(([c, a]) => [c, a.kernelId])).toEqual([
      [CommandIDs.restartKernel, 'k-other'],
      [CommandIDs.interruptKernel, 'k-explore']
    ]);
    expect(manager.list).toHaveLength(0);
    expect(source.dismissed).toEqual([]);
  });

  it('hides kernel actions without a kernel and unknown actions', () => {
    const { source, manager, notifier } = setup();
    source.push(
      alert('a1', 'warning', {
        kernel_id: null,
        actions: [
          { id: 'shutdown-kernel', label: 'Shut down' },
          { id: 'launch-rocket', label: 'Launch' },
          { id: 'open-url', label: 'Bad link', args: { url: 'javascript:x' } },
          { id: 'dismiss', label: 'Dismiss' }
        ]
      })
    );
    const n = manager.get(notifier.notificationId('a1')!)!;
    expect(n.options.actions!.map(a => a.label)).toEqual(['Dismiss']);
  });

  it('opens URLs with window.open semantics and keeps the alert', () => {
    const { source, manager, notifier, opened } = setup();
    source.push(
      alert('a1', 'info', {
        actions: [{ id: 'open-url', label: 'Pricing', args: { url: 'https://example.com/p' } }]
      })
    );
    manager.click(notifier.notificationId('a1')!, 'Pricing');
    expect(opened).toEqual(['https://example.com/p']);
    expect(manager.list).toHaveLength(1);
  });

  it('offload: runs the command when installed, else says it is not available', () => {
    const { source, manager, notifier, commands } = setup();
    source.push(
      alert('a1', 'warning', {
        actions: [{ id: 'offload', label: 'Run as batch job', args: { cells: [3] } }]
      })
    );
    manager.click(notifier.notificationId('a1')!, 'Run as batch job');
    expect(manager.list.map(n => n.message)).toContain(OFFLOAD_UNAVAILABLE_TEXT);
    expect(manager.list.some(n => n.message.startsWith('GPU idle'))).toBe(true);
    commands.available.add(CommandIDs.offloadCells);
    manager.click(notifier.notificationId('a1')!, 'Run as batch job');
    expect(commands.executed).toEqual([
      [
        CommandIDs.offloadCells,
        { cells: [3], alertId: 'a1', notebook: 'explore.ipynb', kernelId: 'k-explore' }
      ]
    ]);
    expect(source.dismissed).toEqual([]);
  });

  it('stays quiet when disabled, without replaying old alerts when re-enabled', () => {
    const { source, manager, notifier } = setup({ enabled: false });
    source.push(alert('a1'));
    expect(manager.list).toHaveLength(0);
    notifier.enabled = true;
    source.push(alert('a1'));
    expect(manager.list).toHaveLength(0);
    source.push(alert('a1'), alert('a2'));
    expect(manager.list).toHaveLength(1);
    notifier.enabled = false;
    expect(manager.list).toHaveLength(0);
    expect(source.dismissed).toEqual([]);
  });

  it('reports a failed dismiss', async () => {
    const { source, manager, notifier } = setup();
    source.failDismiss = true;
    source.push(alert('a1'));
    manager.dismiss(notifier.notificationId('a1'));
    await flush();
    expect(manager.list.map(n => n.type)).toEqual(['error']);
    expect(manager.list[0].message).toContain('could not dismiss');
  });

  it('labels simulated alerts', () => {
    const { source, manager } = setup();
    source.alertsSimulated = true;
    source.push(alert('a1'));
    expect(manager.list[0].message.split('\n')[0]).toBe(
      `GPU idle (simulated) · as of ${formatClock(100)}`
    );
  });

  it('stops listening when disposed', () => {
    const { source, manager, notifier } = setup();
    notifier.dispose();
    source.push(alert('a1'));
    expect(manager.list).toHaveLength(0);
  });
});
