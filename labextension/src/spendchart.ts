/**
 * Pure geometry of the spend chart ("Spend over time"): a `GET history`
 * answer turned into stacked bands (one per notebook, the smallest merged
 * into "Other notebooks", then what no notebook spent), SVG area paths in a
 * fixed viewBox, axis ticks and labels, and the figures of one bucket for
 * the hover readout. Amounts are written with format.ts's formatters. No DOM:
 * `spendchartsection.ts` draws what this computes; unit-tested in
 * `__tests__/spendchart.spec.ts`.
 *
 * The y axis is a rate (money per hour): a bucket's spend × 3600 / its
 * length, so 1-minute and 1-hour buckets read alike, and the stack's top is
 * the server's rate. The last bucket is still filling: its rate is its spend
 * over the time elapsed in it (from the document's `time`, the last sample
 * the buckets hold; the server cuts samples at minute boundaries, so a
 * bucket holds the spend of its own seconds and never reads above the rate).
 *
 * A fitted window (`since`: the ledger's first minute) is worded "since
 * 13:05" rather than "in the last 6 hours" (`windowPhrase`).
 */
import type { ISpendHistory, ISpendSeries } from './api';
import { niceTicks } from './chartscale';
import { formatAmount, formatClock, formatMoney, isNumber } from './format';

export { formatClock } from './format';
import { svgNumber } from './sparkline';

/** A window the chart offers. */
export interface IChartRange {
  /** Minutes asked of the server. */
  minutes: number;
  /** Button label. */
  label: string;
  /** Words for the summary line (`in the last 6 hours`). */
  words: string;
}

/** The windows offered, shortest first (the server allows up to 7 days). */
export const CHART_RANGES: ReadonlyArray<IChartRange> = [
  { minutes: 360, label: '6 h', words: 'the last 6 hours' },
  { minutes: 1440, label: '24 h', words: 'the last 24 hours' },
  { minutes: 10080, label: '7 d', words: 'the last 7 days' }
];

/** The window shown first. */
export const DEFAULT_CHART_MINUTES = 360;

/** Notebooks drawn as bands of their own; the rest share "Other notebooks". */
export const MAX_NOTEBOOK_BANDS = 6;

/** Colours of the notebook bands (CSS classes `...-color-<i>`). */
export const PALETTE_SIZE = 6;

/**
 * Shortest elapsed time the still-filling last bucket is divided by, seconds
 * (it holds exactly the spend of the time elapsed: a floor only against
 * dividing by nearly nothing).
 */
export const MIN_PARTIAL_SECONDS = 1;

/** One stacked band. */
export interface IBand {
  /** Stable key: the notebook's path, `other` or `unattributed`. */
  key: string;
  kind: 'notebook' | 'other' | 'unattributed';
  /** Legend text. */
  label: string;
  /** The notebook's path (kind `notebook`), else null. */
  path: string | null;
  /** The notebooks in the band (one, or those merged into `other`). */
  paths: string[];
  /** Per bucket. */
  spend: number[];
  waste: number[];
  totalSpend: number;
  totalWaste: number;
  /** Palette index (notebooks), -1 for `other` and `unattributed`. */
  color: number;
}

function clean(values: ReadonlyArray<number> | undefined, n: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const v = values?.[i];
    out.push(isNumber(v) && v > 0 ? v : 0);
  }
  return out;
}

function band(
  series: ISpendSeries,
  n: number,
  kind: IBand['kind'],
  key: string,
  label: string,
  color: number
): IBand {
  const spend = clean(series.spend, n);
  const waste = clean(series.waste, n).map((w, i) => Math.min(w, spend[i]));
  return {
    key,
    kind,
    label,
    path: kind === 'notebook' ? series.path : null,
    paths: kind === 'notebook' && series.path ? [series.path] : [],
    spend,
    waste,
    totalSpend: isNumber(series.total_spend) ? series.total_spend : sum(spend),
    totalWaste: isNumber(series.total_waste) ? series.total_waste : sum(waste),
    color
  };
}

function sum(values: ReadonlyArray<number>): number {
  return values.reduce((a, b) => a + b, 0);
}

/**
 * Palette indexes of notebooks for the life of one chart: a notebook keeps
 * the colour it was first drawn in whatever the ranking does (the server
 * lists notebooks most spent first, and a colour by rank swapped two
 * notebooks' colours when one overtook the other). A notebook new to the
 * chart takes a colour no notebook has had, else the one whose notebook was
 * drawn longest ago (which then forgets it): two bands on screen never share
 * a colour, and a notebook that leaves and comes back gets its own again
 * unless another took it meanwhile.
 */
