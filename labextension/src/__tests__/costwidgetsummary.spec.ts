import pkg from '../../package.json';
import type {
  IAlert,
  ICostStatus,
  IKernelDoc,
  IKernelList,
  INotebookDetail
} from '../api';
import {
  MODULE_NAME,
  MODULE_VERSION,
  WAITING_TEXT,
  clampWidgetRefresh,
  notebookPathFor,
  offlineMessage,
  pickAlert,
  pickKernel,
  summarizeWidget
} from '../costwidgetsummary';
import { formatClock } from '../format';

const GiB = 1024 ** 3;

const kernel: IKernelDoc = {
  kernel_id: 'k-1',
  name: 'python3',
  notebook: 'work/explore.ipynb',
  execution_state: 'idle',
  idle_seconds: 725,
  gpus: ['GPU-test-0'],
  gpu_memory_bytes: 4 * GiB,
  gpu_utilization_percent: 2,
  attribution: 'pid',
  spend: 0.5,
  waste: 0.4,
  spend_rate_per_hour: 4.1
};

const kernels: IKernelList = {
  simulated: false,
  currency: 'USD',
  time: 1764460000,
  kernels: [
    { ...kernel, kernel_id: 'k-0', notebook: 'other.ipynb' },
    kernel
  ]
};

const notebook: INotebookDetail = {
  path: 'work/explore.ipynb',
  simulated: false,
  currency: 'USD',
  time: 1764460000,
  spend: 1.2345,
  waste: 0.5,
  first_seen: 1764400000,
  kernel_ids: ['k-1'],
  kernels_seen: 2,
  kernels: [kernel]
};

const status: ICostStatus = {
  instance: { provider: 'aws', instance_type: 'p4d.24xlarge' },
  rate_per_hour: 32.77,
  currency: 'USD',
  market: 'on-demand',
  price_source: 'config',
  simulated: false
};

describe('module identity', () => {
  it('registers under the npm package name and version', () => {
    expect(MODULE_NAME).toBe(pkg.name);
    expect(MODULE_VERSION).toBe(pkg.version);
  });
});

describe('pickKernel', () => {
  it('takes the first candidate the server lists', () => {
    expect(pickKernel(kernels.kernels, ['k-1', 'k-0'])?.kernel_id).toBe('k-1');
    expect(pickKernel(kernels.kernels, ['gone', 'k-0'])?.kernel_id).toBe('k-0');
    expect(pickKernel(kernels.kernels, ['', null, undefined, 'k-1'])).toBe(
      kernels.kernels[1]
    );
  });

  it('finds nothing for an unlisted kernel or no list', () => {
    expect(pickKernel(kernels.kernels, ['nope'])).toBeNull();
    expect(pickKernel(kernels.kernels, [])).toBeNull();
    expect(pickKernel(null, ['k-1'])).toBeNull();
    expect(pickKernel([], ['k-1'])).toBeNull();
  });
});

describe('notebookPathFor', () => {
  it("uses the override, else the kernel's notebook", () => {
    expect(notebookPathFor(kernel, null)).toBe('work/explore.ipynb');
    expect(notebookPathFor(kernel, '')).toBe('work/explore.ipynb');
    expect(notebookPathFor(kernel, '/train.ipynb')).toBe('train.ipynb');
    expect(notebookPathFor(null, 'train.ipynb')).toBe('train.ipynb');
  });

  it('is null for a kernel without a notebook', () => {
    expect(notebookPathFor({ ...kernel, notebook: null }, null)).toBeNull();
    expect(notebookPathFor(null, null)).toBeNull();
  });
});

describe('pickAlert', () => {
  // As the server sends them (openapi.yaml `Alert`), trimmed.
  const alert = (patch: Partial<IAlert>): IAlert => ({
    id: 'x',
    kind: 'idle-gpu-kernel',
    severity: 'warning',
    notebook: 'work/explore.ipynb',
    kernel_id: 'k-1',
    title: 't',
    message: 'm',
    actions: [],
    created: 1,
    updated: 1,
    state: 'active',
    resolved: null,
    ...patch
  });
  const alerts: IAlert[] = [
    alert({ id: 'a', severity: 'info', updated: 30 }),
    alert({ id: 'b', severity: 'warning', updated: 10 }),
    alert({ id: 'c', severity: 'warning', updated: 20 }),
    alert({ id: 'd', severity: 'critical', resolved: 1764460000 }),
    alert({ id: 'e', severity: 'critical', notebook: 'x.ipynb' }),
    alert({ id: 'f', severity: 'critical', state: 'dismissed' }),
    alert({ id: 'g', severity: 'critical', state: 'snoozed' })
  ];

  it('picks the most severe, then the newest, active alert for the notebook', () => {
    expect(pickAlert(alerts, 'work/explore.ipynb')?.id).toBe('c');
    expect(pickAlert(alerts, 'x.ipynb')?.id).toBe('e');
    // An alert about no notebook in particular is shown too.
    expect(
      pickAlert([alert({ id: 'h', notebook: null })], 'work/explore.ipynb')?.id
    ).toBe('h');
    // Minimal alerts (id and title only) are fine.
    expect(pickAlert([{ id: 'm', title: 'minimal' } as IAlert], null)?.id).toBe('m');
  });

  it('is null without alerts (or without alerts support)', () => {
    expect(pickAlert([], 'a.ipynb')).toBeNull();
    expect(pickAlert(null, 'a.ipynb')).toBeNull();
    expect(pickAlert([alerts[3], alerts[5], alerts[6]], 'work/explore.ipynb')).toBeNull();
  });
});

