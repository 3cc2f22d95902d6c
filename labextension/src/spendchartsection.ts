/**
 * "Spend over time": the spend chart as a section the cost panel hosts
 * (`CostPanel.IPanelSection`, after Totals) and the cost widget shows in its
 * expanded view. Renders a SpendChartModel in plain SVG (no charting
 * library): one stacked area per notebook (most spent at the bottom), the
 * rest as "Other notebooks", then what no notebook spent; the waste part of
 * each band is hatched on top of it. Geometry comes from `spendchart.ts`.
 *
 * Stable DOM hooks: `section.jp-costguard-spend-chart-section`, its
 * `.jp-costguard-spend-chart-range button[data-minutes]` (`aria-pressed`),
 * `select.jp-costguard-spend-chart-notebook` (value `""`: all notebooks;
 * absent in the widget), `.jp-costguard-spend-chart-summary`;
 * `.jp-costguard-spend-chart` (`data-state` = the model's state or `empty`,
 * `data-minutes`, `data-bucket-seconds`, `data-buckets` (how many),
 * `data-since` (the ledger's first minute, when the window was fitted to
 * it), `data-notebook` when one is chosen) holding `svg.jp-costguard-spend-chart-svg` (viewBox, width 100%)
 * with `path.jp-costguard-spend-chart-area[data-band]` per band
 * (`data-notebook` on notebook bands, `data-band="other"` /
 * `data-band="unattributed"` otherwise; `data-spend` / `data-waste`: the
 * band's totals in the window as the server sent them; a `<title>`),
 * `path.jp-costguard-spend-chart-waste[data-series=waste][data-band]`,
 * `.jp-costguard-spend-chart-ytick` / `-xtick` labels, the hover
 * `line.jp-costguard-spend-chart-cursor`; `.jp-costguard-spend-chart-message`
 * (loading, offline, nothing spent); `.jp-costguard-spend-chart-readout`
 * (the hovered bucket's figures, `data-index`; `hidden` otherwise);
 * `ul.jp-costguard-spend-chart-legend` with `li[data-band]` (and
 * `[data-notebook]`) and `li[data-series=waste]`.
 */
import { Disposable } from './disposable';
import { el, setAttr, setText } from './dom';
import { formatMoney } from './format';
import {
  bandsOf,
  bandTitle,
  bucketAt,
  bucketLines,
  CHART_RANGES,
  chartGeometry,
  DEFAULT_LAYOUT,
  IBand,
  IChartGeometry,
  IChartLayout,
  MAX_NOTEBOOK_BANDS,
  NotebookColors,
  summaryLine,
  windowPhrase
} from './spendchart';
import { SpendChartModel } from './spendchartmodel';

const SVG_NS = 'http://www.w3.org/2000/svg';

/** CSS classes of the chart; stable for browser tests. */
export namespace SpendChartClasses {
  export const section = 'jp-costguard-spend-chart-section';
  export const controls = 'jp-costguard-spend-chart-controls';
  export const range = 'jp-costguard-spend-chart-range';
  export const notebook = 'jp-costguard-spend-chart-notebook';
  export const summary = 'jp-costguard-spend-chart-summary';
  export const chart = 'jp-costguard-spend-chart';
  export const svg = 'jp-costguard-spend-chart-svg';
  export const area = 'jp-costguard-spend-chart-area';
  export const waste = 'jp-costguard-spend-chart-waste';
  export const grid = 'jp-costguard-spend-chart-grid';
  export const ytick = 'jp-costguard-spend-chart-ytick';
  export const xtick = 'jp-costguard-spend-chart-xtick';
  export const cursor = 'jp-costguard-spend-chart-cursor';
  export const message = 'jp-costguard-spend-chart-message';
  export const readout = 'jp-costguard-spend-chart-readout';
  export const legend = 'jp-costguard-spend-chart-legend';
  export const swatch = 'jp-costguard-spend-chart-swatch';
  /** Fill of a band: `-color-<i>` for notebooks, `-color-other`, `-color-unattributed`. */
  export function color(band: IBand): string {
    if (band.kind === 'notebook') {
      return `jp-costguard-spend-chart-color-${band.color}`;
    }
    return `jp-costguard-spend-chart-color-${band.kind}`;
  }
}