export class NotebookColors {
  constructor(readonly size = PALETTE_SIZE) {}

  /** The colours of the notebooks drawn now (at most `size` of them), in their order. */
  assign(paths: ReadonlyArray<string>): number[] {
    this._round++;
    const colors = paths.map(path => this._byPath.get(path) ?? -1);
    for (let i = 0; i < paths.length; i++) {
      if (colors[i] < 0) {
        colors[i] = this._free(new Set(colors));
        this._forget(colors[i]);
        this._byPath.set(paths[i], colors[i]);
      }
    }
    for (const path of paths) {
      this._drawn.set(path, this._round);
    }
    return colors.map(c => (c < 0 ? 0 : c));
  }

  /** A colour none of `taken` has: one no notebook had, else the one drawn longest ago. */
  private _free(taken: ReadonlySet<number>): number {
    const holders = new Map<number, string>();
    this._byPath.forEach((color, path) => holders.set(color, path));
    let best = -1;
    let oldest = Infinity;
    for (let color = 0; color < this.size; color++) {
      if (taken.has(color)) {
        continue;
      }
      const holder = holders.get(color);
      if (holder === undefined) {
        return color;
      }
      const drawn = this._drawn.get(holder) ?? 0;
      if (drawn < oldest) {
        oldest = drawn;
        best = color;
      }
    }
    return best;
  }

  private _forget(color: number): void {
    for (const [path, held] of Array.from(this._byPath)) {
      if (held === color) {
        this._byPath.delete(path);
        this._drawn.delete(path);
      }
    }
  }

  private _byPath = new Map<string, number>();
  private _drawn = new Map<string, number>();
  private _round = 0;
}

/** The label of the band of what no notebook spent. */
export const UNATTRIBUTED_LABEL = 'Unattributed';

/**
 * The bands to stack, bottom first: the notebooks in the server's order
 * (most spent first) up to `maxNotebooks`, the rest merged into one
 * `other` band, then `unattributed` (idle GPUs nobody holds, unused host
 * share, kernels without a notebook). Their sum per bucket is the server's
 * spend in it. Series of notebooks that spent nothing in the window are left
 * out. Notebooks' colours come from `colors` (the chart's, so that they stay
 * put as the ranking changes; a fresh one by default: by rank).
 */
export function bandsOf(
  doc: ISpendHistory | null | undefined,
  maxNotebooks = MAX_NOTEBOOK_BANDS,
  colors: NotebookColors = new NotebookColors()
): IBand[] {
  if (!doc || !Array.isArray(doc.times) || !Array.isArray(doc.series)) {
    return [];
  }
  const n = doc.times.length;
  const notebooks = doc.series.filter(
    s => s && s.kind === 'notebook' && typeof s.path === 'string'
  );
  const shown = notebooks.filter(
    s => s.path === doc.notebook || clean(s.spend, n).some(v => v > 0)
  );
  const limit = shown.length > maxNotebooks ? Math.max(0, maxNotebooks - 1) : maxNotebooks;
  const own = shown.slice(0, limit);
  const palette = colors.assign(own.map(s => s.path as string));
  const bands = own.map((s, i) =>
    band(s, n, 'notebook', s.path as string, s.path as string, palette[i])
  );
  const rest = shown.slice(limit);
  if (rest.length > 0) {
    const merged = rest.map(s => band(s, n, 'notebook', '', '', -1));
    bands.push({
      key: 'other',
      kind: 'other',
      label: `Other notebooks (${rest.length})`,
      path: null,
      paths: rest.map(s => s.path as string),
      spend: merged.reduce((acc, b) => acc.map((v, i) => v + b.spend[i]), new Array(n).fill(0)),
      waste: merged.reduce((acc, b) => acc.map((v, i) => v + b.waste[i]), new Array(n).fill(0)),
      totalSpend: sum(merged.map(b => b.totalSpend)),
      totalWaste: sum(merged.map(b => b.totalWaste)),
      color: -1
    });
  }
  const unattributed = doc.series.find(s => s && s.kind === 'unattributed');
  if (unattributed) {
    bands.push(band(unattributed, n, 'unattributed', 'unattributed', UNATTRIBUTED_LABEL, -1));
  }
  return bands;
}

