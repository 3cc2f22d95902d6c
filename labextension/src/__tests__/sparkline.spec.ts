import { sparklinePath, spendRates } from '../sparkline';

describe('spendRates', () => {
  it('turns per-minute spend into a per-hour rate and fills gaps with zero', () => {
    const history = [
      { time: 600, spend: 0.01, waste: 0 },
      { time: 720, spend: 0.02, waste: 0.01 }
    ];
    const rates = spendRates(history, { minutes: 4, end: 780 });
    expect(rates.map(r => r.time)).toEqual([600, 660, 720, 780]);
    expect(rates.map(r => +r.rate.toFixed(6))).toEqual([0.6, 0, 1.2, 0]);
  });

  it('ends at the latest point when no end is given', () => {
    const rates = spendRates([{ time: 1200, spend: 0.05, waste: 0 }], { minutes: 3 });
    expect(rates.map(r => r.time)).toEqual([1080, 1140, 1200]);
    expect(rates[2].rate).toBeCloseTo(3);
  });

  it('drops points outside the window and buckets odd times', () => {
    const rates = spendRates(
      [
        { time: 0, spend: 9, waste: 0 },
        { time: 1230, spend: 0.01, waste: 0 }
      ],
      { minutes: 2, end: 1259 }
    );
    expect(rates).toEqual([
      { time: 1140, rate: 0 },
      { time: 1200, rate: expect.closeTo(0.6, 6) }
    ]);
  });

  it('is empty without data or an end', () => {
    expect(spendRates([], {})).toEqual([]);
    expect(spendRates(undefined, {})).toEqual([]);
    expect(spendRates([], { minutes: 2, end: 120 })).toEqual([
      { time: 60, rate: 0 },
      { time: 120, rate: 0 }
    ]);
  });
});

describe('sparklinePath', () => {
  it('scales the peak to the top and zero to the bottom', () => {
    expect(sparklinePath([0, 2, 1], 80, 18)).toBe('M0,17 L40,1 L80,9');
  });

  it('draws a flat baseline for all-zero or negative data', () => {
    expect(sparklinePath([0, 0, -1], 10, 10)).toBe('M0,9 L5,9 L10,9');
  });

  it('handles one point, no points and odd sizes', () => {
    expect(sparklinePath([3], 10, 10)).toBe('M0,1 L10,1');
    expect(sparklinePath([], 10, 10)).toBe('');
    expect(sparklinePath([1, 2], 0, 10)).toBe('');
  });

  it('treats non-finite values as zero and rounds coordinates', () => {
    expect(sparklinePath([NaN, 3, Infinity], 3, 7, 0)).toBe('M0,7 L1.5,0 L3,7');
  });
});