/** The section title. */
export const SPEND_CHART_TITLE = 'Spend over time';

let hatchCount = 0;

function svgEl<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: { [name: string]: string | number } = {},
  className?: string
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    node.setAttribute(name, String(value));
  }
  if (className) {
    node.setAttribute('class', className);
  }
  return node;
}

function titled<T extends SVGElement>(node: T, text: string): T {
  const title = svgEl('title');
  title.textContent = text;
  node.appendChild(title);
  return node;
}

/**
 * Draw `geometry` into `svg` (replacing what it held): grid and y labels,
 * the bands and their hatched waste, x labels, and a hidden cursor line.
 */
export function drawChart(
  svg: SVGSVGElement,
  geometry: IChartGeometry,
  options: { currency: string; phrase: string; hatchId: string }
): void {
  const { layout, plot } = geometry;
  svg.textContent = '';
  svg.setAttribute('viewBox', `0 0 ${layout.width} ${layout.height}`);
  const defs = svgEl('defs');
  const pattern = svgEl('pattern', {
    id: options.hatchId,
    width: 4,
    height: 4,
    patternUnits: 'userSpaceOnUse',
    patternTransform: 'rotate(45)'
  });
  pattern.appendChild(
    svgEl('line', { x1: 0, y1: 0, x2: 0, y2: 4 }, 'jp-costguard-spend-chart-hatch')
  );
  defs.appendChild(pattern);
  svg.appendChild(defs);

  const grid = svgEl('g', {}, SpendChartClasses.grid);
  for (const tick of geometry.yTicks) {
    grid.appendChild(
      svgEl('line', { x1: plot.x, x2: plot.x + plot.w, y1: tick.pos, y2: tick.pos })
    );
    const label = svgEl(
      'text',
      { x: plot.x - 4, y: tick.pos, 'text-anchor': 'end', 'dominant-baseline': 'middle' },
      SpendChartClasses.ytick
    );
    label.textContent = tick.label;
    grid.appendChild(label);
  }
  svg.appendChild(grid);

  const areas = svgEl('g', {}, 'jp-costguard-spend-chart-areas');
  for (const shape of geometry.shapes) {
    const b = shape.band;
    const area = svgEl(
      'path',
      { d: shape.area, 'data-band': b.key, 'data-spend': b.totalSpend, 'data-waste': b.totalWaste },
      `${SpendChartClasses.area} ${SpendChartClasses.color(b)}`
    );
    if (b.path !== null) {
      area.setAttribute('data-notebook', b.path);
    }
    areas.appendChild(titled(area, bandTitle(b, options.phrase, options.currency)));
    if (shape.wasteArea) {
      const waste = svgEl(
        'path',
        {
          d: shape.wasteArea,
          'data-series': 'waste',
          'data-band': b.key,
          'data-waste': b.totalWaste,
          fill: `url(#${options.hatchId})`
        },
        SpendChartClasses.waste
      );
      if (b.path !== null) {
        waste.setAttribute('data-notebook', b.path);
      }
      areas.appendChild(
        titled(waste, `${b.label}: waste ${formatMoney(b.totalWaste, options.currency)} ${options.phrase}`)
      );
    }
  }
  svg.appendChild(areas);

  const axis = svgEl('g', {}, 'jp-costguard-spend-chart-xaxis');
  axis.appendChild(
    svgEl('line', { x1: plot.x, x2: plot.x + plot.w, y1: plot.y + plot.h, y2: plot.y + plot.h })
  );
  geometry.xTicks.forEach((tick, i) => {
    const anchor =
      tick.pos < plot.x + 14 ? 'start' : tick.pos > plot.x + plot.w - 14 ? 'end' : 'middle';
    const label = svgEl(
      'text',
      { x: tick.pos, y: layout.height - 4, 'text-anchor': anchor, 'data-index': i },
      SpendChartClasses.xtick
    );
    label.textContent = tick.label;
    axis.appendChild(label);
    axis.appendChild(
      svgEl('line', { x1: tick.pos, x2: tick.pos, y1: plot.y + plot.h, y2: plot.y + plot.h + 3 })
    );
  });
  svg.appendChild(axis);

  const cursor = svgEl(
    'line',
    { x1: plot.x, x2: plot.x, y1: plot.y, y2: plot.y + plot.h, visibility: 'hidden' },
    SpendChartClasses.cursor
  );
  svg.appendChild(cursor);
}

