import { CostStatusModel, sameSample } from '../statusmodel';
import { FakeServer } from './fakeserver';
import { alert, budgetStatus, gpus, groupBudget, hubBudget, kernel, notebook, status } from './fixtures';

function server(): FakeServer {
  const s = new FakeServer();
  s.routes['GET status'] = () => ({ body: status });
  s.routes['GET notebooks'] = () => ({
    body: {
      simulated: true,
      currency: 'USD',
      time: status.time, // one sample with status
      notebooks: [
        notebook('train.ipynb', 5, { kernel_ids: ['k-train'] }),
        notebook('explore.ipynb', 1, { kernel_ids: ['k-explore'] })
      ]
    }
  });
  s.routes['GET alerts'] = () => ({
    body: {
      simulated: true,
      currency: 'USD',
      time: 1,
      alerts: [alert('a1', 'warning'), alert('a2', 'critical', { notebook: 'train.ipynb', kernel_id: 'k-train' })]
    }
  });
  s.routes['POST alerts/a1/dismiss'] = () => ({ body: { ok: true } });
  s.routes['POST alerts/a1/snooze'] = () => ({ body: { ok: true } });
  return s;
}

function snapshotList(wasteAvoided: number) {
  return {
    snapshots: [],
    currency: 'USD',
    waste_avoided: wasteAvoided,
    storage_price: null,
    storage_cost: null,
    storage_cost_per_month: null
  };
}

const made: CostStatusModel[] = [];

function model(s: FakeServer): CostStatusModel {
  const m = new CostStatusModel({ serverSettings: s.settings(), autoStart: false });
  made.push(m);
  return m;
}

afterEach(() => {
  // Disposing stops the polls (and their timers) even when a test failed.
  made.splice(0).forEach(m => m.dispose());
});

