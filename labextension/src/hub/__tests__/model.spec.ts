import {
  COLUMNS,
  MAX_POINTS,
  chartBuckets,
  chartSubject,
  chartWindow,
  countedNote,
  gpuCell,
  kpiFigures,
  nextSort,
  periodOf,
  shownRows
} from '../model';
import { HOUR_NOW, NOW, row, series } from './fixtures';

describe('the GPU columns', () => {
  it('count the GPUs the server pays for, with how many its kernels hold', () => {
    // alice's profile pays for an 8-GPU instance; her kernel holds one, idle
    const cell = gpuCell(row());
    expect(cell.value).toBe('8');
    expect(cell.detail).toBe(' (1 held · 0 busy)');
    expect(cell.title).toMatch(/^8 GPUs paid for: 1 held by kernels, 0 busy, 8 not at work \(what idle GPU hours count\)/);
    expect(gpuCell(row({ gpus_paid: 0, gpus_held: 0 })).detail).toBeNull();
  });

  it('say in their headers that idle hours count the GPUs paid for', () => {
    const gpus = COLUMNS.find(c => c.key === 'gpus')!;
    const idle = COLUMNS.find(c => c.key === 'idle')!;
    expect(gpus.label).toBe('GPUs paid (held)');
    expect(gpus.title).toMatch(/GPUs the running servers pay for/);
    expect(idle.title).toMatch(/GPUs the servers pay for \(the column beside\)/);
  });

  it('sum into the header figures over the same GPUs', () => {
    const f = kpiFigures([row(), row({ key: 'bob', gpus_paid: 1, gpus_held: 1, gpus_busy: 1 })]);
    expect([f.paid, f.held, f.busy]).toEqual([9, 2, 1]);
  });
});

describe('the chart', () => {
  it('asks for the last 48 hours or 30 days when the period is open', () => {
    const w = chartWindow('hour', { since: null, until: null }, NOW);
    expect(w.end).toBe(HOUR_NOW + 3600);
    expect((w.end - w.start) / 3600).toBe(48);
    const d = chartWindow('day', { since: null, until: null }, NOW);
    expect((d.end - d.start) / 86400).toBe(30);
  });

  it('asks for at most as many points as the service draws', () => {
    const w = chartWindow('hour', { since: 0, until: null }, NOW);
    expect((w.end - w.start) / 3600).toBe(MAX_POINTS);
  });

  it("of a one-minute-old hub spans its one hour, not 48", () => {
    const w = chartWindow('hour', { since: null, until: null }, NOW);
    const { range, buckets } = chartBuckets(series([HOUR_NOW]), w, true);
    expect(buckets.map(b => b.t)).toEqual([HOUR_NOW]);
    expect(range.start).toBe(HOUR_NOW);
  });

  it('starts at the first hour recorded and fills the gaps with zeros', () => {
    const w = chartWindow('hour', { since: null, until: null }, NOW);
    const { buckets } = chartBuckets(series([HOUR_NOW - 3 * 3600, HOUR_NOW]), w, true);
    expect(buckets.map(b => b.spend)).toEqual([0.5, 0, 0, 0.5]);
  });

  it('of a hub older than the window spans all of it', () => {
    const w = chartWindow('hour', { since: null, until: null }, NOW);
    expect(chartBuckets(series([w.start, HOUR_NOW]), w, true).buckets.length).toBe(48);
  });

  it('spans a period chosen, whatever was recorded in it', () => {
    const p = periodOf('24h', NOW);
    const w = chartWindow('hour', p, NOW);
    const { buckets } = chartBuckets(series([HOUR_NOW]), w, false);
    expect(buckets.length).toBe(24);
  });

  it('with nothing recorded shows the bucket now', () => {
    const w = chartWindow('hour', { since: null, until: null }, NOW);
    expect(chartBuckets({ series: [] }, w, true).buckets.map(b => b.t)).toEqual([HOUR_NOW]);
  });

  it('keeps waste and unattributed within spend', () => {
    const w = chartWindow('hour', { since: null, until: null }, NOW);
    const doc = { series: [{ key: 'a', points: [{ time: HOUR_NOW, spend: 1, waste: 2, unattributed: 5 }] }] };
    const [b] = chartBuckets(doc, w, true).buckets;
    expect([b.spend, b.waste, b.unattributed]).toEqual([1, 1, 0]);
  });

  it('is of the user (their page), the hub (every user) or the key chosen', () => {
    expect(chartSubject(false, 'ann', 'group:ml')).toEqual({ by: 'user', key: 'ann' });
    expect(chartSubject(true, 'root', '')).toEqual({ by: 'user', key: null });
    expect(chartSubject(true, 'root', 'group:ml:x')).toEqual({ by: 'group', key: 'ml:x' });
  });
});

describe('periods', () => {
  it('are whole UTC hours, days and months; a custom until day is included', () => {
    expect(periodOf('all', NOW)).toEqual({ since: null, until: null });
    expect(periodOf('24h', NOW).since).toBe(HOUR_NOW - 23 * 3600);
    expect(periodOf('7d', NOW).since).toBe(HOUR_NOW - 167 * 3600);
    expect(periodOf('month', NOW).since).toBe(Date.UTC(2026, 11, 1) / 1000);
    expect(periodOf('custom', NOW, '2026-12-07', '2026-12-07')).toEqual({
      since: Date.UTC(2026, 11, 7) / 1000,
      until: Date.UTC(2026, 11, 8) / 1000
    });
    expect(periodOf('custom', NOW, 'nonsense', '')).toEqual({ since: null, until: null });
  });
});

describe('the table rows', () => {
  const rows = [row({ key: 'bob', spend: 3 }), row({ key: 'Alice', spend: 1 }), row({ key: 'carol', spend: 2, state: 'stale' })];

  it('sort by name A to Z, numbers largest first, and flip on a second click', () => {
    expect(shownRows(rows, 'user', { key: 'name', dir: 1 }, '').map(r => r.key)).toEqual(['Alice', 'bob', 'carol']);
    const bySpend = nextSort({ key: 'name', dir: 1 }, 'spend', true);
    expect(bySpend).toEqual({ key: 'spend', dir: -1 });
    expect(shownRows(rows, 'user', bySpend, '').map(r => r.key)).toEqual(['bob', 'carol', 'Alice']);
    expect(nextSort(bySpend, 'spend', true)).toEqual({ key: 'spend', dir: 1 });
  });

  it('filter by any name or state, case-blind', () => {
    expect(shownRows(rows, 'server', { key: 'name', dir: 1 }, 'STALE').map(r => r.key)).toEqual(['carol']);
    expect(shownRows(rows, 'user', { key: 'name', dir: 1 }, 'nobody')).toEqual([]);
  });

  it('sort by name where a state sort does not apply', () => {
    expect(shownRows(rows, 'user', { key: 'state', dir: 1 }, '').map(r => r.key)).toEqual(['Alice', 'bob', 'carol']);
  });
});

describe('the note under a table', () => {
  it('says what spend counts and how many servers are flagged', () => {
    expect(countedNote([])).toBeNull();
    const note = countedNote([row({ counted: 'metered', flags: ['x'] }), row({ counted: 'reported' })])!;
    expect(note.text).toBe(
      "Spend counts the service's meter (profile prices); servers of unpriced profiles count what they report."
    );
    expect(note.flagged).toBe(1);
    expect(countedNote([row({ counted: 'reported' })])!.text).toBe('Spend counts what each server reports.');
  });
});
