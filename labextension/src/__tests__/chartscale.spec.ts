import { niceStep, niceTicks, stepDecimals } from '../chartscale';

describe('chartscale', () => {
  it('steps by 1, 2, 2.5 or 5 × 10^k, and 1 for nothing', () => {
    expect(niceStep(36, 4)).toBe(10);
    expect(niceStep(0.09, 4)).toBeCloseTo(0.025);
    expect(niceStep(-1)).toBe(1);
    expect(niceStep(NaN)).toBe(1);
  });

  it('ticks from 0 to the first at or above the largest value', () => {
    expect(niceTicks(4, 4)).toEqual([0, 1, 2, 3, 4]);
    expect(niceTicks(41, 4)).toEqual([0, 20, 40, 60]);
    expect(niceTicks(0.3, 4)).toEqual([0, 0.1, 0.2, 0.3]);
  });

  it('labels with the decimals the step needs', () => {
    expect(stepDecimals(10)).toBe(0);
    expect(stepDecimals(2.5)).toBe(1);
    expect(stepDecimals(0.025)).toBe(3);
    expect(stepDecimals(0.0001)).toBe(4);
  });
});
