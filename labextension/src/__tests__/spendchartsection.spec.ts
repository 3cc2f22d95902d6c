/**
 * @jest-environment jsdom
 *
 * The spend chart section's DOM: controls, one area per band with the
 * server's figures, hatched waste, legend, hover readout, and what it says
 * while loading, offline or with nothing spent. `GET history` is a fake.
 */

jest.mock('@jupyterlab/services', () => ({
  ServerConnection: { makeSettings: () => ({ baseUrl: '/' }) }
}));

const asked: string[] = [];
let answer: (minutes: number, notebook: string | null) => unknown;

jest.mock('../api', () => ({
  ...jest.requireActual('../api'),
  fetchSpendHistory: jest.fn(
    async (minutes: number, notebook?: string | null, _settings?: unknown, fit?: boolean) => {
    const { historyEndpoint } = jest.requireActual('../api');
    asked.push(historyEndpoint(minutes, notebook, fit));
    return answer(minutes, notebook ?? null);
  })
}));

import { SpendChartModel } from '../spendchartmodel';
import { SpendChartSection } from '../spendchartsection';
import { formatClock } from '../spendchart';
import { historyDoc, T0 } from './spendchartfixtures';

const NOTEBOOKS = {
  'train.ipynb': { spend: [0.4, 0.4, 0.1, 0], waste: [0, 0, 0.1, 0] },
  'explore.ipynb': { spend: [0, 0.1, 0.2, 0.2], waste: [0, 0.1, 0.2, 0.1] }
};

function defaultAnswer(minutes: number, notebook: string | null): unknown {
  return historyDoc({ minutes, notebook, server: 0.6, notebooks: NOTEBOOKS });
}

const made: SpendChartSection[] = [];

function section(options: Partial<SpendChartSection.IOptions> = {}): SpendChartSection {
  const s = new SpendChartSection({ model: new SpendChartModel(), ...options });
  document.body.appendChild(s.node);
  made.push(s);
  return s;
}

async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await new Promise(resolve => setTimeout(resolve, 0));
  }
}

beforeEach(() => {
  asked.length = 0;
  answer = defaultAnswer;
  document.body.textContent = '';
});

afterEach(() => {
  made.splice(0).forEach(s => {
    s.dispose();
    s.model.dispose();
  });
});

const q = (s: SpendChartSection, selector: string) =>
  Array.from(s.node.querySelectorAll<HTMLElement | SVGElement>(selector));