/** The box the chart is drawn in (SVG user units; the SVG scales to its width). */
export interface IChartLayout {
  width: number;
  height: number;
  /** Room for the y labels. */
  left: number;
  right: number;
  top: number;
  /** Room for the x labels. */
  bottom: number;
}

/** Fits the right sidebar's default width (~300 px) at 1:1. */
export const DEFAULT_LAYOUT: IChartLayout = {
  width: 300,
  height: 150,
  left: 46,
  right: 8,
  top: 8,
  bottom: 18
};

/** A tick of an axis. */
export interface ITick {
  /** Position along the axis, user units. */
  pos: number;
  /** The value (rate per hour, or epoch seconds). */
  value: number;
  label: string;
}

/** A band drawn: its spend area and the waste part of it (the top of the band). */
export interface IBandShape {
  band: IBand;
  /** Closed SVG path of the band (from its bottom to its top). */
  area: string;
  /** Closed SVG path of its waste: the top `waste` of the band. */
  wasteArea: string;
}

/** Everything the chart draws. */
export interface IChartGeometry {
  layout: IChartLayout;
  /** The plot's box. */
  plot: { x: number; y: number; w: number; h: number };
  /** Bucket starts (epoch seconds), and their x (user units). */
  times: number[];
  xs: number[];
  bucketSeconds: number;
  /** Per bucket: seconds of spend the rate is computed over. */
  seconds: number[];
  /** Top of the y scale, per hour. */
  maxRate: number;
  shapes: IBandShape[];
  yTicks: ITick[];
  xTicks: ITick[];
  /** Nothing was spent in the window. */
  empty: boolean;
}

/** A closed area between `lower` and `upper` (y per x), left to right. */
export function areaPath(
  xs: ReadonlyArray<number>,
  lower: ReadonlyArray<number>,
  upper: ReadonlyArray<number>
): string {
  const n = Math.min(xs.length, lower.length, upper.length);
  if (n === 0) {
    return '';
  }
  const top: string[] = [];
  const bottom: string[] = [];
  for (let i = 0; i < n; i++) {
    top.push(`${i === 0 ? 'M' : 'L'}${svgNumber(xs[i])},${svgNumber(upper[i])}`);
  }
  for (let i = n - 1; i >= 0; i--) {
    bottom.push(`L${svgNumber(xs[i])},${svgNumber(lower[i])}`);
  }
  return `${top.join(' ')} ${bottom.join(' ')} Z`;
}

/**
 * A y label: `40/h`, `2.5/h`, `0.025/h` (ticks are round numbers; the
 * currency is in the section's summary line and tooltips).
 */
export function formatRateTick(value: number): string {
  return `${isNumber(value) ? Number(value.toPrecision(6)) : '–'}/h`;
}

const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];

/** Local day `Mon 2`. */
export function formatDay(epochSeconds: number): string {
  const d = new Date(epochSeconds * 1000);
  return `${DAYS[d.getDay()]} ${d.getDate()}`;
}

/** Candidate spacings of time ticks, seconds. */
const TIME_STEPS = [
  60,
  120,
  300,
  600, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400
];

/** Seconds east of UTC of the local time zone at `epochSeconds`. */
function zoneOffset(epochSeconds: number): number {
  return -new Date(epochSeconds * 1000).getTimezoneOffset() * 60;
}

/**
 * Time ticks between `start` and `end` (epoch seconds): the smallest spacing
 * from 1 minute (a young ledger's fitted window) to 2 days that gives at most `count` ticks, on round local
 * times; labelled `13:00`, or `Mon 2` at local midnight and for spacings of
 * a day or more.
 */
export function timeTicks(start: number, end: number, count = 5): number[] {
  if (!isNumber(start) || !isNumber(end) || end <= start) {
    return [];
  }
  const span = end - start;
  const step = TIME_STEPS.find(s => span / s <= count) ?? TIME_STEPS[TIME_STEPS.length - 1];
  const offset = zoneOffset(start);
  let t = Math.ceil((start + offset) / step) * step - offset;
  const ticks: number[] = [];
  for (; t <= end; t += step) {
    ticks.push(t);
  }
  return ticks;
}

/** The label of a time tick (see `timeTicks`). */
export function formatTimeTick(epochSeconds: number, step: number): string {
  const d = new Date(epochSeconds * 1000);
  const midnight = d.getHours() === 0 && d.getMinutes() === 0;
  return step >= 86400 || midnight ? formatDay(epochSeconds) : formatClock(epochSeconds);
}

