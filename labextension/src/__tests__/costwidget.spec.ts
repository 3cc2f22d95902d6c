/**
 * @jest-environment jsdom
 *
 * The cost widget view's wiring: it polls the REST API (never the kernel),
 * renders the stable classes, marks every successful refresh, says when the
 * server is unreachable, and stops polling when removed. `@jupyter-widgets/base`
 * (`fakewidgets.ts`) and the REST helper are replaced by small fakes.
 */

jest.mock('@jupyter-widgets/base', () => jest.requireActual('./fakewidgets'));

jest.mock('@jupyterlab/services', () => ({
  ServerConnection: { makeSettings: () => ({ baseUrl: '/' }) }
}));

const responses: Record<string, () => unknown> = {};
const requested: string[] = [];

jest.mock('../api', () => ({
  ...jest.requireActual('../api'),
  requestAPI: jest.fn(async (endpoint: string) => {
    requested.push(endpoint);
    const key = endpoint.split('?')[0];
    const answer = responses[key];
    if (!answer) {
      throw { response: { status: 404 }, message: 'not found' };
    }
    return answer();
  })
}));

import { CostWidgetModel, CostWidgetView } from '../costwidget';

const GiB = 1024 ** 3;

function kernels(simulated = false): unknown {
  return {
    simulated,
    currency: 'USD',
    time: 1,
    kernels: [
      {
        kernel_id: 'k-1',
        notebook: 'work/explore.ipynb',
        execution_state: 'busy',
        idle_seconds: 0,
        gpus: ['GPU-0'],
        gpu_memory_bytes: 4 * GiB,
        gpu_utilization_percent: 91,
        attribution: 'pid',
        spend: 0.5,
        waste: 0.1,
        spend_rate_per_hour: 4
      }
    ]
  };
}

function make(attrs: Record<string, unknown> = {}): CostWidgetView {
  const model = new (CostWidgetModel as any)({
    kernel_id: 'k-1',
    // Long interval: the tests drive the poll themselves.
    refresh_seconds: 3600,
    ...attrs
  });
  const view = new (CostWidgetView as any)({ model }) as CostWidgetView;
  document.body.appendChild(view.el);
  view.render();
  return view;
}

async function tick(view: CostWidgetView): Promise<void> {
  const poll = view.poll!;
  await poll.refresh();
  await poll.tick;
}

beforeEach(() => {
  jest.spyOn(console, 'debug').mockImplementation(() => undefined);
  for (const key of Object.keys(responses)) {
    delete responses[key];
  }
  requested.length = 0;
  document.body.textContent = '';
});

describe('CostWidgetModel', () => {
  it('defaults to the jupyter-costguard module and the Python traits', () => {
    const model = new (CostWidgetModel as any)();
    expect(model.get('_model_name')).toBe('CostWidgetModel');
    expect(model.get('_view_name')).toBe('CostWidgetView');
    expect(model.get('_model_module')).toBe('jupyter-costguard');
    expect(model.get('_view_module')).toBe('jupyter-costguard');
    expect(model.get('kernel_id')).toBe('');
    expect(model.get('refresh_seconds')).toBe(2);
    expect(model.get('notebook')).toBeNull();
  });
});

