import { Signal } from '@lumino/signaling';

import { historyEndpoint } from '../api';
import { CHART_REFRESH_SECONDS, FOLLOW_GAP_SECONDS, SpendChartModel } from '../spendchartmodel';
import { FakeServer, IRecorded } from './fakeserver';
import { historyDoc } from './spendchartfixtures';

/** A server answering `GET history` for the window and notebook asked. */
function server(): FakeServer {
  const s = new FakeServer();
  s.routes['GET history'] = (req: IRecorded) => {
    const query = new URLSearchParams(req.path.split('?')[1] ?? '');
    const minutes = Number(query.get('minutes'));
    const notebook = query.get('notebook');
    if (notebook === 'nowhere.ipynb') {
      return { status: 404, body: { message: "no costs recorded for notebook 'nowhere.ipynb'" } };
    }
    return {
      body: historyDoc({
        minutes,
        notebook,
        notebooks: { 'a.ipynb': { spend: [0.2, 0.2, 0.2, 0.2] }, 'b.ipynb': { spend: [0.1, 0, 0, 0] } }
      })
    };
  };
  return s;
}

const made: SpendChartModel[] = [];

function model(s: FakeServer, options: SpendChartModel.IOptions = {}): SpendChartModel {
  const m = new SpendChartModel({ serverSettings: s.settings(), ...options });
  made.push(m);
  return m;
}

afterEach(() => {
  made.splice(0).forEach(m => m.dispose());
});

describe('historyEndpoint', () => {
  it('asks for the window and, when given, one notebook (encoded)', () => {
    expect(historyEndpoint(360)).toBe('history?minutes=360');
    expect(historyEndpoint(1440, 'work/a b.ipynb')).toBe(
      'history?minutes=1440&notebook=work%2Fa%20b.ipynb'
    );
    expect(historyEndpoint(60, null)).toBe('history?minutes=60');
    expect(historyEndpoint(360, 'a.ipynb', true)).toBe('history?minutes=360&notebook=a.ipynb&fit=true');
  });
});

describe('SpendChartModel', () => {
  it('is idle until shown, then fetches six hours of every notebook', async () => {
    const s = server();
    const m = model(s);
    expect(m.state).toBe('idle');
    expect(m.interval).toBe(CHART_REFRESH_SECONDS);
    expect(CHART_REFRESH_SECONDS).toBe(60);
    await m.refresh();
    expect(s.requests.map(r => r.path)).toEqual(['history?minutes=360&fit=true']);
    expect(m.state).toBe('ok');
    expect(m.data?.series.map(x => x.path)).toEqual(['a.ipynb', 'b.ipynb', null]);
    expect(m.notebooks).toEqual(['a.ipynb', 'b.ipynb']);
  });

  it('polls only while active', async () => {
    const s = server();
    const m = model(s);
    m.active = true;
    expect(m.isRunning).toBe(true);
    await m.poll.tick;
    await new Promise(resolve => setTimeout(resolve, 20));
    expect(s.count('GET', 'history?minutes=360&fit=true')).toBe(1);
    m.active = false;
    expect(m.isRunning).toBe(false);
    expect(m.active).toBe(false);
  });

  it('asks again at once when the window or the notebook changes', async () => {
    const s = server();
    const m = model(s);
    let changes = 0;
    m.changed.connect(() => changes++);
    m.active = true;
    await new Promise(resolve => setTimeout(resolve, 20));
    m.minutes = 1440;
    expect(m.data).toBeNull(); // the old answer is not for this window
    await new Promise(resolve => setTimeout(resolve, 20));
    expect(m.data?.minutes).toBe(1440);
    m.notebook = 'a.ipynb';
    await new Promise(resolve => setTimeout(resolve, 20));
    expect(s.requests.map(r => r.path)).toEqual([
      'history?minutes=360&fit=true',
      'history?minutes=1440&fit=true',
      'history?minutes=1440&notebook=a.ipynb&fit=true'
    ]);
    expect(m.data?.notebook).toBe('a.ipynb');
    expect(m.data?.series.map(x => x.path)).toEqual(['a.ipynb']);
    // the selector keeps every notebook of the window
    expect(m.notebooks).toEqual(['a.ipynb', 'b.ipynb']);
    m.notebook = '';
    expect(m.notebook).toBeNull();
    expect(changes).toBeGreaterThanOrEqual(5);
  });

  it('drops an answer to an earlier question', async () => {
    const s = server();
    const m = model(s);
    const pending = m.refresh();
    m.minutes = 10080; // while the first request is in flight (not running: no new fetch)
    await pending;
    expect(m.data).toBeNull();
    await m.refresh();
    expect(m.data?.minutes).toBe(10080);
  });

  it('says unavailable on a 404 and offline when the server is gone', async () => {
    const s = server();
    const m = model(s, { notebook: 'nowhere.ipynb' });
    expect(m.notebooks).toEqual(['nowhere.ipynb']);
    await expect(m.refresh()).rejects.toBeTruthy();
    expect(m.state).toBe('unavailable');
    expect(m.data).toBeNull();
    s.routes['GET history'] = () => 'network-error';
    m.notebook = 'a.ipynb';
    await expect(m.refresh()).rejects.toBeTruthy();
    expect(m.state).toBe('offline');
  });

  it('fits the window unless told not to', async () => {
    const s = server();
    await model(s, { fit: false }).refresh();
    expect(s.requests.map(r => r.path)).toEqual(['history?minutes=360']);
  });
});