export namespace SpendChartSection {
  export interface IOptions {
    model: SpendChartModel;
    /** Offer the notebook selector (default true; the widget's chart has one notebook). */
    notebookChoice?: boolean;
    /** Section title (default "Spend over time"). */
    title?: string;
    /** The SVG's user-unit box (default: the right sidebar's width). */
    layout?: IChartLayout;
    /** Extra class of the section (e.g. the cost panel's `jp-costguard-section`). */
    className?: string;
  }
}

/** The chart, its controls, summary, readout and legend; renders its model. */
export class SpendChartSection extends Disposable {
  constructor(options: SpendChartSection.IOptions) {
    super();
    this.model = options.model;
    this._notebookChoice = options.notebookChoice ?? true;
    this._layout = options.layout ?? DEFAULT_LAYOUT;
    this._hatchId = `jp-costguard-hatch-${++hatchCount}`;

    const node = el('section', `${SpendChartClasses.section} ${options.className ?? ''}`.trim());
    this.node = node;
    node.appendChild(
      el('h3', 'jp-costguard-section-title', options.title ?? SPEND_CHART_TITLE)
    );

    const controls = el('div', SpendChartClasses.controls);
    const range = el('div', SpendChartClasses.range);
    range.setAttribute('role', 'group');
    range.setAttribute('aria-label', 'Window');
    for (const r of CHART_RANGES) {
      const button = el('button', 'jp-costguard-spend-chart-range-button', r.label);
      button.type = 'button';
      button.dataset.minutes = String(r.minutes);
      button.title = `Spend over ${r.words} at most: from the first sample while the server is younger`;
      button.addEventListener('click', () => {
        this.model.minutes = r.minutes;
      });
      range.appendChild(button);
      this._rangeButtons.push(button);
    }
    controls.appendChild(range);
    if (this._notebookChoice) {
      const select = el('select', SpendChartClasses.notebook);
      select.setAttribute('aria-label', 'Notebook');
      select.title = 'All notebooks stacked, or one notebook';
      select.addEventListener('change', () => {
        this.model.notebook = select.value || null;
      });
      controls.appendChild(select);
      this._select = select;
    }
    node.appendChild(controls);

    this._summary = el('div', SpendChartClasses.summary);
    node.appendChild(this._summary);

    this._chart = el('div', SpendChartClasses.chart);
    this._svg = document.createElementNS(SVG_NS, 'svg');
    this._svg.setAttribute('class', SpendChartClasses.svg);
    this._svg.setAttribute('width', '100%');
    this._svg.setAttribute('role', 'img');
    this._svg.setAttribute('preserveAspectRatio', 'xMidYMid meet');
    this._svg.setAttribute('viewBox', `0 0 ${this._layout.width} ${this._layout.height}`);
    this._svg.addEventListener('mousemove', this._onMove);
    this._svg.addEventListener('mouseleave', this._onLeave);
    this._chart.appendChild(this._svg);
    this._message = el('div', SpendChartClasses.message);
    this._chart.appendChild(this._message);
    node.appendChild(this._chart);

    this._readout = el('div', SpendChartClasses.readout);
    this._readout.hidden = true;
    node.appendChild(this._readout);
    this._legend = el('ul', SpendChartClasses.legend);
    node.appendChild(this._legend);

    this.model.changed.connect(this.render, this);
    this.render();
  }

  readonly node: HTMLElement;
  readonly model: SpendChartModel;

