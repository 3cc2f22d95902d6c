import {
  areaPath,
  bandsOf,
  NotebookColors,
  bandTitle,
  bucketAt,
  bucketLines,
  bucketSeconds,
  chartGeometry,
  DEFAULT_LAYOUT,
  formatClock,
  formatDay,
  formatRateTick,
  formatTimeTick,
  MIN_PARTIAL_SECONDS,
  rangeOf,
  summaryLine,
  timeTicks,
  windowPhrase
} from '../spendchart';
import { niceStep, niceTicks } from '../chartscale';
import { historyDoc, T0 } from './spendchartfixtures';

/** Every number of an SVG path, as [x, y] pairs. */
function points(d: string): [number, number][] {
  return (d.match(/-?[\d.]+,-?[\d.]+/g) ?? []).map(pair => {
    const [x, y] = pair.split(',');
    return [parseFloat(x), parseFloat(y)];
  });
}

describe('NotebookColors', () => {
  it('keeps a notebook\'s colour for the life of the chart, whatever its rank', () => {
    const colors = new NotebookColors(3);
    expect(colors.assign(['a', 'b'])).toEqual([0, 1]);
    expect(colors.assign(['b', 'a'])).toEqual([1, 0]);
    // a newcomer takes a colour no notebook had; b leaves and comes back with its own
    expect(colors.assign(['c', 'a'])).toEqual([2, 0]);
    expect(colors.assign(['a', 'b', 'c'])).toEqual([0, 1, 2]);
  });

  it('gives a newcomer the colour drawn longest ago once the palette is used up', () => {
    const colors = new NotebookColors(3);
    colors.assign(['a', 'b', 'c']);
    colors.assign(['b', 'c']);
    // a was drawn longest ago: d takes its colour, and a, back, takes another free one
    expect(colors.assign(['d', 'b', 'c'])).toEqual([0, 1, 2]);
    const back = colors.assign(['a', 'd']);
    expect(back[1]).toBe(0);
    expect(back[0]).not.toBe(0);
    // never two bands of one colour
    for (const paths of [['a', 'b', 'c'], ['c', 'd', 'a'], ['e', 'f', 'a']]) {
      expect(new Set(colors.assign(paths)).size).toBe(paths.length);
    }
  });
});