describe('SpendChartSection', () => {
  it('says loading, not ok, until a new question is answered', async () => {
    const s = section();
    s.setShown(true);
    await settle();
    let release: () => void = () => undefined;
    answer = (minutes, notebook) =>
      new Promise(resolve => {
        release = () => resolve(defaultAnswer(minutes, notebook));
      });
    s.model.minutes = 10080;
    await settle();
    const chart = s.node.querySelector('.jp-costguard-spend-chart')!;
    // The 6 h figures are gone and the week's not yet here: neither is shown as "ok".
    expect(chart.getAttribute('data-minutes')).toBe('10080');
    expect(chart.getAttribute('data-state')).toBe('loading');
    expect(chart.getAttribute('data-bucket-seconds')).toBeNull();
    release();
    await settle();
    expect(chart.getAttribute('data-state')).toBe('ok');
    expect(chart.getAttribute('data-bucket-seconds')).not.toBeNull();
    expect(s.node.querySelector('.jp-costguard-spend-chart-summary')?.textContent).toMatch(
      /7 days/
    );
  });

  it('draws one area per notebook with the figures the server sent', async () => {
    const s = section();
    expect(s.node.querySelector('h3')?.textContent).toBe('Spend over time');
    expect(s.node.querySelector('.jp-costguard-spend-chart')?.getAttribute('data-state')).toBe(
      'idle'
    );
    s.setShown(true);
    expect(s.model.active).toBe(true);
    await settle();
    expect(asked).toEqual(['history?minutes=360&fit=true']);
    const chart = s.node.querySelector('.jp-costguard-spend-chart')!;
    expect(chart.getAttribute('data-state')).toBe('ok');
    expect(chart.getAttribute('data-bucket-seconds')).toBe('60');
    const svg = chart.querySelector('svg.jp-costguard-spend-chart-svg')!;
    expect(svg.getAttribute('viewBox')).toBe('0 0 300 150');
    expect(svg.getAttribute('width')).toBe('100%');
    const areas = q(s, 'path.jp-costguard-spend-chart-area[data-notebook]');
    expect(areas.map(a => a.getAttribute('data-notebook'))).toEqual([
      'train.ipynb',
      'explore.ipynb'
    ]);
    expect(areas.map(a => Number(a.getAttribute('data-spend')))).toEqual([0.9, 0.5]);
    expect(Number(areas[1].getAttribute('data-waste'))).toBeCloseTo(0.4);
    expect(areas[0].querySelector('title')?.textContent).toContain('train.ipynb: spent USD 0.90');
    expect(q(s, '[data-band=unattributed]').length).toBeGreaterThan(0);
    const waste = q(s, 'path[data-series=waste]');
    expect(waste.map(w => w.getAttribute('data-band'))).toEqual(['train.ipynb', 'explore.ipynb']);
    expect(waste[0].getAttribute('fill')).toMatch(/^url\(#jp-costguard-hatch-\d+\)$/);
    expect(q(s, '.jp-costguard-spend-chart-ytick')[0].textContent).toBe('0/h');
    expect(q(s, '.jp-costguard-spend-chart-xtick').length).toBeGreaterThan(0);
    const legend = q(s, '.jp-costguard-spend-chart-legend li');
    expect(legend.map(li => li.dataset.band ?? li.dataset.series)).toEqual([
      'train.ipynb',
      'explore.ipynb',
      'unattributed',
      'waste'
    ]);
    expect(legend[0].textContent).toBe('train.ipynbUSD 0.90');
    expect(s.node.querySelector('.jp-costguard-spend-chart-summary')?.textContent).toBe(
      'Spent USD 2.40 in the last 6 hours, waste USD 0.50 (21%)'
    );
    const select = s.node.querySelector('select')!;
    expect(Array.from(select.options).map(o => [o.value, o.textContent])).toEqual([
      ['', 'All notebooks'],
      ['train.ipynb', 'train.ipynb'],
      ['explore.ipynb', 'explore.ipynb']
    ]);
  });

  it('offers All notebooks, disabled, while no notebook has spent', async () => {
    answer = (minutes, notebook) =>
      historyDoc({ minutes, notebook, server: 0.6, notebooks: {} });
    const s = section();
    s.setShown(true);
    await settle();
    const select = s.node.querySelector('select')!;
    expect(Array.from(select.options).map(o => [o.value, o.textContent])).toEqual([
      ['', 'All notebooks']
    ]);
    expect(select.disabled).toBe(true);
    expect(select.title).toBe('No notebook has spent anything yet');
  });

  it('switches the window and the notebook', async () => {
    const s = section();
    s.setShown(true);
    await settle();
    const buttons = q(s, '.jp-costguard-spend-chart-range button') as HTMLButtonElement[];
    expect(buttons.map(b => [b.textContent, b.getAttribute('aria-pressed')])).toEqual([
      ['6 h', 'true'],
      ['24 h', 'false'],
      ['7 d', 'false']
    ]);
    buttons[1].click();
    expect(buttons[1].getAttribute('aria-pressed')).toBe('true');
    await settle();
    expect(s.node.querySelector('.jp-costguard-spend-chart')?.getAttribute('data-minutes')).toBe(
      '1440'
    );
    expect(s.node.querySelector('.jp-costguard-spend-chart-summary')?.textContent).toContain(
      'the last 24 hours'
    );
    const select = s.node.querySelector('select')!;
    select.value = 'explore.ipynb';
    select.dispatchEvent(new Event('change'));
    await settle();
    expect(asked).toEqual([
      'history?minutes=360&fit=true',
      'history?minutes=1440&fit=true',
      'history?minutes=1440&notebook=explore.ipynb&fit=true'
    ]);
    expect(
      q(s, 'path.jp-costguard-spend-chart-area').map(a => a.getAttribute('data-notebook'))
    ).toEqual(['explore.ipynb']);
    expect(s.node.querySelector('.jp-costguard-spend-chart')?.getAttribute('data-notebook')).toBe(
      'explore.ipynb'
    );
    expect(select.value).toBe('explore.ipynb');
    s.setShown(false);
    expect(s.model.active).toBe(false);
  });

  it('reads out the hovered bucket', async () => {
    const s = section();
    s.setShown(true);
    await settle();
    const svg = s.node.querySelector('svg')!;
    svg.getBoundingClientRect = () =>
      ({ left: 0, top: 0, width: 600, height: 300, right: 600, bottom: 300 }) as DOMRect;
    const readout = s.node.querySelector<HTMLElement>('.jp-costguard-spend-chart-readout')!;
    expect(readout.hidden).toBe(true);
    // x 92 in the 600 px-wide drawing is 46 in the viewBox: the first bucket
    svg.dispatchEvent(new MouseEvent('mousemove', { clientX: 92, clientY: 50 }));
    expect(readout.hidden).toBe(false);
    expect(readout.dataset.index).toBe('0');
    expect(readout.textContent).toContain('train.ipynb: USD 0.40');
    expect(readout.textContent).toContain('Total USD 0.60, waste USD 0.00');
    const cursor = svg.querySelector('.jp-costguard-spend-chart-cursor')!;
    expect(cursor.getAttribute('visibility')).toBe('visible');
    svg.dispatchEvent(new MouseEvent('mouseleave'));
    expect(readout.hidden).toBe(true);
    expect(cursor.getAttribute('visibility')).toBe('hidden');
  });

  it('says why there is no chart', async () => {
    answer = () => historyDoc({ minutes: 360, server: 0 });
    const s = section();
    s.setShown(true);
    await settle();
    const chart = s.node.querySelector('.jp-costguard-spend-chart')!;
    expect(chart.getAttribute('data-state')).toBe('empty');
    expect(s.node.querySelector('.jp-costguard-spend-chart-message')?.textContent).toBe(
      'Nothing spent in the last 6 hours'
    );

    answer = () => {
      throw { response: { status: 404 }, message: 'no costs recorded' };
    };
    s.model.notebook = 'new.ipynb';
    await settle();
    expect(chart.getAttribute('data-state')).toBe('unavailable');
    expect(s.node.querySelector('.jp-costguard-spend-chart-message')?.textContent).toBe(
      'No spend recorded for this notebook yet'
    );
    answer = () => {
      throw new TypeError('Failed to fetch');
    };
    s.model.notebook = null;
    await settle();
    expect(chart.getAttribute('data-state')).toBe('offline');
    expect(s.node.querySelector('.jp-costguard-spend-chart-message')?.textContent).toBe(
      "Can't reach the server; retrying"
    );
  });

  it('has no notebook selector when it shows one notebook only', async () => {
    const s = section({
      model: new SpendChartModel({ notebook: 'train.ipynb' }),
      notebookChoice: false,
      layout: { width: 480, height: 140, left: 46, right: 8, top: 8, bottom: 18 }
    });
    s.setShown(true);
    await settle();
    expect(s.node.querySelector('select')).toBeNull();
    expect(asked).toEqual(['history?minutes=360&notebook=train.ipynb&fit=true']);
    expect(s.node.querySelector('svg')?.getAttribute('viewBox')).toBe('0 0 480 140');
    expect(
      q(s, 'path.jp-costguard-spend-chart-area').map(a => a.getAttribute('data-notebook'))
    ).toEqual(['train.ipynb']);
  });

  it('draws a young server over its own minutes and says since when', async () => {
    const since = T0 + 60;
    answer = (minutes, notebook) =>
      historyDoc({ n: 5, minutes, notebook, server: 0.3, since, time: T0 + 4 * 60 + 20,
                   notebooks: { 'train.ipynb': { spend: [0, 0.2, 0.2, 0.2, 0.1] } } });
    const s = section();
    s.setShown(true);
    await settle();
    const chart = s.node.querySelector('.jp-costguard-spend-chart')!;
    expect(chart.getAttribute('data-since')).toBe(String(since));
    expect(chart.getAttribute('data-buckets')).toBe('5');
    const clock = formatClock(since);
    expect(s.node.querySelector('.jp-costguard-spend-chart-summary')?.textContent).toBe(
      `Spent USD 1.50 since ${clock}, waste USD 0.00 (0%)`
    );
    const title = q(s, 'path.jp-costguard-spend-chart-area[data-notebook]')[0].querySelector('title');
    expect(title?.textContent).toContain(`since ${clock}`);
    // every bucket has room under the pointer: five across the plot, not one sliver
    const xs = s.geometry!.xs;
    expect(xs[1] - xs[0]).toBeGreaterThan(40);
    // the 6 h button says it is a maximum
    const button = s.node.querySelector<HTMLButtonElement>('button[data-minutes="360"]')!;
    expect(button.title).toContain('at most');
  });

  it('keeps each notebook\'s colour when the ranking changes', async () => {
    // train spends most, then explore overtakes it: the server lists explore first
    let overtaken = false;
    answer = (minutes, notebook) =>
      historyDoc({ minutes, notebook, server: 1, notebooks: {
        'train.ipynb': { spend: [0.3, 0.3, 0.3, 0.3] },
        'explore.ipynb': { spend: overtaken ? [0.5, 0.5, 0.5, 0.5] : [0.1, 0.1, 0.1, 0.1] }
      } });
    const s = section();
    s.setShown(true);
    await settle();
    const colorOf = (path: string) =>
      q(s, `path.jp-costguard-spend-chart-area[data-notebook="${path}"]`)[0]
        .getAttribute('class')!.match(/color-\d+/)?.[0];
    const before = { train: colorOf('train.ipynb'), explore: colorOf('explore.ipynb') };
    expect(before.train).not.toBe(before.explore);
    overtaken = true;
    await s.model.refresh();
    await settle();
    expect(
      q(s, 'path.jp-costguard-spend-chart-area[data-notebook]').map(a => a.getAttribute('data-notebook'))
    ).toEqual(['explore.ipynb', 'train.ipynb']);
    expect({ train: colorOf('train.ipynb'), explore: colorOf('explore.ipynb') }).toEqual(before);
  });
});
