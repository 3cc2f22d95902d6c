/**
 * The Alerts section's model: the shared active list without a poll of its
 * own; `GET alerts?include=all` only while shown with "Show dismissed" on.
 */
import type { IAlert } from '../api';
import { alertsEndpoint } from '../api';
import { AlertsModel, alertRowState, sortAlerts } from '../alertsmodel';
import { FakeFeed } from './fakefeed';
import { FakeServer } from './fakeserver';
import { alert } from './fixtures';

const made: AlertsModel[] = [];

function setup() {
  const server = new FakeServer();
  let all: IAlert[] = [
    alert('a1', 'warning'),
    alert('d1', 'critical', { state: 'dismissed', updated: 150 }),
    alert('r1', 'info', { resolved: 300, updated: 300 })
  ];
  server.routes['GET alerts'] = req =>
    req.path === 'alerts?include=all'
      ? { body: { simulated: true, currency: 'USD', time: 400, alerts: all } }
      : { status: 400, body: { message: `unexpected ${req.path}` } };
  const feed = new FakeFeed(server);
  const model = new AlertsModel({ feed });
  made.push(model);
  return {
    server,
    feed,
    model,
    setAll: (alerts: IAlert[]) => {
      all = alerts;
    }
  };
}

async function until(condition: () => boolean, what = 'condition'): Promise<void> {
  for (let i = 0; i < 200 && !condition(); i++) {
    await new Promise(resolve => setTimeout(resolve, 5));
  }
  if (!condition()) {
    throw new Error(`timed out waiting for ${what}`);
  }
}

const flush = () => new Promise(resolve => setTimeout(resolve, 20));

afterEach(() => {
  made.splice(0).forEach(m => m.dispose());
});

describe('alert rows', () => {
  it('names the state: resolved once its condition ended, else the server\'s', () => {
    expect(alertRowState(alert('a'))).toBe('active');
    expect(alertRowState(alert('a', 'info', { state: 'dismissed' }))).toBe('dismissed');
    expect(alertRowState(alert('a', 'info', { state: 'snoozed' }))).toBe('snoozed');
    expect(alertRowState(alert('a', 'info', { state: 'dismissed', resolved: 5 }))).toBe(
      'resolved'
    );
    expect(alertRowState(alert('a', 'info', { state: 'odd' }))).toBe('active');
  });

  it('puts active alerts first, most severe first, then the others newest first', () => {
    const rows = sortAlerts([
      alert('old', 'critical', { state: 'dismissed', updated: 10 }),
      alert('info', 'info'),
      alert('new', 'info', { state: 'snoozed', updated: 20 }),
      alert('crit', 'critical')
    ]);
    expect(rows.map(a => a.id)).toEqual(['crit', 'info', 'new', 'old']);
  });

  it('asks for every alert with include=all', () => {
    expect(alertsEndpoint(null, 'all')).toBe('alerts?include=all');
    expect(alertsEndpoint('a b.ipynb', 'all')).toBe('alerts?notebook=a%20b.ipynb&include=all');
    expect(alertsEndpoint()).toBe('alerts');
  });
});

describe('AlertsModel', () => {
  it('lists the shared active alerts without a request of its own', async () => {
    const { server, feed, model } = setup();
    let changes = 0;
    model.changed.connect(() => changes++);
    model.shown = true;
    feed.set(alert('a1', 'info'), alert('a2', 'critical'));
    expect(model.alerts.map(a => a.id)).toEqual(['a2', 'a1']);
    expect(model.activeCount).toBe(2);
    expect(model.listState).toBe('ok');
    // The shared poll brings the same list again: nothing to redraw.
    feed.set(alert('a1', 'info'), alert('a2', 'critical'));
    expect(changes).toBe(1);
    await flush();
    expect(server.requests).toHaveLength(0);
    expect(model.isRunning).toBe(false);
  });

  it('follows the feed\'s state', () => {
    const { feed, model } = setup();
    feed.alertsState = 'loading';
    expect(model.listState).toBe('loading');
    feed.alertsState = 'unavailable';
    expect(model.listState).toBe('unavailable');
    feed.alertsState = 'error';
    expect(model.listState).toBe('offline');
  });

  it('polls include=all only while shown with "Show dismissed" on', async () => {
    const { server, feed, model } = setup();
    feed.set(alert('a1'));
    model.showDismissed = true;
    await flush();
    expect(server.requests).toHaveLength(0); // not shown: no poll
    model.shown = true;
    await until(() => model.alerts.length === 3, 'include=all');
    expect(server.count('GET', 'alerts?include=all')).toBe(1);
    expect(model.alerts.map(a => [a.id, alertRowState(a)])).toEqual([
      ['a1', 'active'],
      ['r1', 'resolved'],
      ['d1', 'dismissed']
    ]);
    expect(model.activeCount).toBe(1);
    expect(model.simulated).toBe(true);
    model.shown = false;
    expect(model.isRunning).toBe(false);
    model.shown = true;
    expect(model.isRunning).toBe(true);
    model.showDismissed = false;
    expect(model.isRunning).toBe(false);
    expect(model.alerts.map(a => a.id)).toEqual(['a1']);
    expect(model.simulated).toBe(false);
  });

  it('dismisses through the feed, then shows the server\'s new state', async () => {
    const { server, feed, model, setAll } = setup();
    feed.set(alert('a1'));
    model.shown = true;
    model.showDismissed = true;
    await until(() => model.alerts.length === 3, 'include=all');
    setAll([
      alert('a1', 'warning', { state: 'dismissed', updated: 500 }),
      alert('d1', 'critical', { state: 'dismissed', updated: 150 }),
      alert('r1', 'info', { resolved: 300, updated: 300 })
    ]);
    const before = server.count('GET', 'alerts?include=all');
    await model.dismiss('a1');
    expect(feed.dismissed).toEqual(['a1']);
    // Hidden at once (the feed no longer lists it active) ...
    expect(model.alerts.map(a => a.id)).not.toContain('a1');
    // ... then back, dismissed, from the next include=all.
    await until(
      () => model.alerts.some(a => a.id === 'a1' && a.state === 'dismissed'),
      'the dismissed alert'
    );
    expect(server.count('GET', 'alerts?include=all')).toBeGreaterThan(before);
    expect(model.activeCount).toBe(0);
  });

  it('snoozes through the feed for the given time', async () => {
    const { feed, model } = setup();
    feed.set(alert('a1'));
    await model.snooze('a1', 900);
    expect(feed.snoozed).toEqual([['a1', 900]]);
    expect(model.alerts).toHaveLength(0);
  });

  it('says when the include=all request fails', async () => {
    const { server, model } = setup();
    server.routes['GET alerts'] = () => 'network-error';
    model.shown = true;
    model.showDismissed = true;
    await until(() => model.state === 'offline', 'offline');
    expect(model.listState).toBe('offline');
    server.routes['GET alerts'] = () => ({ status: 404, body: { message: 'no' } });
    await model.refresh().catch(() => undefined);
    expect(model.listState).toBe('unavailable');
  });
});