describe('bandsOf', () => {
  it('stacks the notebooks most spent first, then what no notebook spent', () => {
    const doc = historyDoc({
      server: 1,
      notebooks: {
        'small.ipynb': { spend: [0.1, 0.1, 0, 0] },
        'big.ipynb': { spend: [0.5, 0.5, 0.5, 0.5], waste: [0.4, 0, 0, 0] }
      }
    });
    const bands = bandsOf(doc);
    expect(bands.map(b => b.key)).toEqual(['big.ipynb', 'small.ipynb', 'unattributed']);
    expect(bands.map(b => b.kind)).toEqual(['notebook', 'notebook', 'unattributed']);
    expect(bands[0].color).toBe(0);
    expect(bands[1].color).toBe(1);
    expect(bands[2].label).toBe('Unattributed');
    // conservation: the stack is the server's spend in every bucket
    for (let i = 0; i < 4; i++) {
      expect(bands.reduce((a, b) => a + b.spend[i], 0)).toBeCloseTo(doc.total.spend[i], 9);
    }
    expect(bands[0].totalSpend).toBe(2);
    expect(bands[0].totalWaste).toBeCloseTo(0.4);
  });

  it('merges the notebooks beyond the limit into "Other notebooks"', () => {
    const notebooks: { [p: string]: { spend: number[] } } = {};
    for (let i = 1; i <= 8; i++) {
      notebooks[`nb${i}.ipynb`] = { spend: [i / 100, 0, 0, 0] };
    }
    const doc = historyDoc({ server: 1, notebooks });
    const bands = bandsOf(doc, 6);
    expect(bands.map(b => b.kind)).toEqual([
      'notebook',
      'notebook',
      'notebook',
      'notebook',
      'notebook',
      'other',
      'unattributed'
    ]);
    const other = bands[5];
    expect(other.label).toBe('Other notebooks (3)');
    expect(other.paths).toEqual(['nb3.ipynb', 'nb2.ipynb', 'nb1.ipynb']);
    expect(other.spend[0]).toBeCloseTo(0.06);
    expect(other.path).toBeNull();
    expect(bands.reduce((a, b) => a + b.spend[0], 0)).toBeCloseTo(1);
  });

  it('leaves out notebooks that spent nothing, but keeps the one asked for', () => {
    const doc = historyDoc({
      notebooks: { 'a.ipynb': { spend: [0.2, 0, 0, 0] }, 'idle.ipynb': { spend: [0, 0, 0, 0] } }
    });
    expect(bandsOf(doc).map(b => b.key)).toEqual(['a.ipynb', 'unattributed']);
    const one = historyDoc({
      notebooks: { 'idle.ipynb': { spend: [0, 0, 0, 0] } },
      notebook: 'idle.ipynb'
    });
    expect(bandsOf(one).map(b => b.key)).toEqual(['idle.ipynb']);
  });

  it('reads bad figures as nothing and never draws more waste than spend', () => {
    const doc = historyDoc({ notebooks: { 'a.ipynb': { spend: [1, 1, 1, 1] } } });
    doc.series[0].spend = [1, NaN, -1, null as unknown as number];
    doc.series[0].waste = [2, 0, 0, 0];
    const [a] = bandsOf(doc);
    expect(a.spend).toEqual([1, 0, 0, 0]);
    expect(a.waste).toEqual([1, 0, 0, 0]);
    expect(bandsOf(null)).toEqual([]);
    expect(bandsOf({} as never)).toEqual([]);
  });
});

describe('axes', () => {
  it('picks nice rate steps and ticks that cover the peak', () => {
    expect(niceStep(36, 4)).toBe(10);
    expect(niceStep(8, 4)).toBe(2);
    expect(niceStep(0.09, 4)).toBeCloseTo(0.025);
    expect(niceStep(0)).toBe(1);
    expect(niceTicks(36)).toEqual([0, 10, 20, 30, 40]);
    expect(niceTicks(40)).toEqual([0, 10, 20, 30, 40]);
    expect(niceTicks(0.09)).toEqual([0, 0.025, 0.05, 0.075, 0.1]);
    expect(formatRateTick(0)).toBe('0/h');
    expect(formatRateTick(40)).toBe('40/h');
    expect(formatRateTick(2.5)).toBe('2.5/h');
    expect(formatRateTick(0.025)).toBe('0.025/h');
  });

  it('puts time ticks on round local times, at most five', () => {
    const start = T0 + 17 * 60;
    const ticks = timeTicks(start, start + 6 * 3600);
    expect(ticks.length).toBeGreaterThanOrEqual(2);
    expect(ticks.length).toBeLessThanOrEqual(5);
    const step = ticks[1] - ticks[0];
    expect([3600, 2 * 3600, 3 * 3600]).toContain(step);
    for (const t of ticks) {
      expect(t).toBeGreaterThanOrEqual(start);
      const d = new Date(t * 1000);
      expect(d.getMinutes()).toBe(0);
      expect(d.getHours() % (step / 3600)).toBe(0);
    }
    const week = timeTicks(T0, T0 + 7 * 86400);
    expect(week[1] - week[0]).toBe(2 * 86400);
    expect(formatTimeTick(week[0], 2 * 86400)).toMatch(/^(Sun|Mon|Tue|Wed|Thu|Fri|Sat) \d{1,2}$/);
    expect(formatTimeTick(ticks[0], step)).toMatch(/^(\d\d:00|\w{3} \d{1,2})$/);
    expect(timeTicks(10, 5)).toEqual([]);
  });
});

