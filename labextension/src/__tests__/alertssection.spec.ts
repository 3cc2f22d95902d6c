/**
 * @jest-environment jsdom
 *
 * The cost panel's Alerts section: rows and their hooks, the actions (the
 * same as the notification's), "Show dismissed", the empty state, and
 * rendering only while shown.
 */
import type { NotificationManager } from '@jupyterlab/apputils';
import { Signal } from '@lumino/signaling';

import { OFFLOAD_UNAVAILABLE_TEXT } from '../alertactions';
import { AlertNotifier } from '../alertnotifier';
import { AlertsModel } from '../alertsmodel';
import { AlertsSection, NO_ALERTS_TEXT } from '../alertssection';
import type { IAlert, IAlertList } from '../api';
import { CommandIDs } from '../commands';
import { FakeFeed } from './fakefeed';
import { alert } from './fixtures';

/** The model with its include=all request answered from `all` (jsdom has no fetch). */
class CannedModel extends AlertsModel {
  all: IAlert[] = [];
  fetched = 0;

  protected fetch(): Promise<IAlertList> {
    this.fetched++;
    return Promise.resolve({
      simulated: false,
      currency: 'USD',
      time: 1000,
      alerts: this.all
    });
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

  hasCommand(id: string): boolean {
    return this.available.has(id);
  }

  execute(id: string, args?: any): Promise<any> {
    this.executed.push([id, args]);
    return Promise.resolve(true);
  }
}

const LONG =
  'explore.ipynb holds 6 GiB on GPU 0 and the GPU has been below 3% for 45 minutes, ' +
  'which wastes about USD 38.40 per hour; save your work and shut the kernel down, or ' +
  'offload the training cells to a batch job.';

const made: AlertsSection[] = [];

function setup(options: Partial<AlertsSection.IOptions> = {}) {
  const feed = new FakeFeed();
  const model = new CannedModel({ feed });
  const commands = new FakeCommands();
  const notes: [string, string][] = [];
  const opened: string[] = [];
  const section = new AlertsSection({
    model,
    commands,
    notifier: { notify: (message, type) => notes.push([message, type]) },
    openUrl: url => opened.push(url),
    now: () => 400,
    ...options
  });
  made.push(section);
  document.body.appendChild(section.node);
  section.setShown(true);
  const rows = () =>
    Array.from(section.node.querySelectorAll<HTMLElement>('.jp-costguard-alert-row'));
  const row = (id: string) =>
    section.node.querySelector<HTMLElement>(`.jp-costguard-alert-row[data-alert-id="${id}"]`);
  const buttons = (id: string) =>
    Array.from(row(id)?.querySelectorAll<HTMLButtonElement>('button[data-alert-action]') ?? []);
  const click = (id: string, action: string) =>
    buttons(id)
      .find(b => b.dataset.alertAction === action)!
      .dispatchEvent(new MouseEvent('click', { bubbles: true }));
  const toggle = section.node.querySelector<HTMLInputElement>(
    'input.jp-costguard-alerts-show-dismissed'
  )!;
  const setToggle = (checked: boolean) => {
    toggle.checked = checked;
    toggle.dispatchEvent(new Event('change', { bubbles: true }));
  };
  return { feed, model, commands, notes, opened, section, rows, row, buttons, click, setToggle };
}

async function until(condition: () => boolean, what = 'condition'): Promise<void> {
  for (let i = 0; i < 200 && !condition(); i++) {
    await new Promise(resolve => setTimeout(resolve, 5));
  }
  if (!condition()) {
    throw new Error(`timed out waiting for ${what}`);
  }
}

const flush = () => new Promise(resolve => setTimeout(resolve, 0));

afterEach(() => {
  made.splice(0).forEach(s => s.dispose());
});

describe('AlertsSection', () => {
  it('lists each alert with its severity, whole message, notebook and age', () => {
    const { feed, section, rows, row } = setup();
    feed.set(
      alert('a1', 'warning', { message: LONG, created: 100 }),
      alert('a2', 'critical', { notebook: null, created: 370, title: '' })
    );
    expect(section.node.classList).toContain('jp-costguard-alerts-section');
    expect(section.node.dataset.state).toBe('ok');
    expect(section.node.querySelector('.jp-costguard-alerts-title')!.textContent).toBe(
      'Alerts (2)'
    );
    expect(rows().map(r => r.dataset.alertId)).toEqual(['a2', 'a1']);
    const r1 = row('a1')!;
    expect(r1.dataset.state).toBe('active');
    expect(r1.dataset.severity).toBe('warning');
    const part = (r: HTMLElement, name: string) =>
      r.querySelector<HTMLElement>(`.jp-costguard-alert-${name}`)!;
    expect(part(r1, 'severity').textContent).toBe('warning');
    expect(part(r1, 'title').textContent).toBe('GPU idle');
    expect(part(r1, 'message').textContent).toBe(LONG); // whole, not cut
    expect(part(r1, 'notebook').textContent).toBe('explore.ipynb');
    expect(part(r1, 'age').textContent).toBe('5 min ago');
    expect(part(r1, 'state').hidden).toBe(true);
    const r2 = row('a2')!;
    expect(r2.dataset.severity).toBe('critical');
    expect(part(r2, 'title').textContent).toBe('idle-gpu'); // no title: the kind
    expect(part(r2, 'notebook').hidden).toBe(true);
    expect(part(r2, 'age').textContent).toBe('30 s ago');
  });

  it('says "No active alerts" when there are none, and "Loading…" before the first answer', () => {
    const { feed, section } = setup();
    const empty = section.node.querySelector<HTMLElement>('.jp-costguard-alerts-empty')!;
    feed.alertsState = 'loading';
    feed.set();
    expect(empty.hidden).toBe(false);
    expect(empty.textContent).toBe('Loading…');
    feed.alertsState = 'ok';
    feed.changed.emit();
    expect(empty.textContent).toBe(NO_ALERTS_TEXT);
    expect(section.node.querySelector('.jp-costguard-alerts-title')!.textContent).toBe(
      'Alerts (0)'
    );
    feed.set(alert('a1'));
    expect(empty.hidden).toBe(true);
  });

  it('offers the alert\'s actions as short one-line buttons', () => {
    const { feed, buttons } = setup({ snoozeSeconds: 900 });
    feed.set(alert('a1'));
    const shown = buttons('a1');
    expect(shown.map(b => b.textContent)).toEqual([
      'Details',
      'Shut down kernel',
      'Snooze 15 min',
      'Dismiss'
    ]);
    expect(shown.map(b => b.dataset.alertAction)).toEqual([
      'open-panel',
      'shutdown-kernel',
      'snooze',
      'dismiss'
    ]);
    expect(shown[1].classList).toContain('jp-mod-warn');
    expect(shown.every(b => b.title.startsWith('Costguard: '))).toBe(true);
  });

  it('dismisses and snoozes through the shared state; the row goes', async () => {
    const { feed, click, row } = setup();
    feed.set(alert('a1'), alert('a2'));
    click('a1', 'dismiss');
    click('a2', 'snooze');
    await flush();
    expect(feed.dismissed).toEqual(['a1']);
    expect(feed.snoozed).toEqual([['a2', 3600]]);
    expect(row('a1')).toBeNull();
    expect(row('a2')).toBeNull();
  });

  it('runs the other actions as commands, as the notification does', async () => {
    const { feed, click, commands, notes, opened } = setup();
    feed.set(
      alert('a1'),
      alert('a2', 'warning', {
        actions: [
          { id: 'offload', label: 'Offload' },
          { id: 'open-url', label: 'Pricing', args: { url: 'https://example.com/p' } }
        ]
      })
    );
    click('a1', 'open-panel');
    click('a1', 'shutdown-kernel');
    click('a2', 'offload');
    click('a2', 'open-url');
    await flush();
    expect(commands.executed).toEqual([
      [CommandIDs.openPanel, { path: 'explore.ipynb' }],
      [CommandIDs.shutdownKernel, { kernelId: 'k-explore', notebook: 'explore.ipynb' }]
    ]);
    expect(notes).toEqual([[OFFLOAD_UNAVAILABLE_TEXT, 'info']]);
    expect(opened).toEqual(['https://example.com/p']);
  });

  it('runs exactly what the notification\'s buttons run', async () => {
    const actions = [
      { id: 'open-panel', label: 'Details' },
      { id: 'restart-kernel', label: 'Restart', args: { kernel_id: 'k-other' } },
      { id: 'interrupt-kernel', label: 'Interrupt' },
      { id: 'offload', label: 'Offload', args: { cells: [3] } }
    ];
    const fromSection = setup();
    fromSection.commands.available.add(CommandIDs.offloadCells);
    fromSection.feed.set(alert('a1', 'warning', { actions }));
    for (const action of actions) {
      fromSection.click('a1', action.id);
    }
    await flush();

    const commands = new FakeCommands();
    commands.available.add(CommandIDs.offloadCells);
    const source = {
      alertsReceived: new Signal<any, ReadonlyArray<IAlert>>({}),
      alertsSimulated: false,
      dismissAlert: () => Promise.resolve(),
      snoozeAlert: () => Promise.resolve()
    };
    const manager = {
      changed: new Signal<any, any>({}),
      notify: () => 'n1',
      has: () => true,
      update: () => true,
      dismiss: () => undefined
    };
    const notifier = new AlertNotifier({
      source,
      manager: manager as unknown as NotificationManager,
      commands
    });
    for (const action of actions) {
      notifier.runAction(alert('a1', 'warning', { actions }), action);
    }
    await flush();
    expect(fromSection.commands.executed).toEqual(commands.executed);
    expect(commands.executed.map(([id]) => id)).toEqual([
      CommandIDs.openPanel,
      CommandIDs.restartKernel,
      CommandIDs.interruptKernel,
      CommandIDs.offloadCells
    ]);
    notifier.dispose();
  });

  it('"Show dismissed" lists dismissed, snoozed and resolved alerts, greyed, without buttons', async () => {
    const { feed, model, section, rows, row, buttons, setToggle } = setup();
    feed.set(alert('a1'));
    model.all = [
      alert('a1'),
      alert('d1', 'critical', { state: 'dismissed', updated: 300 }),
      alert('s1', 'info', { state: 'snoozed', snoozed_until: 4000, updated: 200 }),
      alert('r1', 'info', { resolved: 350, updated: 100 })
    ];
    setToggle(true);
    expect(model.showDismissed).toBe(true);
    await until(() => rows().length === 4, 'every alert');
    expect(rows().map(r => [r.dataset.alertId, r.dataset.state])).toEqual([
      ['a1', 'active'],
      ['d1', 'dismissed'],
      ['s1', 'snoozed'],
      ['r1', 'resolved']
    ]);
    for (const id of ['d1', 's1', 'r1']) {
      expect(row(id)!.classList).toContain('jp-mod-inactive');
      expect(buttons(id)).toHaveLength(0);
    }
    expect(row('a1')!.classList).not.toContain('jp-mod-inactive');
    expect(buttons('a1').length).toBeGreaterThan(0);
    expect(row('d1')!.querySelector('.jp-costguard-alert-state')!.textContent).toBe(
      'dismissed'
    );
    expect(row('s1')!.querySelector('.jp-costguard-alert-state')!.textContent).toMatch(
      /^snoozed until \d\d:\d\d$/
    );
    expect(section.node.querySelector('.jp-costguard-alerts-title')!.textContent).toBe(
      'Alerts (1)'
    );
    setToggle(false);
    expect(rows().map(r => r.dataset.alertId)).toEqual(['a1']);
  });

  it('renders and polls only while the panel is shown', async () => {
    const { feed, model, section, rows, setToggle } = setup();
    section.setShown(false);
    feed.set(alert('a1'));
    expect(rows()).toHaveLength(0);
    setToggle(true);
    await flush();
    expect(model.fetched).toBe(0);
    section.setShown(true);
    expect(rows()).toHaveLength(1);
    await until(() => model.fetched === 1, 'the include=all poll');
    section.setShown(false);
    expect(model.isRunning).toBe(false);
  });

  it('says the new snooze time when the setting changes', () => {
    const { feed, section, buttons } = setup();
    feed.set(alert('a1'));
    section.snoozeSeconds = 2 * 3600;
    expect(buttons('a1').find(b => b.dataset.alertAction === 'snooze')!.textContent).toBe(
      'Snooze 2 h'
    );
  });
});
