/**
 * The value axis of a chart that starts at 0: a "nice" step (1, 2, 2.5 or
 * 5 × 10^k), the ticks 0, step, ... up to the first at or above the largest
 * value, and how many decimals a step's labels need. One copy for the cost
 * panel's spend chart (`spendchart.ts`) and the hub page's (`hub/chart.ts`),
 * which import it.
 */

/** A "nice" step (1, 2, 2.5 or 5 × 10^k) with at most `count` steps up to `max`; 1 when `max` is not above 0. */
export function niceStep(max: number, count = 4): number {
  if (typeof max !== 'number' || !Number.isFinite(max) || max <= 0) {
    return 1;
  }
  const raw = max / Math.max(1, count);
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5, 10]) {
    if (m * power >= raw) {
      return m * power;
    }
  }
  return 10 * power;
}

/**
 * Ticks 0, step, ... up to the first at or above `max` (at most `count + 1`
 * steps; at least one), each rounded to 12 significant digits.
 */
export function niceTicks(max: number, count = 4): number[] {
  const step = niceStep(max, count);
  const ticks = [0];
  for (let i = 1; ticks[ticks.length - 1] < max - 1e-12 && i <= count + 1; i++) {
    ticks.push(Number((i * step).toPrecision(12)));
  }
  if (ticks.length === 1) {
    ticks.push(step);
  }
  return ticks;
}

/** Decimals the labels of ticks `step` apart need (0.025 shows as 0.025, not 0.03), at most 6. */
export function stepDecimals(step: number): number {
  let digits = 0;
  while (
    digits < 6 &&
    Math.abs(Math.round(step * Math.pow(10, digits)) - step * Math.pow(10, digits)) > 1e-6
  ) {
    digits++;
  }
  return digits;
}