/** A model the chart follows, as the shared status model: `changed`, and its sample's time. */
class Source {
  readonly changed = new Signal<this, void>(this);
  status: { time: number } | null = null;
  sample(time: number): void {
    this.status = { time };
    this.changed.emit();
  }
}

const settle = () => new Promise(resolve => setTimeout(resolve, 20));

describe('SpendChartModel following the totals', () => {
  it('asks again with each new sample while shown, and nothing while hidden', async () => {
    const s = server();
    const source = new Source();
    const m = model(s, { follow: source });
    const asked = () => s.count('GET', 'history?minutes=360&fit=true');
    source.sample(1);
    await settle();
    expect(asked()).toBe(0); // not shown yet
    m.active = true;
    await settle();
    expect(asked()).toBe(1);
    source.sample(2);
    await settle();
    expect(asked()).toBe(2);
    source.changed.emit(); // the same sample (alerts, the active notebook…): not again
    await settle();
    expect(asked()).toBe(2);
    source.sample(3);
    await settle();
    expect(asked()).toBe(3);
    expect(m.interval).toBe(CHART_REFRESH_SECONDS); // its own poll only fills gaps
    m.active = false;
    source.sample(4);
    source.sample(5);
    await settle();
    expect(asked()).toBe(3);
    m.dispose();
    source.sample(6);
    await settle();
    expect(asked()).toBe(3);
  });

  it('follows windows of coarser buckets at most every FOLLOW_GAP_SECONDS', async () => {
    const s = server();
    s.routes['GET history'] = () => ({
      body: historyDoc({ minutes: 1440, bucket: 300, notebooks: { 'a.ipynb': { spend: [1, 1, 1, 1] } } })
    });
    const source = new Source();
    let now = 1_000_000;
    const clock = jest.spyOn(Date, 'now').mockImplementation(() => now);
    try {
      const m = model(s, { follow: source, minutes: 1440 });
      m.active = true;
      await settle();
      expect(s.requests).toHaveLength(1);
      expect(FOLLOW_GAP_SECONDS[300]).toBe(30);
      now += 10_000;
      source.sample(1);
      await settle();
      expect(s.requests).toHaveLength(1); // 10 s after the last question
      now += 25_000;
      source.sample(2);
      await settle();
      expect(s.requests).toHaveLength(2);
    } finally {
      clock.mockRestore();
    }
  });
});