  /** The host shows (true) or hides (false) the chart: it polls only while shown. */
  setShown(shown: boolean): void {
    this.model.active = shown;
  }

  /** What is drawn now (null before data). */
  get geometry(): IChartGeometry | null {
    return this._geometry;
  }

  protected onDispose(): void {
    this.model.changed.disconnect(this.render, this);
    this._svg.removeEventListener('mousemove', this._onMove);
    this._svg.removeEventListener('mouseleave', this._onLeave);
  }

  /** Redraw from the model. */
  render(): void {
    const model = this.model;
    const doc = model.data;
    for (const button of this._rangeButtons) {
      setAttr(button, 'aria-pressed', button.dataset.minutes === String(model.minutes) ? 'true' : 'false');
    }
    this._renderSelect();
    setAttr(this._chart, 'data-minutes', String(model.minutes));
    setAttr(this._chart, 'data-notebook', model.notebook);
    const phrase = windowPhrase(doc, model.minutes);
    if (!doc) {
      this._geometry = null;
      this._svg.textContent = '';
      this._svg.style.display = 'none';
      // No answer to this question yet: an `ok` poll state is the last
      // question's, so the chart says loading.
      setAttr(this._chart, 'data-state', model.state === 'ok' ? 'loading' : model.state);
      setAttr(this._chart, 'data-bucket-seconds', null);
      setAttr(this._chart, 'data-since', null);
      setAttr(this._chart, 'data-buckets', null);
      setText(this._message, this._stateMessage());
      this._message.hidden = false;
      setText(this._summary, '');
      this._legend.textContent = '';
      this._hideReadout();
      return;
    }
    const currency = doc.currency || 'USD';
    const bands = bandsOf(doc, MAX_NOTEBOOK_BANDS, this._colors);
    const geometry = chartGeometry(doc, bands, this._layout);
    this._geometry = geometry;
    this._currency = currency;
    setAttr(this._chart, 'data-state', geometry.empty ? 'empty' : 'ok');
    setAttr(this._chart, 'data-bucket-seconds', String(geometry.bucketSeconds));
    setAttr(this._chart, 'data-since', typeof doc.since === 'number' ? String(doc.since) : null);
    setAttr(this._chart, 'data-buckets', String(geometry.times.length));
    this._svg.style.display = '';
    drawChart(this._svg, geometry, { currency, phrase, hatchId: this._hatchId });
    this._svg.setAttribute(
      'aria-label',
      `${SPEND_CHART_TITLE}: ${summaryLine(doc, bands, currency)}`
    );
    setText(this._message, geometry.empty ? `Nothing spent ${phrase}` : '');
    this._message.hidden = !geometry.empty;
    setText(this._summary, summaryLine(doc, bands, currency));
    this._renderLegend(bands, currency);
    if (this._hovered >= 0) {
      this._showReadout(this._hovered);
    }
  }

  private _stateMessage(): string {
    const state = this.model.state;
    if (state === 'offline') {
      return "Can't reach the server; retrying";
    }
    if (state === 'unavailable') {
      return this.model.notebook
        ? 'No spend recorded for this notebook yet'
        : 'Spend history is not available on this server';
    }
    return 'Loading…';
  }

  private _renderSelect(): void {
    const select = this._select;
    if (!select) {
      return;
    }
    const choices = ['', ...this.model.notebooks];
    const current = Array.from(select.options).map(o => o.value);
    // compared item by item: [''] and [] join alike, which once left the
    // picker empty on a server whose notebooks had spent nothing yet
    const same =
      current.length === choices.length && current.every((v, i) => v === choices[i]);
    // nothing to pick but "All notebooks" until a notebook has spent
    select.disabled = choices.length < 2;
    select.title = select.disabled ? 'No notebook has spent anything yet' : '';
    if (!same) {
      select.textContent = '';
      for (const value of choices) {
        const option = el('option', undefined, value || 'All notebooks');
        option.value = value;
        select.appendChild(option);
      }
    }
    const wanted = this.model.notebook ?? '';
    if (select.value !== wanted) {
      select.value = wanted;
    }
  }

