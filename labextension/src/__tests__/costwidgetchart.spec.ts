/**
 * @jest-environment jsdom
 *
 * The cost widget's expanded view: a toggle on the line opens the spend
 * chart of the widget's notebook, which survives the line's refreshes and
 * polls only while open. `@jupyter-widgets/base` and the REST helpers are
 * fakes (as in costwidget.spec.ts).
 */

jest.mock('@jupyter-widgets/base', () => jest.requireActual('./fakewidgets'));

jest.mock('@jupyterlab/services', () => ({
  ServerConnection: { makeSettings: () => ({ baseUrl: '/' }) }
}));

const asked: string[] = [];

jest.mock('../api', () => ({
  ...jest.requireActual('../api'),
  requestAPI: jest.fn(async (endpoint: string) => {
    asked.push(endpoint);
    const key = endpoint.split('?')[0];
    if (key === 'kernels') {
      return {
        simulated: false,
        currency: 'USD',
        time: 1,
        kernels: [
          {
            kernel_id: 'k-1',
            notebook: withNotebook ? 'work/explore.ipynb' : null,
            execution_state: 'idle',
            idle_seconds: 5,
            gpus: [],
            gpu_memory_bytes: 0,
            gpu_utilization_percent: null,
            spend: 0.5,
            waste: 0.1,
            spend_rate_per_hour: 4
          }
        ]
      };
    }
    throw { response: { status: 404 }, message: 'not found' };
  }),
  fetchSpendHistory: jest.fn(async (minutes: number, notebook?: string | null) => {
    const { historyEndpoint } = jest.requireActual('../api');
    asked.push(historyEndpoint(minutes, notebook));
    const { historyDoc } = jest.requireActual('./spendchartfixtures');
    return historyDoc({
      minutes,
      notebook: notebook ?? null,
      notebooks: { [notebook ?? 'x']: { spend: [0.1, 0.2, 0.1, 0.1], waste: [0.1, 0, 0, 0] } }
    });
  })
}));

import { CostWidgetModel, CostWidgetView } from '../costwidget';

let withNotebook = true;

function make(): CostWidgetView {
  const model = new (CostWidgetModel as any)({ kernel_id: 'k-1', refresh_seconds: 3600 });
  const view = new (CostWidgetView as any)({ model }) as CostWidgetView;
  document.body.appendChild(view.el);
  view.render();
  return view;
}

async function tick(view: CostWidgetView): Promise<void> {
  await view.poll!.refresh();
  await view.poll!.tick;
}

async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await new Promise(resolve => setTimeout(resolve, 0));
  }
}

beforeEach(() => {
  jest.spyOn(console, 'debug').mockImplementation(() => undefined);
  asked.length = 0;
  withNotebook = true;
  document.body.textContent = '';
});

describe('CostWidgetView expanded view', () => {
  it("opens the notebook's spend chart and keeps it across refreshes", async () => {
    const view = make();
    await tick(view);
    const el = view.el;
    expect(el.dataset.expanded).toBe('false');
    const toggle = el.querySelector<HTMLButtonElement>('.jp-costguard-widget-expand')!;
    expect(toggle.textContent).toBe('▸ chart');
    expect(toggle.getAttribute('aria-expanded')).toBe('false');
    expect(toggle.classList).not.toContain('jp-costguard-widget-part');
    expect(el.querySelector('.jp-costguard-widget-chart')).toBeNull();
    expect(asked.filter(a => a.startsWith('history'))).toEqual([]);

    toggle.click();
    expect(el.dataset.expanded).toBe('true');
    const chart = el.querySelector('.jp-costguard-widget-chart')!;
    expect(chart.classList).toContain('jp-costguard-spend-chart-section');
    expect(chart.previousElementSibling?.classList).toContain('jp-costguard-widget-line');
    expect(chart.querySelector('select')).toBeNull();
    await settle();
    expect(asked.filter(a => a.startsWith('history'))).toEqual([
      'history?minutes=360&notebook=work%2Fexplore.ipynb'
    ]);
    expect(
      Array.from(chart.querySelectorAll('path.jp-costguard-spend-chart-area')).map(a =>
        a.getAttribute('data-notebook')
      )
    ).toEqual(['work/explore.ipynb']);
    expect(chart.querySelector('svg')?.getAttribute('viewBox')).toBe('0 0 480 140');
    const expandedToggle = el.querySelector('.jp-costguard-widget-expand')!;
    expect(expandedToggle.textContent).toBe('▾ chart');
    expect(expandedToggle.getAttribute('aria-expanded')).toBe('true');

    // the line refreshes; the chart is the same node, still after the line
    await tick(view);
    expect(el.querySelector('.jp-costguard-widget-chart')).toBe(chart);
    expect(el.querySelectorAll('.jp-costguard-widget-line')).toHaveLength(1);
    expect(el.lastElementChild).toBe(chart);
    expect(view.chart?.model.active).toBe(true);

    el.querySelector<HTMLButtonElement>('.jp-costguard-widget-expand')!.click();
    expect(el.dataset.expanded).toBe('false');
    expect(el.querySelector('.jp-costguard-widget-chart')).toBeNull();
    expect(view.chart?.model.active).toBe(false);

    const model = view.chart!.model;
    view.remove();
    expect(model.isDisposed).toBe(true);
    expect(view.chart).toBeNull();
  });

  it('offers no chart for a kernel without a notebook', async () => {
    withNotebook = false;
    const view = make();
    await tick(view);
    expect(view.el.querySelector('.jp-costguard-widget-expand')).toBeNull();
    view.remove();
  });
});