describe('CostWidgetView', () => {
  it('renders spend, waste, GPU, idle, rate, alert and simulated from the API', async () => {
    responses['kernels'] = () => kernels(true);
    responses['notebooks/work/explore.ipynb'] = () => ({
      path: 'work/explore.ipynb',
      simulated: true,
      currency: 'USD',
      spend: 2.5,
      waste: 1
    });
    responses['alerts'] = () => ({
      alerts: [
        { id: 'a1', kind: 'idle-gpu', severity: 'warning', title: 'GPU idle', message: 'm' }
      ]
    });
    responses['status'] = () => ({
      instance: { instance_type: 'p4d.24xlarge' },
      rate_per_hour: 32.77,
      currency: 'USD',
      simulated: true
    });
    const view = make();
    await tick(view);
    const el = view.el;
    expect(el.classList).toContain('jp-costguard-widget');
    expect(el.dataset.state).toBe('ok');
    expect(el.dataset.kernelId).toBe('k-1');
    expect(el.dataset.notebook).toBe('work/explore.ipynb');
    const text = (cls: string) => el.querySelector(`.${cls}`)?.textContent;
    expect(text('jp-costguard-widget-spend')).toBe('spent USD 2.50');
    expect(text('jp-costguard-widget-waste')).toBe('waste USD 1.00 (40%)');
    // format.ts's formatBytes, as in the panel: `4 GiB` (was `4.0 GiB`).
    expect(text('jp-costguard-widget-gpu')).toBe('GPU 91%, 4 GiB');
    expect(text('jp-costguard-widget-idle')).toBe('running');
    expect(text('jp-costguard-widget-rate')).toBe('p4d.24xlarge USD 32.77/h');
    expect(text('jp-costguard-widget-alert')).toBe('⚠ GPU idle');
    expect(text('jp-costguard-widget-simulated')).toBe('simulated');
    expect(requested).toEqual(
      expect.arrayContaining([
        'kernels',
        'notebooks/work/explore.ipynb',
        'alerts?notebook=work%2Fexplore.ipynb',
        'status'
      ])
    );
    view.remove();
  });

  it("shows the notebook's snapshot, asked through the same API client", async () => {
    const created = Math.floor(Date.now() / 1000) - 60;
    responses['kernels'] = () => kernels();
    responses['snapshots'] = () => ({
      snapshots: [
        {
          id: 's1',
          notebook: 'work/explore.ipynb',
          created,
          bytes: 2 * GiB,
          saved: ['a', 'b', 'c'],
          skipped: [],
          restored: null
        }
      ],
      waste_avoided: 0,
      currency: 'USD'
    });
    const view = make();
    await tick(view);
    const part = view.el.querySelector('.jp-costguard-widget-snapshot');
    expect(part?.textContent).toMatch(/^Hibernated at \d\d:\d\d · 2 GiB · 3 variables$/);
    expect(requested).toContain('snapshots?notebook=work%2Fexplore.ipynb');
    // read again only after a while, not at every refresh
    requested.length = 0;
    await tick(view);
    expect(requested).not.toContain('snapshots?notebook=work%2Fexplore.ipynb');
    view.remove();
  });

  it('shows its figures when the server has no hibernation (503)', async () => {
    responses['kernels'] = () => kernels();
    responses['snapshots'] = () => {
      throw { response: { status: 503 }, message: 'hibernate is not available' };
    };
    const view = make();
    await tick(view);
    expect(view.el.dataset.state).toBe('ok');
    expect(view.el.querySelector('.jp-costguard-widget-snapshot')).toBeNull();
    view.remove();
  });

  it('changes data-updated on every successful refresh', async () => {
    responses['kernels'] = () => kernels();
    responses['status'] = () => ({ rate_per_hour: 1, currency: 'USD' });
    const view = make();
    await tick(view);
    const first = view.el.dataset.updated;
    expect(first).toBeTruthy();
    await tick(view);
    const second = view.el.dataset.updated;
    expect(second).toBeTruthy();
    expect(second).not.toBe(first);
    // The status is re-read at most every 15 s, alerts (404 here) every minute.
    expect(requested.filter(r => r === 'status')).toHaveLength(1);
    expect(requested.filter(r => r.startsWith('alerts'))).toHaveLength(1);
    expect(requested.filter(r => r === 'kernels')).toHaveLength(2);
    view.remove();
  });

  it("falls back to the widget manager's kernel and waits for the first sample", async () => {
    responses['kernels'] = () => ({ simulated: false, currency: 'USD', kernels: [] });
    const view = make({ kernel_id: '' });
    await tick(view);
    expect(view.el.dataset.state).toBe('waiting');
    expect(
      view.el.querySelector('.jp-costguard-widget-waiting')?.textContent
    ).toBe('costguard: waiting for the first sample…');

    responses['kernels'] = () => {
      const list = kernels() as any;
      list.kernels[0].kernel_id = 'manager-kernel';
      return list;
    };
    await tick(view);
    expect(view.el.dataset.state).toBe('ok');
    expect(view.el.dataset.kernelId).toBe('manager-kernel');
    view.remove();
  });

  it('says in one line when the server is unreachable, and recovers', async () => {
    responses['kernels'] = () => {
      throw new TypeError('Failed to fetch');
    };
    const view = make();
    await tick(view);
    expect(view.el.dataset.state).toBe('offline');
    const offline = view.el.querySelector('.jp-costguard-widget-offline');
    expect(offline?.textContent).toBe("costguard: can't reach the Jupyter server");
    expect(view.el.querySelectorAll('.jp-costguard-widget-part')).toHaveLength(1);

    responses['kernels'] = () => kernels();
    await tick(view);
    expect(view.el.dataset.state).toBe('ok');
    expect(view.el.querySelector('.jp-costguard-widget-offline')).toBeNull();
    view.remove();
  });

  it('follows refresh_seconds and stops polling when removed', async () => {
    responses['kernels'] = () => kernels();
    const view = make();
    await tick(view);
    const poll = view.poll!;
    view.model.set('refresh_seconds', 5);
    expect(poll.frequency.interval).toBe(5000);
    view.model.set('refresh_seconds', 0.01);
    expect(poll.frequency.interval).toBe(500);
    view.remove();
    expect(poll.isDisposed).toBe(true);
    expect(view.poll).toBeNull();
  });

  it('polls on its own at the refresh interval', async () => {
    responses['kernels'] = () => kernels();
    const view = make({ refresh_seconds: 0.5 });
    await new Promise(resolve => setTimeout(resolve, 1300));
    expect(requested.filter(r => r === 'kernels').length).toBeGreaterThanOrEqual(2);
    view.remove();
    const count = requested.length;
    await new Promise(resolve => setTimeout(resolve, 700));
    expect(requested.length).toBe(count);
  });

  it("shows whose server it is in front of the figures, under JupyterHub", async () => {
    responses['kernels'] = () => ({ ...(kernels() as any), user: 'alice', server: 'gpu-large' });
    const view = make();
    await tick(view);
    const line = view.el.querySelector('.jp-costguard-widget-line')!;
    const owner = line.querySelector<HTMLElement>('.jp-costguard-widget-owner');
    expect(owner?.textContent).toBe('alice · gpu-large');
    expect(owner?.title).toBe('JupyterHub user (server)');
    // Right after the icon, then a separator: "⚡alice · gpu-large · spent …".
    expect(owner?.previousElementSibling?.classList).toContain('jp-costguard-widget-icon');
    expect(owner?.nextElementSibling?.textContent).toBe(' · ');
    expect(line.textContent).toMatch(/^⚡alice · gpu-large · spent USD 0\.50 · /);
    expect(view.el.title.split('\n')[0]).toBe("alice's server gpu-large");
    view.remove();
  });

  it("renders an older server's documents (no user, no server) as before", async () => {
    responses['kernels'] = () => kernels();
    const view = make();
    await tick(view);
    const line = view.el.querySelector('.jp-costguard-widget-line')!;
    expect(line.querySelector('.jp-costguard-widget-owner')).toBeNull();
    expect(line.textContent).toMatch(/^⚡spent USD 0\.50 · /);
    expect(view.el.title).not.toContain("'s server");
    view.remove();
  });
});