  private _renderLegend(bands: ReadonlyArray<IBand>, currency: string): void {
    const legend = this._legend;
    legend.textContent = '';
    const phrase = windowPhrase(this.model.data, this.model.minutes);
    for (const b of bands) {
      if (b.kind === 'unattributed' && b.totalSpend <= 0) {
        continue;
      }
      const item = el('li', 'jp-costguard-spend-chart-legend-item');
      item.dataset.band = b.key;
      if (b.path !== null) {
        item.dataset.notebook = b.path;
      }
      item.title = bandTitle(b, phrase, currency);
      item.appendChild(el('span', `${SpendChartClasses.swatch} ${SpendChartClasses.color(b)}`));
      item.appendChild(el('span', 'jp-costguard-spend-chart-legend-label', b.label));
      item.appendChild(
        el('span', 'jp-costguard-spend-chart-legend-value', formatMoney(b.totalSpend, currency))
      );
      legend.appendChild(item);
    }
    const waste = bands.reduce((total, b) => total + b.totalWaste, 0);
    const item = el('li', 'jp-costguard-spend-chart-legend-item');
    item.dataset.series = 'waste';
    item.title =
      'Hatched: waste, GPU time held while the GPU was idle and the kernel was not busy';
    item.appendChild(
      el('span', `${SpendChartClasses.swatch} jp-costguard-spend-chart-swatch-waste`)
    );
    item.appendChild(el('span', 'jp-costguard-spend-chart-legend-label', 'waste'));
    item.appendChild(
      el('span', 'jp-costguard-spend-chart-legend-value', formatMoney(waste, currency))
    );
    legend.appendChild(item);
  }

  private _onMove = (event: MouseEvent): void => {
    const geometry = this._geometry;
    if (!geometry) {
      return;
    }
    const box = this._svg.getBoundingClientRect();
    if (box.width <= 0) {
      return;
    }
    // The viewBox keeps its aspect ratio: the drawing is centred vertically only.
    const x = ((event.clientX - box.left) * geometry.layout.width) / box.width;
    const index = bucketAt(geometry, x);
    if (index < 0) {
      this._hideReadout();
      return;
    }
    this._showReadout(index);
  };

  private _onLeave = (): void => {
    this._hideReadout();
  };

  private _showReadout(index: number): void {
    const geometry = this._geometry;
    if (!geometry || index >= geometry.times.length) {
      this._hideReadout();
      return;
    }
    this._hovered = index;
    const lines = bucketLines(geometry, index, this._currency);
    this._readout.textContent = '';
    lines.forEach((line, i) =>
      this._readout.appendChild(
        el('div', i === 0 ? 'jp-costguard-spend-chart-readout-time' : 'jp-costguard-spend-chart-readout-line', line)
      )
    );
    this._readout.dataset.index = String(index);
    this._readout.hidden = false;
    const cursor = this._svg.querySelector(`.${SpendChartClasses.cursor}`);
    if (cursor) {
      const x = String(geometry.xs[index]);
      cursor.setAttribute('x1', x);
      cursor.setAttribute('x2', x);
      cursor.setAttribute('visibility', 'visible');
    }
  }

  private _hideReadout(): void {
    this._hovered = -1;
    this._readout.hidden = true;
    delete this._readout.dataset.index;
    this._svg
      .querySelector(`.${SpendChartClasses.cursor}`)
      ?.setAttribute('visibility', 'hidden');
  }

  private _chart: HTMLElement;
  /** Each notebook's colour, for the life of this chart. */
  private _colors = new NotebookColors();
  private _currency = 'USD';
  private _geometry: IChartGeometry | null = null;
  private _hatchId: string;
  private _hovered = -1;
  private _layout: IChartLayout;
  private _legend: HTMLElement;
  private _message: HTMLElement;
  private _notebookChoice: boolean;
  private _rangeButtons: HTMLButtonElement[] = [];
  private _readout: HTMLElement;
  private _select: HTMLSelectElement | null = null;
  private _summary: HTMLElement;
  private _svg: SVGSVGElement;
}