describe('offlineMessage', () => {
  it('says why in one line', () => {
    const network = new TypeError('Failed to fetch');
    const withStatus = (status: number) => ({ response: { status } });
    expect(offlineMessage(network)).toBe(
      "costguard: can't reach the Jupyter server"
    );
    expect(offlineMessage(withStatus(404))).toMatch(/not enabled/);
    expect(offlineMessage(withStatus(403))).toMatch(/not authorised/);
    expect(offlineMessage(withStatus(502))).toBe(
      'costguard: the server answered 502'
    );
    for (const e of [network, withStatus(404), withStatus(403), null]) {
      expect(offlineMessage(e)).not.toContain('\n');
    }
  });
});

describe('refresh interval', () => {
  it('clamps the refresh interval', () => {
    expect(clampWidgetRefresh(2)).toBe(2);
    expect(clampWidgetRefresh(0.1)).toBe(0.5);
    expect(clampWidgetRefresh(0)).toBe(2);
    expect(clampWidgetRefresh('x')).toBe(2);
  });
});

describe('summarizeWidget', () => {
  it("shows the notebook's spend and waste, the kernel's GPU, idle time and rate", () => {
    const summary = summarizeWidget({
      kernels,
      kernel,
      notebookPath: 'work/explore.ipynb',
      notebook,
      status,
      alerts: []
    });
    expect(summary.state).toBe('ok');
    expect(summary.parts.map(p => p.kind)).toEqual([
      'spend',
      'waste',
      'gpu',
      'idle',
      'rate'
    ]);
    expect(summary.text).toBe(
      'spent USD 1.23 · waste USD 0.50 (41%) · GPU 2%, 4 GiB · idle 12 min · p4d.24xlarge USD 32.77/h'
    );
    expect(summary.alert).toBeNull();
    expect(summary.simulated).toBe(false);
    expect(summary.kernelId).toBe('k-1');
    expect(summary.notebook).toBe('work/explore.ipynb');
    expect(summary.parts[0].title).toMatch(/work\/explore\.ipynb/);
    expect(summary.parts[4].title).toMatch(/this kernel now costs USD 4.10\/h/);
    // the widget polls on its own: it says which sample its figures are from
    expect(summary.title.split('\n')).toContain(
      `Figures as of ${formatClock(kernels.time as number, true)}`
    );
  });

  it("falls back to the kernel's own figures without a notebook record", () => {
    const summary = summarizeWidget({
      kernels,
      kernel: { ...kernel, execution_state: 'busy', gpus: [] },
      notebookPath: null,
      notebook: null,
      status: { ...status, rate_per_hour: null, instance: null },
      alerts: null
    });
    expect(summary.text).toBe(
      'spent USD 0.50 · waste USD 0.40 (80%) · no GPU · running · unpriced'
    );
    expect(summary.parts[0].title).toMatch(/this kernel/);
  });

  it('labels replayed figures and shows the alert', () => {
    const summary = summarizeWidget({
      kernels: { ...kernels, simulated: true },
      kernel: { ...kernel, gpus: ['a', 'b'], gpu_utilization_percent: null },
      notebookPath: 'work/explore.ipynb',
      notebook,
      status: null,
      alerts: [
        // Off-spec: a capitalised severity and no actions.
        {
          id: 'idle-1',
          kind: 'idle-gpu',
          severity: 'Warning',
          title: 'GPU idle for 1 h',
          message: 'You are wasting USD 29/h'
        } as unknown as IAlert
      ]
    });
    expect(summary.simulated).toBe(true);
    expect(summary.parts.find(p => p.kind === 'gpu')?.text).toBe(
      '2 GPUs –, 4 GiB'
    );
    expect(summary.parts.some(p => p.kind === 'rate')).toBe(false);
    expect(summary.alert).toEqual({
      id: 'idle-1',
      severity: 'warning',
      text: 'GPU idle for 1 h',
      title: 'GPU idle for 1 h\nYou are wasting USD 29/h'
    });
    expect(summary.title).toMatch(/Simulated/);
  });

  it('says "unknown" for a kernel whose GPU activity is unknown (MIG)', () => {
    const summary = summarizeWidget({
      kernels,
      kernel: { ...kernel, gpus: ['MIG-0'], gpu_utilization_percent: null, gpu_activity: 'unknown' },
      notebookPath: 'work/explore.ipynb',
      notebook,
      status: null,
      alerts: []
    });
    const part = summary.parts.find(p => p.kind === 'gpu')!;
    expect(part.text).toBe('GPU unknown, 4 GiB');
    expect(part.title).toMatch(/neither busy nor idle/);
  });

  it("shows the notebook's snapshot still to restore, as its banner says it", () => {
    const created = Math.floor(Date.now() / 1000) - 60;
    const snap = (id: string, extra: Record<string, unknown> = {}) => ({
      id,
      notebook: 'work/explore.ipynb',
      created,
      bytes: 3.2 * GiB,
      saved: Array.from({ length: 42 }, (_, i) => `v${i}`),
      skipped: [{ name: 'gen', reason: 'a generator' }],
      restored: null,
      ...extra
    });
    const input = {
      kernels,
      kernel,
      notebookPath: 'work/explore.ipynb',
      notebook,
      status,
      alerts: [],
      snapshots: [
        snap('older', { created: created - 600, saved: ['a'] }),
        snap('newest'),
        snap('restored', { created: created + 10, restored: created + 20 }),
        snap('elsewhere', { created: created + 30, notebook: 'other.ipynb' })
      ]
    };
    const part = summarizeWidget(input).parts.find(p => p.kind === 'snapshot')!;
    expect(part.text).toBe(`Hibernated at ${formatClock(created)} · 3.2 GiB · 42 variables`);
    expect(part.title).toMatch(/restore them from the notebook's banner\nSaved: v0, v1/);
    expect(part.title).toMatch(/Not saved: gen \(a generator\)/);
    // none (or none left to restore): no part
    for (const snapshots of [null, [], [snap('done', { restored: created })]]) {
      const parts = summarizeWidget({ ...input, snapshots }).parts.map(p => p.kind);
      expect(parts).not.toContain('snapshot');
    }
  });

  it('waits for the first sample when the kernel is not listed', () => {
    const summary = summarizeWidget({
      kernels,
      kernel: null,
      notebookPath: null,
      notebook: null,
      status,
      alerts: null
    });
    expect(summary.state).toBe('waiting');
    expect(summary.text).toBe(WAITING_TEXT);
    expect(summary.parts).toEqual([]);
  });
});

describe('summarizeWidget owner (JupyterHub)', () => {
  const input = {
    kernels,
    kernel,
    notebookPath: 'work/explore.ipynb',
    notebook,
    status,
    alerts: []
  };

  it("names the user's server from the kernels document", () => {
    const summary = summarizeWidget({
      ...input,
      kernels: { ...kernels, user: 'alice', server: 'gpu-large' }
    });
    expect(summary.owner).toBe('alice · gpu-large');
    expect(summary.title.split('\n')[0]).toBe("alice's server gpu-large");
    // The figures are unchanged.
    expect(summary.text).toBe(summarizeWidget(input).text);
  });

  it('falls back to the notebook and status documents', () => {
    expect(
      summarizeWidget({ ...input, notebook: { ...notebook, user: 'bob', server: '' } }).owner
    ).toBe('bob');
    expect(
      summarizeWidget({ ...input, status: { ...status, user: 'carol', server: null } }).owner
    ).toBe('carol');
  });

  it('says it in the waiting state too', () => {
    const summary = summarizeWidget({
      ...input,
      kernels: { ...kernels, user: 'alice', server: '' },
      kernel: null
    });
    expect(summary.state).toBe('waiting');
    expect(summary.owner).toBe('alice');
    expect(summary.title.split('\n')[0]).toBe("alice's server");
  });

  it('is null without a hub and on older servers, the tooltip unchanged', () => {
    const older = summarizeWidget(input);
    expect(older.owner).toBeNull();
    expect(older.title).not.toContain("'s server");
    const noHub = summarizeWidget({
      ...input,
      kernels: { ...kernels, user: null, server: null },
      notebook: { ...notebook, user: null, server: null },
      status: { ...status, user: null, server: null }
    });
    expect(noHub.owner).toBeNull();
    expect(noHub.title).toBe(older.title);
  });
});