describe('CostStatusModel', () => {
  it('fetches status and notebooks in one refresh', async () => {
    const s = server();
    const m = model(s);
    let changes = 0;
    m.changed.connect(() => changes++);
    await m.refresh();
    expect(s.requests.map(r => `${r.method} ${r.path}`).sort()).toEqual([
      'GET notebooks',
      'GET status'
    ]);
    expect(m.state).toBe('ok');
    expect(m.status?.rate_per_hour).toBe(32.77);
    expect(m.notebooks.map(n => n.path)).toEqual(['train.ipynb', 'explore.ipynb']);
    expect(m.notebooksSimulated).toBe(true);
    expect(changes).toBe(1);
    m.dispose();
  });

  it('fetches kernels, gpus and snapshots in the same refresh while asked for', async () => {
    const s = server();
    s.routes['GET kernels'] = () => ({
      body: { simulated: true, currency: 'USD', time: status.time, kernels: [kernel('k-train', 'train.ipynb', 4)] }
    });
    s.routes['GET gpus'] = () => ({ body: { ...gpus, time: status.time } });
    s.routes['GET snapshots'] = () => ({ body: snapshotList(12.4) });
    const m = model(s);
    const panel = {};
    m.requestDetail(panel, true);
    expect(m.detailRequested).toBe(true);
    let changes = 0;
    m.changed.connect(() => changes++);
    await m.refresh();
    expect(s.requests.map(r => r.path).sort()).toEqual(['gpus', 'kernels', 'notebooks', 'snapshots', 'status']);
    expect(m.kernelList?.kernels.map(k => k.kernel_id)).toEqual(['k-train']);
    expect(m.snapshotList?.waste_avoided).toBe(12.4);
    expect(m.gpuList?.gpus.length).toBe(gpus.gpus.length);
    expect(changes).toBe(1); // one answer, one render of every table
    m.requestDetail(panel, false);
    s.requests.length = 0;
    await m.refresh();
    expect(s.requests.map(r => r.path).sort()).toEqual(['notebooks', 'status']);
    // The last answer stays until asked again (no empty flash on the next show).
    expect(m.kernelList?.kernels.length).toBe(1);
  });

  it('leaves the waste removed unknown, and the rest shown, without hibernation', async () => {
    const s = server();
    s.routes['GET kernels'] = () => ({
      body: { simulated: true, currency: 'USD', time: status.time, kernels: [] }
    });
    s.routes['GET gpus'] = () => ({ body: { ...gpus, time: status.time } });
    // no `GET snapshots` route: the server answers 404
    const m = model(s);
    m.requestDetail({}, true);
    await m.refresh();
    expect(m.state).toBe('ok');
    expect(m.snapshotList).toBeNull();
    expect(m.kernelList?.kernels).toEqual([]);
  });

  it('asks again once when the documents straddle a new sample', async () => {
    const s = server();
    let sample = 1;
    s.routes['GET status'] = () => ({ body: { ...status, time: sample } });
    s.routes['GET kernels'] = () => {
      // The server takes a new sample between `status` and `kernels`.
      const body = { simulated: true, currency: 'USD', time: ++sample, kernels: [] };
      return { body };
    };
    s.routes['GET gpus'] = () => ({ body: { ...gpus, time: sample } });
    s.routes['GET notebooks'] = () => ({
      body: { simulated: true, currency: 'USD', time: sample, notebooks: [] }
    });
    const m = model(s);
    m.requestDetail({}, true);
    sample = 1;
    await m.refresh();
    expect(s.requests.filter(r => r.path === 'kernels')).toHaveLength(2);
    // Never more than one retry: a server sampling faster than we ask still answers.
    expect(s.requests.filter(r => r.path === 'status')).toHaveLength(2);
  });

  it('tells documents of one sample', () => {
    expect(sameSample([{ time: 3 }, { time: 3 }, undefined, { time: null }])).toBe(true);
    expect(sameSample([{ time: 3 }, { time: 4 }])).toBe(false);
    expect(sameSample([])).toBe(true);
  });

  it('reads hub_budgets and gpu_activity, [] and null from an older server', async () => {
    const s = server();
    const m = model(s);
    expect(m.hubBudgets).toEqual([]);
    expect(m.gpuActivity).toBeNull();
    await m.refresh();
    expect(m.hubBudgets).toEqual([]);
    expect(m.gpuActivity).toBeNull();
    const gpuActivity = { gpus_held: 1, gpus_busy: 0, idle_since: 1764460000 };
    s.routes['GET status'] = () => ({
      body: { ...budgetStatus([groupBudget(), hubBudget()]), gpu_activity: gpuActivity }
    });
    await m.refresh();
    expect(m.hubBudgets).toEqual([hubBudget(), groupBudget()]);
    // a server from before gpus_unknown: none counted
    expect(m.gpuActivity).toEqual({ ...gpuActivity, gpus_unknown: 0 });
    m.dispose();
  });

  it("selects the active notebook's document", async () => {
    const s = server();
    const m = model(s);
    await m.refresh();
    expect(m.activeNotebook).toBeNull();
    m.activePath = '/explore.ipynb';
    expect(m.activePath).toBe('explore.ipynb');
    expect(m.activeNotebook?.doc?.spend).toBe(1);
    m.activePath = 'new.ipynb';
    expect(m.activeNotebook).toEqual({ path: 'new.ipynb', doc: null });
    m.activePath = null;
    expect(m.activeNotebook).toBeNull();
    m.dispose();
  });

  it('goes offline when the server cannot be reached, and rethrows', async () => {
    const s = server();
    s.routes['GET status'] = () => 'network-error';
    const m = model(s);
    await expect(m.refresh()).rejects.toBeTruthy();
    expect(m.state).toBe('offline');
    expect(m.error).toBeTruthy();
    m.dispose();
  });

  it('collects alerts and the active notebook severity', async () => {
    const s = server();
    const m = model(s);
    const received: string[][] = [];
    m.alertsReceived.connect((_, alerts) => received.push(alerts.map(a => a.id)));
    await m.refresh();
    await m.refreshAlerts();
    expect(m.alertsState).toBe('ok');
    expect(received).toEqual([['a1', 'a2']]);
    m.activePath = 'explore.ipynb';
    expect(m.activeAlerts.map(a => a.id)).toEqual(['a1']);
    expect(m.activeSeverity).toBe('warning');
    m.activePath = 'train.ipynb';
    expect(m.activeSeverity).toBe('critical');
    m.dispose();
  });

  it('marks alerts unavailable on a server without the route', async () => {
    const s = server();
    delete s.routes['GET alerts'];
    const m = model(s);
    await expect(m.refreshAlerts()).rejects.toBeTruthy();
    expect(m.alertsState).toBe('unavailable');
    expect(m.alerts).toEqual([]);
    m.dispose();
  });

  it('dismisses: POST, gone at once, and stays gone while the server catches up', async () => {
    const s = server();
    const m = model(s);
    await m.refreshAlerts();
    await m.dismissAlert('a1');
    const post = s.requests.find(r => r.method === 'POST');
    expect(post?.path).toBe('alerts/a1/dismiss');
    expect(m.alerts.map(a => a.id)).toEqual(['a2']);
    // The server still lists it (a poll that was in flight): still hidden.
    await m.refreshAlerts();
    expect(m.alerts.map(a => a.id)).toEqual(['a2']);
    m.dispose();
  });

  it('snoozes with the number of seconds', async () => {
    const s = server();
    const m = model(s);
    await m.refreshAlerts();
    await m.snoozeAlert('a1', 3600);
    const post = s.requests.find(r => r.method === 'POST');
    expect(post?.path).toBe('alerts/a1/snooze');
    expect(JSON.parse(post!.body)).toEqual({ seconds: 3600 });
    m.dispose();
  });

  it('puts an alert back when the dismiss fails', async () => {
    const s = server();
    s.routes['POST alerts/a1/dismiss'] = () => ({ status: 500, body: { message: 'no' } });
    const m = model(s);
    await m.refreshAlerts();
    await expect(m.dismissAlert('a1')).rejects.toBeTruthy();
    await m.refreshAlerts();
    expect(m.alerts.map(a => a.id)).toEqual(['a1', 'a2']);
    m.dispose();
  });

  it('only ever calls costguard routes', async () => {
    const s = server();
    const m = model(s);
    await m.refresh();
    await m.refreshAlerts();
    await m.snoozeAlert('a1', 60);
    for (const r of s.requests) {
      expect(r.path).toMatch(/^(status|notebooks|alerts)/);
    }
    m.dispose();
  });

  it('clamps the refresh interval and applies it to both polls', () => {
    const s = server();
    const m = model(s);
    m.refreshInterval = 0.1;
    expect(m.refreshInterval).toBe(1);
    expect(m.poll.frequency.interval).toBe(1000);
    expect(m.alertsPoll.frequency.interval).toBe(1000);
    m.refreshInterval = 5;
    expect(m.poll.frequency.interval).toBe(5000);
    expect(m.poll.standby).toBe('when-hidden');
    expect(m.alertsPoll.standby).toBe('when-hidden');
    expect(m.poll.frequency.backoff).toBe(true);
    m.dispose();
  });
});