describe('chartGeometry', () => {
  const doc = historyDoc({
    n: 4,
    bucket: 60,
    server: 0.6, // USD 36/h
    notebooks: { 'a.ipynb': { spend: [0.3, 0.3, 0.15, 0.15], waste: [0.3, 0, 0, 0] } },
    time: T0 + 4 * 60 // the last bucket is complete
  });

  it('stacks the bands as rates from the bottom of the plot', () => {
    const g = chartGeometry(doc, bandsOf(doc));
    const { plot } = g;
    expect(plot).toEqual({ x: 46, y: 8, w: 246, h: 124 });
    expect(g.maxRate).toBe(40);
    expect(g.yTicks.map(t => t.label)).toEqual(['0/h', '10/h', '20/h', '30/h', '40/h']);
    expect(g.yTicks[0].pos).toBe(plot.y + plot.h);
    expect(g.yTicks[4].pos).toBe(plot.y);
    expect(g.xs[0]).toBe(plot.x);
    expect(g.xs[3]).toBe(plot.x + plot.w);
    const [a, rest] = g.shapes;
    expect(a.band.key).toBe('a.ipynb');
    // a.ipynb: 18/h then 9/h, from the bottom (y = 132) up
    const ya = (rate: number) => plot.y + plot.h - (rate / 40) * plot.h;
    const pa = points(a.area);
    expect(pa).toHaveLength(8);
    expect(pa[0][1]).toBeCloseTo(ya(18), 1);
    expect(pa[3][1]).toBeCloseTo(ya(9), 1);
    expect(pa[4][1]).toBeCloseTo(ya(0), 1);
    // the rest sits on it and tops out at the server's 36/h
    const pr = points(rest.area);
    expect(pr[0][1]).toBeCloseTo(ya(36), 1);
    expect(pr[7][1]).toBeCloseTo(ya(18), 1);
    // a's waste: its top 18/h in the first bucket, nothing after
    const pw = points(a.wasteArea);
    expect(pw[0][1]).toBeCloseTo(ya(18), 1);
    expect(pw[7][1]).toBeCloseTo(ya(0), 1);
    expect(pw[6][1]).toBeCloseTo(ya(18), 1);
    expect(rest.wasteArea).toBe('');
    expect(g.empty).toBe(false);
  });

  it('divides the bucket still filling by the time elapsed in it', () => {
    expect(bucketSeconds([T0, T0 + 60], 60, T0 + 60 + 0.2)).toEqual([60, MIN_PARTIAL_SECONDS]);
    expect(bucketSeconds([T0, T0 + 60], 60, T0 + 60 + 15)).toEqual([60, 15]);
    expect(bucketSeconds([T0, T0 + 60], 60, T0 + 60 + 45)).toEqual([60, 45]);
    expect(bucketSeconds([T0, T0 + 60], 60, null)).toEqual([60, 60]);
    const filling = historyDoc({ n: 2, server: 0.3, time: T0 + 60 + 30 });
    const g = chartGeometry(filling, bandsOf(filling));
    // 0.3 in 60 s is 18/h; 0.3 in the 30 s so far is 36/h
    expect(g.maxRate).toBe(40);
  });

  it('says when nothing was spent, and draws one bucket across the plot', () => {
    const none = historyDoc({ n: 3, server: 0 });
    const g = chartGeometry(none, bandsOf(none));
    expect(g.empty).toBe(true);
    expect(g.maxRate).toBe(1);
    const one = historyDoc({ n: 1, server: 0.5 });
    const g1 = chartGeometry(one, bandsOf(one));
    const p = points(g1.shapes[0].area);
    expect(p[0][0]).toBe(46);
    expect(p[1][0]).toBe(46 + 246);
  });

  it('finds the hovered bucket and writes its figures', () => {
    const g = chartGeometry(doc, bandsOf(doc));
    expect(bucketAt(g, g.xs[2] + 1)).toBe(2);
    expect(bucketAt(g, 0)).toBe(-1);
    expect(bucketAt(g, DEFAULT_LAYOUT.width + 10)).toBe(-1);
    const lines = bucketLines(g, 0, 'USD');
    expect(lines[0]).toMatch(/^\d\d:\d\d–\d\d:\d\d$/);
    expect(lines).toContain('a.ipynb: USD 0.30 (waste USD 0.30)');
    expect(lines).toContain('Unattributed: USD 0.30');
    expect(lines[lines.length - 1]).toBe('Total USD 0.60, waste USD 0.30 · 36.00/h');
    expect(bucketLines(g, 9)).toEqual([]);
  });
});