/**
 * Seconds of spend in each bucket: the bucket's length, but for the one
 * still filling at `now`, the time elapsed in it (at least
 * MIN_PARTIAL_SECONDS).
 */
export function bucketSeconds(
  times: ReadonlyArray<number>,
  bucket: number,
  now: number | null | undefined
): number[] {
  return times.map(t => {
    if (isNumber(now) && now >= t && now < t + bucket) {
      return Math.min(bucket, Math.max(MIN_PARTIAL_SECONDS, now - t));
    }
    return bucket;
  });
}

/**
 * Lay the bands out in `layout`: stacked bottom first, x from the first
 * bucket's start to the last's, y a rate per hour from 0 to the top tick.
 */
export function chartGeometry(
  doc: ISpendHistory,
  bands: ReadonlyArray<IBand>,
  layout: IChartLayout = DEFAULT_LAYOUT
): IChartGeometry {
  const times = Array.isArray(doc.times) ? doc.times.slice() : [];
  const n = times.length;
  const bucket = isNumber(doc.bucket_seconds) && doc.bucket_seconds > 0 ? doc.bucket_seconds : 60;
  const plot = {
    x: layout.left,
    y: layout.top,
    w: Math.max(1, layout.width - layout.left - layout.right),
    h: Math.max(1, layout.height - layout.top - layout.bottom)
  };
  const seconds = bucketSeconds(times, bucket, doc.time);
  const rates = bands.map(b => b.spend.map((v, i) => (v * 3600) / seconds[i]));
  const wasteRates = bands.map(b => b.waste.map((v, i) => (v * 3600) / seconds[i]));
  const tops: number[] = new Array(n).fill(0);
  for (const r of rates) {
    r.forEach((v, i) => (tops[i] += v));
  }
  const peak = Math.max(0, ...tops);
  const ticks = niceTicks(peak > 0 ? peak : 1);
  const maxRate = ticks[ticks.length - 1];
  const y = (rate: number): number => plot.y + plot.h - (rate / maxRate) * plot.h;
  const xs =
    n <= 1
      ? times.map(() => plot.x)
      : times.map((_, i) => plot.x + (i * plot.w) / (n - 1));
  const shapeXs = n === 1 ? [plot.x, plot.x + plot.w] : xs;
  const widen = (values: number[]): number[] => (n === 1 ? [values[0], values[0]] : values);
  const base: number[] = new Array(n).fill(0);
  const shapes: IBandShape[] = bands.map((b, k) => {
    const lower = base.slice();
    const upper = base.map((v, i) => v + rates[k][i]);
    const wasteLower = upper.map((v, i) => v - wasteRates[k][i]);
    upper.forEach((v, i) => (base[i] = v));
    return {
      band: b,
      area: areaPath(shapeXs, widen(lower.map(y)), widen(upper.map(y))),
      wasteArea: b.waste.some(w => w > 0)
        ? areaPath(shapeXs, widen(wasteLower.map(y)), widen(upper.map(y)))
        : ''
    };
  });
  const start = n > 0 ? times[0] : doc.start;
  const end = n > 0 ? times[n - 1] : doc.end;
  const xOf = (t: number): number =>
    n <= 1 || end <= start ? plot.x : plot.x + ((t - start) / (end - start)) * plot.w;
  // No tick before the ledger's first minute (a coarse first bucket starts before it).
  const tickTimes = timeTicks(isNumber(doc.since) ? Math.max(start, doc.since) : start, end);
  const step = tickTimes.length > 1 ? tickTimes[1] - tickTimes[0] : 3600;
  return {
    layout,
    plot,
    times,
    xs,
    bucketSeconds: bucket,
    seconds,
    maxRate,
    shapes,
    yTicks: ticks.map(v => ({ pos: y(v), value: v, label: formatRateTick(v) })),
    xTicks: tickTimes.map(t => ({ pos: xOf(t), value: t, label: formatTimeTick(t, step) })),
    empty: !bands.some(b => b.spend.some(v => v > 0))
  };
}

