/**
 * @jest-environment jsdom
 *
 * Same figure, same text: the in-notebook cost widget, the cost panel and the
 * status bar render one set of server documents (one fixture, served as JSON),
 * and every figure two of them show reads the same in both.
 */
jest.mock('@jupyter-widgets/base', () => jest.requireActual('./fakewidgets'));

jest.mock('../api', () => ({
  ...jest.requireActual('../api'),
  requestAPI: jest.fn()
}));

import { Widget } from '@lumino/widgets';

import { requestAPI } from '../api';
import { CostPanel } from '../costpanel';
import { CostPanelModel } from '../costpanelmodel';
import {
  CostWidgetModel,
  CostWidgetView,
  setCostWidgetServerSettings
} from '../costwidget';
import { CostStatusWidget } from '../statusbar';
import { CostStatusModel } from '../statusmodel';
import { gpus, kernel, notebook, status } from './fixtures';

const GiB = 1024 ** 3;
const PATH = 'work/explore.ipynb';
const TIME = 1764460800;

// Figures where the widget's own formatters used to differ from format.ts
// (`4.0 GiB` against `4 GiB`), and some that need more than two decimals.
const figures = {
  gpus: ['GPU-0'],
  gpu_memory_bytes: 4 * GiB,
  gpu_utilization_percent: 2.54,
  idle_seconds: 725,
  spend_rate_per_hour: 0.0421
};
const kernelDoc = kernel('k-1', PATH, 1.2345, { ...figures, waste: 0.5 });
const notebookDoc = notebook(PATH, 1.2345, {
  ...figures,
  waste: 0.5,
  kernel_ids: ['k-1']
});
const common = { simulated: false, currency: 'USD', time: TIME };

/** The server's documents, by endpoint. */
const documents: { [endpoint: string]: unknown } = {
  status: { ...status, simulated: false },
  notebooks: { ...common, notebooks: [notebookDoc] },
  [`notebooks/${PATH}`]: { ...common, ...notebookDoc, kernels: [kernelDoc] },
  kernels: { ...common, kernels: [kernelDoc] },
  gpus: { ...gpus, simulated: false },
  alerts: { ...common, alerts: [] },
  // the widget's feed asks for the notebook's snapshot too (none here)
  snapshots: {
    snapshots: [],
    currency: 'USD',
    waste_avoided: 0,
    storage_price: null,
    storage_cost: null,
    storage_cost_per_month: null
  }
};

const mockedRequest = requestAPI as jest.MockedFunction<typeof requestAPI>;

beforeAll(() => setCostWidgetServerSettings({} as any));
afterAll(() => setCostWidgetServerSettings(null));

beforeEach(() => {
  mockedRequest.mockImplementation(async (endPoint = '') => {
    const doc = documents[endPoint.split('?')[0]];
    if (doc === undefined) {
      throw new Error(`unexpected ${endPoint}`);
    }
    // A fresh copy, as from the wire.
    return JSON.parse(JSON.stringify(doc));
  });
});

async function render() {
  const data = new CostStatusModel({ serverSettings: {} as any, autoStart: false });
  await data.refresh();
  await data.refreshAlerts();
  data.activePath = PATH;

  const panelModel = new CostPanelModel({ data });
  const panel = new CostPanel({ model: panelModel });
  Widget.attach(panel, document.body);
  await data.refresh(); // shown, the panel's kernels and gpus come with this refresh

  const bar = new CostStatusWidget(data);

  const model = new (CostWidgetModel as any)({ kernel_id: 'k-1', refresh_seconds: 3600 });
  const view = new (CostWidgetView as any)({ model }) as CostWidgetView;
  document.body.appendChild(view.el);
  view.render();
  await view.poll!.refresh();
  await view.poll!.tick;

  const text = (root: Element, selector: string): string => {
    const node = root.querySelector(selector);
    if (!node) {
      throw new Error(`nothing matches ${selector}`);
    }
    return node.textContent ?? '';
  };
  const notebookRow = (key: string) =>
    text(panel.node, `.jp-costguard-notebook-row[data-path="${PATH}"] td[data-key="${key}"]`);
  const kernelRow = (key: string) =>
    text(panel.node, `.jp-costguard-kernel-row[data-kernel-id="k-1"] td[data-key="${key}"]`);
  const widgetPart = (kind: string) => text(view.el, `.jp-costguard-widget-${kind}`);
  const cleanup = () => {
    view.remove();
    Widget.detach(panel);
    panel.dispose();
    panelModel.dispose();
    bar.dispose();
    data.dispose();
  };
  return { panel, bar, view, text, notebookRow, kernelRow, widgetPart, cleanup };
}

describe('one document, one text', () => {
  it('the widget and the panel write every shared figure the same', async () => {
    const { panel, view, text, notebookRow, kernelRow, widgetPart, cleanup } = await render();
    try {
      expect(view.el.dataset.state).toBe('ok');
      // The notebook's spend and waste.
      expect(widgetPart('spend')).toBe(`spent ${notebookRow('spend')}`);
      expect(widgetPart('waste')).toMatch(new RegExp(`^waste ${notebookRow('waste')} \\(`));
      // The kernel's GPU utilisation and GPU memory (the notebook's row agrees).
      expect(widgetPart('gpu')).toBe(
        `GPU ${kernelRow('gpu_utilization_percent')}, ${kernelRow('gpu_memory_bytes')}`
      );
      expect(notebookRow('gpu_utilization_percent')).toBe(kernelRow('gpu_utilization_percent'));
      expect(notebookRow('gpu_memory_bytes')).toBe(kernelRow('gpu_memory_bytes'));
      // Idle time.
      expect(widgetPart('idle')).toBe(`idle ${kernelRow('idle_seconds')}`);
      // The instance's rate, and the kernel's own rate (in the tooltip).
      const rate = text(panel.node, 'dd[data-field="rate"]');
      expect(widgetPart('rate')).toBe(`p4d.24xlarge ${rate}`);
      const ratePart = view.el.querySelector<HTMLElement>('.jp-costguard-widget-rate')!;
      expect(ratePart.title).toContain(`this kernel now costs ${kernelRow('spend_rate_per_hour')}`);
      expect(notebookRow('spend_rate_per_hour')).toBe(kernelRow('spend_rate_per_hour'));

      // What those strings are.
      expect(widgetPart('gpu')).toBe('GPU 2.5%, 4 GiB');
      expect(widgetPart('spend')).toBe('spent USD 1.23');
      expect(widgetPart('idle')).toBe('idle 12 min');
      expect(kernelRow('spend_rate_per_hour')).toBe('USD 0.042/h');
    } finally {
      cleanup();
    }
  });

  it('the status bar agrees with both on the rate and the notebook spend', async () => {
    const { panel, bar, text, notebookRow, widgetPart, cleanup } = await render();
    try {
      const rate = text(bar.node, '.jp-costguard-rate');
      expect(rate).toBe(text(panel.node, 'dd[data-field="rate"]'));
      expect(widgetPart('rate')).toBe(`p4d.24xlarge ${rate}`);
      expect(text(bar.node, '.jp-costguard-notebook')).toBe(`notebook ${notebookRow('spend')}`);
      expect(widgetPart('spend')).toBe(`spent ${notebookRow('spend')}`);
    } finally {
      cleanup();
    }
  });
});