describe('words', () => {
  it('writes the summary, the band titles and the ranges', () => {
    const doc = historyDoc({
      minutes: 360,
      server: 1,
      notebooks: { 'a.ipynb': { spend: [0.5, 0.5, 0, 0], waste: [0.25, 0, 0, 0] } }
    });
    const bands = bandsOf(doc);
    expect(summaryLine(doc, bands)).toBe(
      'Spent USD 4.00 in the last 6 hours, waste USD 0.25 (6%)'
    );
    expect(bandTitle(bands[0], 'in the last 6 hours')).toBe(
      'a.ipynb: spent USD 1.00, waste USD 0.25 (25%) in the last 6 hours'
    );
    expect(bandTitle(bands[1], 'x')).toContain('What no notebook spent');
    expect(rangeOf(1440).label).toBe('24 h');
    expect(rangeOf(10080).words).toBe('the last 7 days');
    expect(rangeOf(120).label).toBe('2 h');
    expect(rangeOf(90).label).toBe('90 min');
  });

  it('words a fitted window from the first sample', () => {
    const since = T0 + 13 * 60;
    const doc = historyDoc({ n: 3, minutes: 360, server: 0.1, since, time: since + 150 });
    const clock = formatClock(since);
    expect(windowPhrase(doc, 360)).toBe(`since ${clock}`);
    expect(summaryLine(doc, bandsOf(doc))).toBe(`Spent USD 0.30 since ${clock}, waste USD 0.00 (0%)`);
    // a day or more ago: with the day
    const old = historyDoc({ n: 3, minutes: 10080, since, time: since + 2 * 86400 });
    expect(windowPhrase(old, 10080)).toBe(`since ${formatDay(since)} ${clock}`);
    // not fitted (an older server, or a ledger older than the window)
    expect(windowPhrase(historyDoc({ minutes: 1440 }), 360)).toBe('in the last 24 hours');
    expect(windowPhrase(null, 10080)).toBe('in the last 7 days');
  });

  it('ticks a few minutes of a young ledger', () => {
    const ticks = timeTicks(T0 + 17 * 60, T0 + 21 * 60);
    expect(ticks.length).toBeGreaterThanOrEqual(2);
    expect(ticks[1] - ticks[0]).toBe(60);
    expect(timeTicks(T0, T0 + 20 * 60)[1] - timeTicks(T0, T0 + 20 * 60)[0]).toBe(300);
  });

  it('puts no time tick before the ledger\'s first minute', () => {
    // 5-minute buckets: the first starts 4 minutes before the server's first sample
    const since = T0 + 4 * 60;
    const doc = historyDoc({ n: 100, bucket: 300, minutes: 1440, since,
                             notebooks: { 'a.ipynb': { spend: new Array(100).fill(0.1) } } });
    const g = chartGeometry(doc, bandsOf(doc));
    expect(g.times[0]).toBeLessThan(since);
    expect(g.xTicks.length).toBeGreaterThan(1);
    expect(Math.min(...g.xTicks.map(t => t.value))).toBeGreaterThanOrEqual(since);
  });

  it('builds closed area paths', () => {
    expect(areaPath([0, 10], [5, 5], [1, 2])).toBe('M0,1 L10,2 L10,5 L0,5 Z');
    expect(areaPath([], [], [])).toBe('');
  });
});