/** The bucket nearest to `x` (user units), or -1 when there is none. */
export function bucketAt(geometry: IChartGeometry, x: number): number {
  const { xs } = geometry;
  if (xs.length === 0 || !isNumber(x)) {
    return -1;
  }
  if (x < geometry.plot.x - 1 || x > geometry.plot.x + geometry.plot.w + 1) {
    return -1;
  }
  let best = 0;
  for (let i = 1; i < xs.length; i++) {
    if (Math.abs(xs[i] - x) < Math.abs(xs[best] - x)) {
      best = i;
    }
  }
  return best;
}

/** When a bucket was: `13:05–13:06`, `Mon 2 13:00–14:00` for long buckets. */
export function formatBucket(start: number, seconds: number): string {
  const range = `${formatClock(start)}–${formatClock(start + seconds)}`;
  return seconds >= 3600 ? `${formatDay(start)} ${range}` : range;
}

/** The figures of one bucket, one line each, for the hover readout. */
export function bucketLines(
  geometry: IChartGeometry,
  index: number,
  currency = 'USD'
): string[] {
  if (index < 0 || index >= geometry.times.length) {
    return [];
  }
  const lines = [formatBucket(geometry.times[index], geometry.bucketSeconds)];
  let spend = 0;
  let waste = 0;
  for (let k = geometry.shapes.length - 1; k >= 0; k--) {
    const b = geometry.shapes[k].band;
    const s = b.spend[index];
    const w = b.waste[index];
    spend += s;
    waste += w;
    if (s > 0) {
      const wasted = w > 0 ? ` (waste ${formatMoney(w, currency)})` : '';
      lines.push(`${b.label}: ${formatMoney(s, currency)}${wasted}`);
    }
  }
  const rate = (spend * 3600) / geometry.seconds[index];
  lines.push(
    `Total ${formatMoney(spend, currency)}, waste ${formatMoney(waste, currency)}` +
      ` · ${formatAmount(rate)}/h`
  );
  return lines;
}

/** A band's tooltip: its figures over the window (`phrase`: `windowPhrase`). */
export function bandTitle(b: IBand, phrase: string, currency = 'USD'): string {
  const share = b.totalSpend > 0 ? ` (${Math.round((100 * b.totalWaste) / b.totalSpend)}%)` : '';
  const what =
    b.kind === 'unattributed'
      ? "\nWhat no notebook spent: GPUs nobody held, the host's unused share, kernels without a notebook"
      : b.kind === 'other'
        ? `\n${b.paths.join('\n')}`
        : '';
  return (
    `${b.label}: spent ${formatMoney(b.totalSpend, currency)}, ` +
    `waste ${formatMoney(b.totalWaste, currency)}${share} ${phrase}${what}`
  );
}

/** The range whose minutes these are, or a made-up one (`90 min`). */
export function rangeOf(minutes: number): IChartRange {
  const found = CHART_RANGES.find(r => r.minutes === minutes);
  if (found) {
    return found;
  }
  const hours = minutes / 60;
  return Number.isInteger(hours)
    ? { minutes, label: `${hours} h`, words: `the last ${hours} hours` }
    : { minutes, label: `${minutes} min`, words: `the last ${minutes} minutes` };
}

/**
 * The window in words, after a figure: `in the last 6 hours`, or, when the
 * server fitted the window to the ledger's first minute (`since`), `since
 * 13:05` (`since Mon 2 13:05` when that was a day or more before `time`).
 */
export function windowPhrase(doc: ISpendHistory | null | undefined, minutes: number): string {
  const since = doc?.since;
  if (!isNumber(since)) {
    return `in ${rangeOf(doc?.minutes ?? minutes).words}`;
  }
  const now = isNumber(doc?.time) ? doc.time : since;
  const day = now - since >= 86400 - 60 ? `${formatDay(since)} ` : '';
  return `since ${day}${formatClock(since)}`;
}

/**
 * The line under the title: `Spent USD 12.40 in the last 6 hours, waste USD
 * 3.10 (25%)`, or `Spent USD 0.54 since 13:05, …` for a fitted window.
 */
export function summaryLine(
  doc: ISpendHistory,
  bands: ReadonlyArray<IBand>,
  currency = 'USD'
): string {
  const spend = sum(bands.map(b => b.totalSpend));
  const waste = sum(bands.map(b => b.totalWaste));
  const share = spend > 0 ? ` (${Math.round((100 * waste) / spend)}%)` : '';
  return (
    `Spent ${formatMoney(spend, currency)} ${windowPhrase(doc, doc.minutes)}, ` +
    `waste ${formatMoney(waste, currency)}${share}`
  );
}
