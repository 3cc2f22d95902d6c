/**
 * Pure sparkline geometry: a notebook's per-minute spend history turned into
 * a spend rate series and an SVG path. No DOM.
 */
import type { IHistoryPoint } from './api';

/** Seconds per history point (the server keeps per-minute buckets). */
export const BUCKET_SECONDS = 60;

/** Minutes shown by the panel's sparklines (the server sends 30). */
export const SPARKLINE_MINUTES = 30;

/** One point of a spend-rate series. */
export interface IRatePoint {
  /** Start of the bucket, epoch seconds. */
  time: number;
  /** Spend rate over the bucket, per hour. */
  rate: number;
}

/**
 * Spend rate per bucket over the `minutes` buckets ending with the bucket of
 * `end` (default: the latest point). Buckets without a point spent nothing
 * (the server only stores minutes with spend) and count as zero.
 */
export function spendRates(
  history: ReadonlyArray<IHistoryPoint> | null | undefined,
  options: { minutes?: number; end?: number | null; bucket?: number } = {}
): IRatePoint[] {
  const bucket = options.bucket ?? BUCKET_SECONDS;
  const minutes = Math.max(1, Math.floor(options.minutes ?? SPARKLINE_MINUTES));
  const points = (history ?? []).filter(
    p => p && Number.isFinite(p.time) && Number.isFinite(p.spend)
  );
  let end = options.end;
  if (end === null || end === undefined || !Number.isFinite(end)) {
    if (points.length === 0) {
      return [];
    }
    end = Math.max(...points.map(p => p.time));
  }
  const last = Math.floor(end / bucket) * bucket;
  const first = last - (minutes - 1) * bucket;
  const spend = new Map<number, number>();
  for (const p of points) {
    const b = Math.floor(p.time / bucket) * bucket;
    if (b >= first && b <= last) {
      spend.set(b, (spend.get(b) ?? 0) + p.spend);
    }
  }
  const out: IRatePoint[] = [];
  for (let t = first; t <= last; t += bucket) {
    out.push({ time: t, rate: ((spend.get(t) ?? 0) * 3600) / bucket });
  }
  return out;
}

/** A coordinate for an SVG path: at most two decimals, no trailing zeros, no `-0`. */
export function svgNumber(value: number): string {
  const text = value.toFixed(2).replace(/\.?0+$/, '');
  return text === '-0' ? '0' : text;
}

/**
 * An SVG path (`M x,y L x,y ...`) drawing `values` left to right across
 * `width` × `height`, scaled so the largest value touches the top (inset by
 * `padding`); all-zero data draws a flat line at the bottom. Empty input
 * gives ''; a single value a flat line at its height.
 */
export function sparklinePath(
  values: ReadonlyArray<number>,
  width: number,
  height: number,
  padding = 1
): string {
  const clean = values.map(v => (Number.isFinite(v) && v > 0 ? v : 0));
  if (clean.length === 0 || width <= 0 || height <= 0) {
    return '';
  }
  const max = Math.max(...clean);
  const usable = Math.max(0, height - 2 * padding);
  const y = (v: number): number =>
    height - padding - (max > 0 ? (v / max) * usable : 0);
  if (clean.length === 1) {
    const yy = svgNumber(y(clean[0]));
    return `M0,${yy} L${svgNumber(width)},${yy}`;
  }
  const step = width / (clean.length - 1);
  return clean
    .map((v, i) => `${i === 0 ? 'M' : 'L'}${svgNumber(i * step)},${svgNumber(y(v))}`)
    .join(' ');
}
