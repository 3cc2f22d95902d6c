import { ago, dayLabel, fix2, inTime, moneyText, pct, utc } from '../text';

describe('how the hub pages write figures', () => {
  it('writes money with two decimals, grouped, its code first', () => {
    expect(fix2(1234.5)).toBe('1,234.50');
    expect(fix2(null)).toBe('0.00');
    expect(moneyText(0.126, 'USD')).toBe('USD 0.13');
    expect(moneyText(2, '')).toBe('2.00');
  });

  it('writes times in UTC', () => {
    const t = Date.UTC(2026, 11, 7, 9, 5, 7) / 1000;
    expect(utc(t)).toBe('2026-12-07 09:05 UTC');
    expect(utc(t, true)).toBe('2026-12-07 09:05:07 UTC');
    expect(dayLabel(t)).toBe('Dec 7');
  });

  it('writes spans and shares', () => {
    expect(ago(12.4)).toBe('12 s ago');
    expect(ago(150)).toBe('3 min ago');
    expect(ago(7200)).toBe('2 h ago');
    expect(inTime(3 * 86400 + 4 * 3600)).toBe('in 3 d 4 h');
    expect(inTime(2 * 3600 + 300)).toBe('in 2 h 5 min');
    expect(inTime(420)).toBe('in 7 min');
    expect(pct(0.025)).toBe('2.5%');
    expect(pct(0.87)).toBe('87%');
  });
});
