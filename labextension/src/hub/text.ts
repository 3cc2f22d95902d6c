/**
 * How the hub pages write figures and times (UTC): pure, unit-tested. Shares
 * the percent rule with the lab's panel (`formatPercent`).
 */
import { formatPercent } from '../format';

export const MINUTE = 60;
export const HOUR = 3600;
export const DAY = 86400;
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** `1,234.50`: two decimals, grouped (a non-number is 0). */
export function fix2(v: number | null | undefined): string {
  return (Number(v) || 0).toLocaleString('en-US', {
    minimumFractionDigits: 2,
    maximumFractionDigits: 2
  });
}

/** `USD 12.34`, or `12.34` without a currency. */
export function moneyText(v: number | null | undefined, currency: string | null): string {
  return (currency ? `${currency} ` : '') + fix2(v);
}

/** Two digits. */
export function pad(n: number): string {
  return (n < 10 ? '0' : '') + n;
}

/** `2026-12-07 22:05 UTC` (with `:09` seconds when asked). */
export function utc(t: number, withSeconds = false): string {
  const d = new Date(t * 1000);
  return (
    `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` +
    `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}` +
    (withSeconds ? `:${pad(d.getUTCSeconds())}` : '') +
    ' UTC'
  );
}

/** `Dec 7` (UTC). */
export function dayLabel(t: number): string {
  const d = new Date(t * 1000);
  return `${MONTHS[d.getUTCMonth()]} ${d.getUTCDate()}`;
}

/** `12 s ago`, `3 min ago`, `2 h ago`. */
export function ago(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < MINUTE) {
    return `${s} s ago`;
  }
  if (s < HOUR) {
    return `${Math.round(s / MINUTE)} min ago`;
  }
  return `${Math.round(s / HOUR)} h ago`;
}

/** `in 3 d 4 h`, `in 2 h 5 min`, `in 7 min`. */
export function inTime(seconds: number): string {
  const d = Math.floor(seconds / DAY);
  const h = Math.floor((seconds % DAY) / HOUR);
  const m = Math.floor((seconds % HOUR) / MINUTE);
  if (d > 0) {
    return `in ${d} d ${h} h`;
  }
  if (h > 0) {
    return `in ${h} h ${m} min`;
  }
  return `in ${m} min`;
}

/** A fraction as a percent: `2.5%`, `87%`. */
export function pct(fraction: number): string {
  return formatPercent(fraction * 100);
}

/** `1 server`, `2 servers`. */
export function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}
