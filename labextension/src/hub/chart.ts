/**
 * The spend chart: stacked bars per hour or day (active, waste, unattributed),
 * from the first bucket the hub recorded (`model.chartBuckets`), on the value
 * axis the lab panel's chart uses (`chartscale.ts`).
 */
import { niceTicks, stepDecimals } from '../chartscale';
import { add, el, sv } from './dom';
import { IBucket, IChartRange, bands } from './model';
import { HOUR, dayLabel, moneyText, pad, pct, utc } from './text';
import type { Step } from './types';

export interface IChartView {
  buckets: ReadonlyArray<IBucket>;
  range: IChartRange;
  step: Step;
  currency: string;
}

const BANDS: ReadonlyArray<[keyof ReturnType<typeof bands>, string, string]> = [
  ['active', 'Active', '#2f6fdf'],
  ['waste', 'Waste', '#f29d38'],
  ['unattributed', 'Unattributed', '#b8bec8']
];
const HEIGHT = 290;
const MARGIN = { l: 78, r: 16, t: 14, b: 44 };
/** hours between labels of an hourly chart: whole multiples of hours */
const HOUR_LABELS = [1, 2, 3, 4, 6, 12, 24, 48, 72, 168, 336, 720];

function tickLabel(v: number, step: number): string {
  const digits = stepDecimals(step); // as many as the step needs: 0.025, not 0.03
  return v.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** Every how many buckets a label goes, for slots `slot` px wide. */
export function labelEvery(step: Step, slot: number): number {
  const every = Math.max(1, Math.ceil(64 / slot));
  if (step !== 'hour') {
    return every;
  }
  return HOUR_LABELS.find(c => c >= every) ?? every;
}

function bucketWhen(b: IBucket, step: Step): string {
  const d = new Date(b.t * 1000);
  return step === 'hour'
    ? `${utc(b.t)} – ${pad((d.getUTCHours() + 1) % 24)}:00`
    : `${utc(b.t).slice(0, 10)} (UTC day)`;
}

/** One bucket's bar: active at the bottom, then waste, then what no kernel spent. */
function drawBar(b: IBucket, x: number, bw: number, y: (v: number) => number, when: string, currency: string): SVGElement {
  const parts = bands(b);
  const title =
    `${when}\nspend ${moneyText(b.spend, currency)}\n` +
    BANDS.map(k => `${k[1].toLowerCase()} ${moneyText(parts[k[0]], currency)}`).join(' · ');
  const g = sv('g', { class: 'bar', 'data-time': String(b.t) });
  let base = 0;
  for (const [key, , colour] of BANDS) {
    const v = parts[key];
    if (!(v > 0)) {
      continue;
    }
    const top = base + v;
    const rect = sv('rect', {
      class: `cg-bar ${key}`,
      x,
      y: y(top),
      width: bw,
      height: Math.max(1, y(base) - y(top)),
      fill: colour,
      rx: 1.5
    });
    rect.appendChild(sv('title', {}, title));
    g.appendChild(rect);
    base = top;
  }
  return g;
}

/** The tooltip that follows the mouse over a bar. */
function showTip(tip: HTMLElement, ev: MouseEvent, when: string, b: IBucket, currency: string): void {
  const parts = bands(b);
  tip.textContent = '';
  add(tip, [el('b', { text: when }), el('br'), 'Spend ', el('b', { text: moneyText(b.spend, currency) })]);
  for (const [key, label, colour] of BANDS) {
    add(tip, [el('br'), el('i', { style: `background:${colour}` }), `${label} ${moneyText(parts[key], currency)}`]);
  }
  tip.hidden = false;
  let x = ev.clientX + 14;
  let y = ev.clientY + 14;
  if (x + tip.offsetWidth > window.innerWidth - 8) {
    x = ev.clientX - tip.offsetWidth - 14;
  }
  if (y + tip.offsetHeight > window.innerHeight - 8) {
    y = ev.clientY - tip.offsetHeight - 14;
  }
  tip.style.left = `${x}px`;
  tip.style.top = `${y}px`;
}

function xLabel(axis: SVGElement, b: IBucket, i: number, lx: number, v: IChartView, ih: number): void {
  const d = new Date(b.t * 1000);
  const base = MARGIN.t + ih;
  axis.appendChild(sv('line', { x1: lx, x2: lx, y1: base, y2: base + 4, stroke: '#c7ccd4' }));
  const label = v.step === 'hour' ? `${pad(d.getUTCHours())}:00` : dayLabel(b.t);
  axis.appendChild(sv('text', { x: lx, y: base + 17, 'text-anchor': 'middle' }, label));
  if (v.step === 'hour' && (d.getUTCHours() === 0 || i === 0)) {
    axis.appendChild(sv('text', { x: lx, y: base + 31, 'text-anchor': 'middle', 'font-weight': '600' }, dayLabel(b.t)));
  }
}

function isLabelled(b: IBucket, i: number, n: number, first: number, step: Step, every: number): boolean {
  if (step !== 'hour') {
    return (n - 1 - i) % every === 0; // days: count back from today, so today has one
  }
  const d = new Date(b.t * 1000);
  return (
    d.getUTCHours() % Math.min(every, 24) === 0 &&
    (every <= 24 || Math.round((b.t - first) / HOUR) % every === 0)
  );
}

/** The value axis and its grid. */
function valueAxis(svg: SVGElement, max: number, ih: number, iw: number, v: IChartView): (x: number) => number {
  const ticks = niceTicks(max > 0 ? max : 4, 4); // nothing spent: 0 to 4
  const step = ticks[1];
  const top = ticks[ticks.length - 1];
  const y = (value: number): number => MARGIN.t + ih - (value / top) * ih;
  const grid = sv('g', { class: 'grid' });
  const axis = sv('g', { class: 'axis' });
  for (const t of ticks) {
    grid.appendChild(sv('line', { x1: MARGIN.l, x2: MARGIN.l + iw, y1: y(t), y2: y(t) }));
    axis.appendChild(sv('text', { x: MARGIN.l - 8, y: y(t) + 4, 'text-anchor': 'end' }, tickLabel(t, step)));
  }
  const mid = MARGIN.t + ih / 2;
  axis.appendChild(
    sv('text', { x: 14, y: mid, 'text-anchor': 'middle', transform: `rotate(-90 14 ${mid})` },
      `${v.currency || 'spend'} per ${v.step}`)
  );
  svg.appendChild(grid);
  svg.appendChild(axis);
  return y;
}

/** The line under the chart: its span and what was spent in it. */
export function chartFoot(v: IChartView): string {
  let total = 0;
  let waste = 0;
  let unattributed = 0;
  for (const b of v.buckets) {
    total += b.spend;
    waste += b.waste;
    unattributed += b.unattributed;
  }
  const share = (part: number): string => (total > 0 ? ` (${pct(part / total)})` : '');
  return (
    `${utc(v.range.start).slice(0, 16)} to ${utc(v.range.end).slice(0, 16)} UTC · ` +
    `${moneyText(total, v.currency)} in this range, ${moneyText(waste, v.currency)} of it waste` +
    `${share(waste)}, ${moneyText(unattributed, v.currency)} unattributed${share(unattributed)}`
  );
}

/** Draw the chart into `box`, its span into `foot`; the tooltip is `tip`. */
export function drawChart(box: HTMLElement, foot: HTMLElement, tip: HTMLElement, v: IChartView): void {
  const W = Math.max(420, box.clientWidth - 16);
  const iw = W - MARGIN.l - MARGIN.r;
  const ih = HEIGHT - MARGIN.t - MARGIN.b;
  const max = Math.max(0, ...v.buckets.map(b => b.spend));
  const svg = sv('svg', {
    viewBox: `0 0 ${W} ${HEIGHT}`,
    width: W,
    height: HEIGHT,
    role: 'img',
    'aria-label': `Spend per ${v.step}: active, waste and unattributed`,
    'data-start': v.range.start,
    'data-end': v.range.end
  });
  const y = valueAxis(svg, max, ih, iw, v);
  const n = v.buckets.length;
  const slot = iw / Math.max(1, n);
  const bw = Math.max(1, Math.min(38, slot * 0.72));
  const every = labelEvery(v.step, slot);
  const xaxis = sv('g', { class: 'axis' });
  const bars = sv('g', { class: 'bars' });
  v.buckets.forEach((b, i) => {
    if (isLabelled(b, i, n, v.buckets[0].t, v.step, every)) {
      xLabel(xaxis, b, i, MARGIN.l + i * slot + slot / 2, v, ih);
    }
    if (b.spend <= 0) {
      return;
    }
    const when = bucketWhen(b, v.step);
    const g = drawBar(b, MARGIN.l + i * slot + (slot - bw) / 2, bw, y, when, v.currency);
    g.addEventListener('mousemove', ev => showTip(tip, ev as MouseEvent, when, b, v.currency));
    g.addEventListener('mouseleave', () => {
      tip.hidden = true;
    });
    bars.appendChild(g);
  });
  svg.appendChild(bars);
  svg.appendChild(xaxis);
  svg.appendChild(sv('line', { class: 'baseline', x1: MARGIN.l, x2: MARGIN.l + iw, y1: MARGIN.t + ih, y2: MARGIN.t + ih }));
  if (max <= 0) {
    svg.appendChild(
      sv('text', { class: 'empty', x: MARGIN.l + iw / 2, y: MARGIN.t + ih / 2, 'text-anchor': 'middle' },
        'No spend recorded in this range yet')
    );
  }
  box.textContent = '';
  box.appendChild(svg);
  foot.textContent = chartFoot(v);
}
