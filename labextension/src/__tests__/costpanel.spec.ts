/**
 * @jest-environment jsdom
 */
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import type { IAlert, ICostStatus, IGpuList, IKernelList, INotebookDoc } from '../api';
import type { ISnapshotList } from '../hibernateapi';
import type { CostStatusModel } from '../statusmodel';
import { CostPanel, PANEL_ID, PANEL_SIMULATED_ID } from '../costpanel';
import { CostPanelModel } from '../costpanelmodel';
import {
  alert,
  budgetStatus,
  gpus,
  groupBudget,
  groupRemaining,
  hubBudget,
  kernel,
  notebook,
  pricedStatus,
  share,
  status
} from './fixtures';

/**
 * Just enough of CostStatusModel for the panel. Asked for `kernels` and
 * `gpus`, it answers on its next tick as the real one does after its
 * immediate refresh (statusmodel.spec.ts tests the real one's fetching).
 */
class FakeData {
  changed = new Signal<this, void>(this);
  state: 'loading' | 'ok' | 'offline' = 'ok';
  status: ICostStatus | null = status;
  notebooks: INotebookDoc[] = [];
  notebooksSimulated = false;
  alerts: IAlert[] = [];
  alertsState = 'ok';
  refreshInterval = 2;
  serverSettings = {} as any;
  kernelList: IKernelList | null = null;
  gpuList: IGpuList | null = null;
  snapshotList: ISnapshotList | null = null;
  detailOwners = new Set<unknown>();
  /** What the next detail refresh answers. */
  detailAnswer: () => { kernelList: IKernelList; gpuList: IGpuList } = () => ({
    kernelList: { simulated: true, currency: 'USD', time: 1, kernels } as IKernelList,
    gpuList: gpus as IGpuList
  });

  requestDetail(owner: unknown, wanted: boolean): void {
    if (wanted) {
      this.detailOwners.add(owner);
      setTimeout(() => this.set(this.detailAnswer()));
    } else {
      this.detailOwners.delete(owner);
    }
  }

  set(patch: Partial<FakeData>): void {
    Object.assign(this, patch);
    this.changed.emit();
  }
}

const history = [
  { time: 1764460800 - 120, spend: 0.01, waste: 0 },
  { time: 1764460800 - 60, spend: 0.03, waste: 0.01 },
  { time: 1764460800, spend: 0.02, waste: 0 }
];

let kernels = [
  kernel('k-train', 'train.ipynb', 4, { gpu_utilization_percent: 91, gpu_memory_bytes: 30 * 1024 ** 3 }),
  kernel('k-explore', 'explore.ipynb', 1, { gpu_utilization_percent: 2 })
];

function setup() {
  const data = new FakeData();
  data.notebooks = [
    notebook('explore.ipynb', 1, { kernel_ids: ['k-explore'], history, idle_seconds: 1800 }),
    notebook('train.ipynb', 5, { kernel_ids: ['k-train'], gpu_utilization_percent: 91 }),
    notebook('work/old.ipynb', 0.5)
  ];
  const model = new CostPanelModel({ data: data as unknown as CostStatusModel });
  const actions: [string, string][] = [];
  const opened: string[] = [];
  const panel = new CostPanel({
    model,
    onKernelAction: (action, k) => actions.push([action, k.kernel_id]),
    onOpenNotebook: path => opened.push(path)
  });
  return { data, model, panel, actions, opened };
}

const wait = (ms = 50) => new Promise(resolve => setTimeout(resolve, ms));

function rowPaths(panel: CostPanel): string[] {
  return Array.from(
    panel.node.querySelectorAll<HTMLElement>('.jp-costguard-notebook-row')
  ).map(r => r.dataset.path!);
}

function field(panel: CostPanel, name: string): string | null | undefined {
  return panel.node.querySelector(`dd[data-field="${name}"]`)?.textContent;
}

beforeEach(() => {
  kernels = [
    kernel('k-train', 'train.ipynb', 4, { gpu_utilization_percent: 91, gpu_memory_bytes: 30 * 1024 ** 3 }),
    kernel('k-explore', 'explore.ipynb', 1, { gpu_utilization_percent: 2 })
  ];
});

describe('CostPanel', () => {
  it('has stable hooks and shows the instance and totals', () => {
    const { panel } = setup();
    expect(panel.node.id).toBe(PANEL_ID);
    expect(panel.node.classList).toContain('jp-costguard-panel');
    expect(field(panel, 'instance-type')).toBe('p4d.24xlarge');
    expect(field(panel, 'provider')).toBe('aws');
    expect(field(panel, 'gpus')).toBe('8 × A100-SXM4-40GB (40 GiB)');
    expect(field(panel, 'rate')).toBe('USD 32.77/h');
    expect(field(panel, 'market')).toBe('on-demand');
    expect(field(panel, 'price-source')).toBe('set in configuration');
    expect(field(panel, 'price-detail')).toBe('c.CostGuard.instance_type');
    expect(field(panel, 'retrieved')).toBe('2025-11-01');
    const link = panel.node.querySelector<HTMLAnchorElement>('dd[data-field="retrieved"] a');
    expect(link?.href).toBe('https://aws.amazon.com/ec2/instance-types/p4/');
    expect(link?.rel).toContain('noopener');
    const totals = panel.node.querySelector('.jp-costguard-totals')!;
    expect(totals.querySelector('dd[data-field="spend"]')?.textContent).toBe('USD 1.23');
    const figure = (name: string) =>
      totals.querySelector(`dd[data-field="${name}"] .jp-costguard-detail-text`)?.textContent;
    expect(figure('waste')).toBe('USD 0.50');
    expect(figure('unattributed')).toBe('USD 0.10');
    panel.dispose();
  });

  it('shows the waste removed by hibernating beside waste, where the server hibernates', () => {
    const { panel, data } = setup();
    const totals = panel.node.querySelector('.jp-costguard-totals')!;
    // no snapshots document (no hibernation on this server): no row, not a made-up 0
    expect(totals.querySelector('dd[data-field="waste-removed"]')).toBeNull();
    Widget.attach(panel, document.body);
    data.set({
      snapshotList: {
        snapshots: [],
        currency: 'USD',
        waste_avoided: 12.4,
        storage_price: null,
        storage_cost: null,
        storage_cost_per_month: null
      } as ISnapshotList
    });
    const fields = Array.from(totals.querySelectorAll<HTMLElement>('dt')).map(d => d.dataset.field);
    expect(fields.indexOf('waste-removed')).toBe(fields.indexOf('waste') + 1);
    expect(
      totals.querySelector('dd[data-field="waste-removed"] .jp-costguard-detail-text')?.textContent
    ).toBe('USD 12.40');
    expect(
      totals.querySelector('dd[data-field="waste-removed"] .jp-costguard-detail-note')?.textContent
    ).toBe('by hibernating idle GPU kernels');
    expect(totals.querySelector<HTMLElement>('dt[data-field="waste-removed"]')?.title).toMatch(
      /until its first restore and at most 12 hours a snapshot/
    );
    panel.dispose();
  });

  it('says which idle GPUs are waste and which are unattributed', () => {
    // "Waste 41%" beside GPUs that are mostly idle: the idle GPUs nobody holds are not waste
    const { panel } = setup();
    const totals = panel.node.querySelector('.jp-costguard-totals')!;
    const note = (name: string) =>
      totals.querySelector(`dd[data-field="${name}"] .jp-costguard-detail-note`)?.textContent;
    expect(note('waste')).toBe('41% of spend: idle GPUs a kernel holds');
    expect(note('unattributed')).toBe('USD 0.05 of it: GPUs nobody holds (not waste)');
    const label = (name: string) =>
      totals.querySelector<HTMLElement>(`dt[data-field="${name}"]`)?.title ?? '';
    expect(label('waste')).toMatch(/kernel held while the GPU sat idle/);
    expect(label('unattributed')).toMatch(/idle GPU that no kernel holds counts here, not as waste/);
    expect(totals.querySelector('dd[data-field="spend"] .jp-costguard-detail-note')).toBeNull();
    panel.dispose();
  });

  it('shows the simulated pill only for replayed figures', () => {
    const { panel, data } = setup();
    const pill = panel.node.querySelector<HTMLElement>(`#${PANEL_SIMULATED_ID}`)!;
    expect(pill.classList).toContain('jp-costguard-simulated');
    expect(pill.hidden).toBe(false);
    data.set({ status: { ...status, simulated: false } });
    Widget.attach(panel, document.body);
    data.set({ status: { ...status, simulated: false } });
    expect(pill.hidden).toBe(true);
    data.set({ notebooksSimulated: true });
    expect(pill.hidden).toBe(false);
    Widget.detach(panel);
    panel.dispose();
  });

  it('lists notebooks, most expensive first, with sparklines', () => {
    const { panel } = setup();
    expect(rowPaths(panel)).toEqual(['train.ipynb', 'explore.ipynb', 'work/old.ipynb']);
    const row = panel.node.querySelector<HTMLElement>(
      '.jp-costguard-notebook-row[data-path="explore.ipynb"]'
    )!;
    const cell = (key: string) => row.querySelector(`td[data-key="${key}"]`)?.textContent;
    expect(cell('spend')).toBe('USD 1.00');
    expect(cell('waste')).toBe('USD 0.50');
    expect(cell('idle_seconds')).toBe('30 min');
    const sparkline = row.querySelector('svg.jp-costguard-sparkline')!;
    expect(sparkline.getAttribute('data-points')).toBe('30');
    const d = sparkline.querySelector('path')!.getAttribute('d')!;
    expect(d.startsWith('M0,')).toBe(true);
    expect(d.split(' ')).toHaveLength(30);
    expect(sparkline.querySelector('title')?.textContent).toContain('peak USD 1.80/h');
    expect(panel.node.querySelectorAll('.jp-costguard-sparkline')).toHaveLength(3);
    panel.dispose();
  });

  it('sorts on header clicks, flipping direction, and keeps row elements', () => {
    const { panel } = setup();
    Widget.attach(panel, document.body);
    const before = panel.node.querySelector('.jp-costguard-notebook-row[data-path="train.ipynb"]');
    const header = panel.node.querySelector<HTMLElement>(
      '.jp-costguard-notebooks .jp-costguard-sort[data-key="path"]'
    )!;
    expect(header.dataset.table).toBe('notebooks');
    expect(header.getAttribute('aria-sort')).toBe('none');
    header.click();
    expect(rowPaths(panel)).toEqual(['explore.ipynb', 'train.ipynb', 'work/old.ipynb']);
    expect(header.getAttribute('aria-sort')).toBe('ascending');
    header.click();
    expect(rowPaths(panel)).toEqual(['work/old.ipynb', 'train.ipynb', 'explore.ipynb']);
    expect(header.getAttribute('aria-sort')).toBe('descending');
    expect(
      panel.node.querySelector('.jp-costguard-notebook-row[data-path="train.ipynb"]')
    ).toBe(before);
    const spend = panel.node.querySelector<HTMLElement>(
      '.jp-costguard-notebooks .jp-costguard-sort[data-key="spend"]'
    )!;
    spend.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    expect(rowPaths(panel)[0]).toBe('train.ipynb');
    Widget.detach(panel);
    panel.dispose();
  });

  it('updates rows in place and drops the ones that leave', () => {
    const { panel, data } = setup();
    Widget.attach(panel, document.body);
    const row = panel.node.querySelector('.jp-costguard-notebook-row[data-path="explore.ipynb"]');
    data.set({
      notebooks: [notebook('explore.ipynb', 9, { history })]
    });
    expect(rowPaths(panel)).toEqual(['explore.ipynb']);
    const same = panel.node.querySelector('.jp-costguard-notebook-row[data-path="explore.ipynb"]');
    expect(same).toBe(row);
    expect(same?.querySelector('td[data-key="spend"]')?.textContent).toBe('USD 9.00');
    data.set({ notebooks: [] });
    expect(rowPaths(panel)).toEqual([]);
    expect(panel.node.querySelector('.jp-costguard-notebooks .jp-costguard-empty')?.textContent).toBe(
      'No notebook has spent anything yet.'
    );
    Widget.detach(panel);
    panel.dispose();
  });

  it('marks notebooks with active alerts', () => {
    const { panel, data } = setup();
    Widget.attach(panel, document.body);
    data.set({ alerts: [alert('a1', 'critical', { notebook: 'explore.ipynb' })] });
    const row = panel.node.querySelector<HTMLElement>(
      '.jp-costguard-notebook-row[data-path="explore.ipynb"]'
    )!;
    expect(row.classList).toContain('jp-costguard-alert');
    expect(row.dataset.costguardSeverity).toBe('critical');
    Widget.detach(panel);
    panel.dispose();
  });

  it('asks the shared poll for kernels and gpus only while visible', async () => {
    const { panel, model, data } = setup();
    await wait();
    expect(data.detailOwners.size).toBe(0);
    expect(model.state).toBe('idle');
    Widget.attach(panel, document.body);
    expect(model.active).toBe(true);
    expect(data.detailOwners.has(model)).toBe(true);
    // Shown before the shared model's answer: loading, not "no kernels".
    expect(model.state).toBe('loading');
    expect(panel.node.querySelector('.jp-costguard-kernels .jp-costguard-empty')?.textContent).toBe(
      'Loading…'
    );
    await wait();
    expect(model.state).toBe('ok');
    panel.hide();
    expect(model.active).toBe(false);
    expect(data.detailOwners.size).toBe(0);
    panel.show();
    expect(data.detailOwners.has(model)).toBe(true);
    Widget.detach(panel);
    expect(model.active).toBe(false);
    panel.dispose();
    model.dispose();
    expect(data.detailOwners.size).toBe(0);
  });

  it('renders every table from the same answer', async () => {
    const { panel, data } = setup();
    Widget.attach(panel, document.body);
    await wait();
    // One refresh brings a new notebook and its kernel together.
    kernels = [...kernels, kernel('k-new', 'new.ipynb', 0.1)];
    data.set({
      notebooks: [...data.notebooks, notebook('new.ipynb', 0.1, { kernel_ids: ['k-new'] })],
      ...data.detailAnswer()
    });
    expect(rowPaths(panel)).toContain('new.ipynb');
    expect(panel.node.querySelector('.jp-costguard-kernel-row[data-kernel-id="k-new"]')).not.toBeNull();
    Widget.detach(panel);
    panel.dispose();
  });

  it('lists kernels with working action buttons and GPUs', async () => {
    const { panel, model, actions } = setup();
    Widget.attach(panel, document.body);
    await wait();
    const rows = Array.from(
      panel.node.querySelectorAll<HTMLElement>('.jp-costguard-kernel-row')
    ).map(r => r.dataset.kernelId);
    expect(rows).toEqual(['k-train', 'k-explore']);
    const row = panel.node.querySelector<HTMLElement>(
      '.jp-costguard-kernel-row[data-kernel-id="k-explore"]'
    )!;
    expect(row.querySelector('td[data-key="gpu_utilization_percent"]')?.textContent).toBe('2%');
    expect(row.querySelector('td[data-key="idle_seconds"]')?.textContent).toBe('13 min');
    row.querySelector<HTMLElement>('.jp-costguard-kernel-shutdown')!.click();
    row.querySelector<HTMLElement>('.jp-costguard-kernel-interrupt')!.click();
    expect(actions).toEqual([
      ['shutdown', 'k-explore'],
      ['interrupt', 'k-explore']
    ]);
    const gpu = panel.node.querySelector<HTMLElement>('.jp-costguard-gpu-row[data-gpu-uuid="GPU-0"]')!;
    expect(gpu.querySelector('td[data-key="memory"]')?.textContent).toBe('10 GiB / 40 GiB');
    expect(gpu.querySelector('td[data-key="utilization"]')?.textContent).toBe('3%');
    // Kernel sort by GPU memory, ascending on second click.
    const header = panel.node.querySelector<HTMLElement>(
      '.jp-costguard-kernels .jp-costguard-sort[data-key="gpu_memory_bytes"]'
    )!;
    header.click();
    header.click();
    expect(
      Array.from(panel.node.querySelectorAll<HTMLElement>('.jp-costguard-kernel-row')).map(
        r => r.dataset.kernelId
      )
    ).toEqual(['k-explore', 'k-train']);
    Widget.detach(panel);
    panel.dispose();
    model.dispose();
  });

  it('offers Hibernate only on the kernels that hold GPUs', async () => {
    kernels = [
      kernel('k-train', 'train.ipynb', 4, { gpus: ['GPU-0', 'GPU-1'], gpu_memory_bytes: 30 * 1024 ** 3 }),
      kernel('k-explore', 'explore.ipynb', 1, { gpu_utilization_percent: 2 })
    ];
    const { panel, model, actions } = setup();
    Widget.attach(panel, document.body);
    await wait();
    const hibernate = (id: string) =>
      panel.node.querySelector<HTMLButtonElement>(
        `.jp-costguard-kernel-row[data-kernel-id="${id}"] .jp-costguard-kernel-hibernate`
      )!;
    expect(hibernate('k-explore').hidden).toBe(true);
    expect(hibernate('k-train').hidden).toBe(false);
    expect(hibernate('k-train').title).toBe(
      'Hibernate: free 2 GPUs, keep your variables (kernel python3 k-train (train.ipynb))'
    );
    hibernate('k-train').click();
    expect(actions).toEqual([['hibernate', 'k-train']]);
    Widget.detach(panel);
    panel.dispose();
    model.dispose();
  });

  it('shows "unknown" for a GPU, kernel and notebook whose activity is unknown (MIG)', async () => {
    const { panel, model, data } = setup();
    kernels = [
      kernel('k-mig', 'mig.ipynb', 1, { gpu_utilization_percent: null, gpu_activity: 'unknown' })
    ];
    data.notebooks = [
      notebook('mig.ipynb', 1, {
        kernel_ids: ['k-mig'],
        gpu_utilization_percent: null,
        gpu_activity: 'unknown'
      })
    ];
    const mig = {
      ...gpus.gpus[0],
      uuid: 'MIG-0',
      utilization_percent: null,
      activity: 'unknown' as const
    };
    data.detailAnswer = () => ({
      kernelList: { simulated: true, currency: 'USD', time: 1, kernels } as IKernelList,
      gpuList: { ...gpus, gpus: [mig] } as IGpuList
    });
    Widget.attach(panel, document.body);
    await wait();
    const gpu = panel.node.querySelector<HTMLElement>('.jp-costguard-gpu-row[data-gpu-uuid="MIG-0"]')!;
    const util = gpu.querySelector<HTMLElement>('td[data-key="utilization"]')!;
    expect(util.textContent).toBe('unknown');
    expect(util.title).toMatch(/never waste/);
    const row = panel.node.querySelector<HTMLElement>(
      '.jp-costguard-kernel-row[data-kernel-id="k-mig"]'
    )!;
    expect(row.querySelector('td[data-key="gpu_utilization_percent"]')?.textContent).toBe(
      'unknown'
    );
    const nb = panel.node.querySelector<HTMLElement>(
      '.jp-costguard-notebook-row[data-path="mig.ipynb"]'
    )!;
    expect(nb.querySelector('td[data-key="gpu_utilization_percent"]')?.textContent).toBe(
      'unknown'
    );
    Widget.detach(panel);
    panel.dispose();
    model.dispose();
  });

  it('opens a notebook from its row', () => {
    const { panel, opened } = setup();
    Widget.attach(panel, document.body);
    panel.node
      .querySelector<HTMLElement>(
        '.jp-costguard-notebook-row[data-path="train.ipynb"] .jp-costguard-open-notebook'
      )!
      .click();
    expect(opened).toEqual(['train.ipynb']);
    Widget.detach(panel);
    panel.dispose();
  });

  it('highlights a notebook asked for', () => {
    const { panel, model } = setup();
    Widget.attach(panel, document.body);
    model.highlightPath = 'explore.ipynb';
    expect(
      panel.node.querySelector('.jp-costguard-notebook-row.jp-mod-highlighted')?.getAttribute(
        'data-path'
      )
    ).toBe('explore.ipynb');
    Widget.detach(panel);
    panel.dispose();
  });

  it('says offline', () => {
    const { panel, data } = setup();
    Widget.attach(panel, document.body);
    data.set({ state: 'offline', notebooks: [] });
    expect(panel.node.dataset.costguardState).toBe('offline');
    expect(panel.node.querySelector('.jp-costguard-panel-state')?.textContent).toBe(
      'costguard: offline'
    );
    Widget.detach(panel);
    panel.dispose();
  });

  describe('price provenance', () => {
    const PRICE_FIELDS = ['price-date', 'region', 'share'];

    function fields(panel: CostPanel): string[] {
      return Array.from(
        panel.node.querySelectorAll<HTMLElement>('.jp-costguard-instance-details dt')
      ).map(dt => dt.dataset.field!);
    }

    function dd(panel: CostPanel, name: string): HTMLElement {
      return panel.node.querySelector<HTMLElement>(`dd[data-field="${name}"]`)!;
    }

    function tried(panel: CostPanel): HTMLDetailsElement {
      return panel.node.querySelector<HTMLDetailsElement>('details.jp-costguard-price-tried')!;
    }

    it('adds no rows for an older server without price', () => {
      const { panel } = setup();
      Widget.attach(panel, document.body);
      expect(fields(panel)).toEqual([
        'instance-type',
        'provider',
        'gpus',
        'host',
        'rate',
        'market',
        'price-source',
        'price-detail',
        'retrieved'
      ]);
      expect(field(panel, 'market')).toBe('on-demand');
      expect(tried(panel).hidden).toBe(true);
      expect(panel.node.querySelector('.jp-costguard-warn')).toBeNull();
      Widget.detach(panel);
      panel.dispose();
    });

    it('shows the price date, region and market source after the price detail', () => {
      const { data, panel } = setup();
      Widget.attach(panel, document.body);
      data.set({ status: pricedStatus() });
      const list = fields(panel);
      expect(list.slice(list.indexOf('price-detail'), list.indexOf('price-detail') + 3)).toEqual([
        'price-detail',
        'price-date',
        'region'
      ]);
      expect(list).not.toContain('share');
      expect(field(panel, 'price-date')).toBe('2025-11-01 (29 days old)');
      expect(dd(panel, 'price-date').classList).not.toContain('jp-costguard-warn');
      expect(field(panel, 'region')).toBe('us-east-1');
      expect(field(panel, 'market')).toBe('on-demand (set in configuration)');
      expect(panel.node.querySelector('.jp-costguard-instance-details dt[data-field="price-date"]')?.textContent).toBe('Price date');
      Widget.detach(panel);
      panel.dispose();
    });

    it('warns about a stale price with the refresh hint, and stops when fresh', () => {
      const { data, panel } = setup();
      Widget.attach(panel, document.body);
      data.set({
        status: pricedStatus({ retrieved: '2025-01-15', age_days: 320, stale: true })
      });
      const date = dd(panel, 'price-date');
      expect(date.classList).toContain('jp-costguard-warn');
      expect(date.querySelector('.jp-costguard-detail-text')?.textContent).toBe(
        '2025-01-15 (320 days old)'
      );
      expect(date.querySelector('.jp-costguard-detail-note')?.textContent).toBe(
        'This price may be out of date (older than 90 days): run `jupyter costguard catalog update`'
      );
      data.set({ status: pricedStatus() });
      expect(date.classList).not.toContain('jp-costguard-warn');
      expect(date.textContent).toBe('2025-11-01 (29 days old)');
      expect(date.querySelector('.jp-costguard-detail-note')).toBeNull();
      Widget.detach(panel);
      panel.dispose();
    });

    it('shows the region note and whose price is used', () => {
      const { data, panel } = setup();
      Widget.attach(panel, document.body);
      data.set({
        status: pricedStatus({
          region: 'eu-north-1',
          market: 'spot',
          market_source: 'metadata',
          region_note: 'price of us-east-1; eu-north-1 not in the catalog'
        })
      });
      const region = dd(panel, 'region');
      expect(region.querySelector('.jp-costguard-detail-text')?.textContent).toBe(
        'eu-north-1 (priced as us-east-1)'
      );
      expect(region.querySelector('.jp-costguard-detail-note')?.textContent).toBe(
        'price of us-east-1; eu-north-1 not in the catalog'
      );
      expect(region.title).toContain('eu-north-1 not in the catalog');
      expect(field(panel, 'market')).toBe('spot (cloud metadata)');
      Widget.detach(panel);
      panel.dispose();
    });

    it('shows the container share with its detail', () => {
      const { data, panel } = setup();
      Widget.attach(panel, document.body);
      data.set({ status: { ...pricedStatus({ share }), rate_per_hour: 5.12 } });
      expect(fields(panel)).toContain('share');
      const row = dd(panel, 'share');
      expect(row.querySelector('.jp-costguard-detail-text')?.textContent).toBe(
        "1 of 8 GPUs, 25% of CPU/memory → 15.6% of the instance's USD 32.77/h"
      );
      expect(row.querySelector('.jp-costguard-detail-note')?.textContent).toBe(share.detail);
      expect(field(panel, 'rate')).toBe('USD 5.12/h');
      Widget.detach(panel);
      panel.dispose();
    });

    it('lists how the price was decided, keeping the list open across refreshes', () => {
      const { data, panel } = setup();
      Widget.attach(panel, document.body);
      data.set({ status: pricedStatus() });
      const details = tried(panel);
      expect(details.hidden).toBe(false);
      expect(details.querySelector('summary')?.textContent).toBe('How the price was decided');
      const steps = () =>
        Array.from(details.querySelectorAll('li')).map(li => li.textContent);
      expect(steps()).toEqual([
        'c.CostGuard.instance_type is p4d.24xlarge.',
        'The catalog has p4d.24xlarge in us-east-1, on-demand.'
      ]);
      details.open = true;
      data.set({ status: pricedStatus({ tried: ['Only step.'] }) });
      expect(tried(panel)).toBe(details);
      expect(details.open).toBe(true);
      expect(steps()).toEqual(['Only step.']);
      data.set({ status: pricedStatus({ tried: [] }) });
      expect(details.hidden).toBe(true);
      Widget.detach(panel);
      panel.dispose();
    });

    it('drops the new rows when the server goes back to no price', () => {
      const { data, panel } = setup();
      Widget.attach(panel, document.body);
      data.set({ status: pricedStatus({ share, stale: true }) });
      for (const name of PRICE_FIELDS) {
        expect(fields(panel)).toContain(name);
      }
      data.set({ status });
      for (const name of PRICE_FIELDS) {
        expect(fields(panel)).not.toContain(name);
      }
      expect(tried(panel).hidden).toBe(true);
      expect(field(panel, 'market')).toBe('on-demand');
      Widget.detach(panel);
      panel.dispose();
    });
  });
});

describe('CostPanel owner (JupyterHub)', () => {
  function owner(panel: CostPanel): HTMLElement {
    return panel.node.querySelector<HTMLElement>('.jp-costguard-panel-header .jp-costguard-owner')!;
  }

  function fields(panel: CostPanel): string[] {
    return Array.from(
      panel.node.querySelectorAll<HTMLElement>('.jp-costguard-instance-details dt')
    ).map(dt => dt.dataset.field!);
  }

  it("shows whose server it is next to the title and in the instance details", () => {
    const { data, panel } = setup();
    Widget.attach(panel, document.body);
    data.set({ status: { ...status, user: 'alice', server: 'gpu-large' } });
    const node = owner(panel);
    expect(node.hidden).toBe(false);
    expect(node.textContent).toBe('alice · gpu-large');
    expect(node.title).toBe('JupyterHub user (server)');
    // Right after the title, before the simulated pill.
    expect(node.previousElementSibling?.classList).toContain('jp-costguard-panel-title');
    expect(node.nextElementSibling?.id).toBe(PANEL_SIMULATED_ID);
    expect(fields(panel)[0]).toBe('owner');
    expect(panel.node.querySelector('dt[data-field="owner"]')?.textContent).toBe('Owner');
    expect(field(panel, 'owner')).toBe('alice · gpu-large');

    data.set({ status: { ...status, user: 'alice', server: '' } });
    expect(node.textContent).toBe('alice');
    expect(field(panel, 'owner')).toBe('alice');
    Widget.detach(panel);
    panel.dispose();
  });

  it('hides the owner when not under a hub, and when the server stops saying', () => {
    const { data, panel } = setup();
    Widget.attach(panel, document.body);
    data.set({ status: { ...status, user: 'alice', server: '' } });
    expect(owner(panel).hidden).toBe(false);
    data.set({ status: { ...status, user: null, server: null } });
    expect(owner(panel).hidden).toBe(true);
    expect(owner(panel).textContent).toBe('');
    expect(fields(panel)).not.toContain('owner');
    expect(field(panel, 'owner')).toBeUndefined();
    Widget.detach(panel);
    panel.dispose();
  });

  it("renders an older server's documents (no user, no server) as before", () => {
    const { panel } = setup();
    Widget.attach(panel, document.body);
    expect('user' in status).toBe(false);
    expect(owner(panel).hidden).toBe(true);
    expect(owner(panel).textContent).toBe('');
    expect(fields(panel)).toEqual([
      'instance-type',
      'provider',
      'gpus',
      'host',
      'rate',
      'market',
      'price-source',
      'price-detail',
      'retrieved'
    ]);
    Widget.detach(panel);
    panel.dispose();
  });

  it("falls back to the kernels document's owner", async () => {
    const { panel, data } = setup();
    data.detailAnswer = () => ({
      kernelList: { simulated: false, currency: 'USD', time: 1, kernels, user: 'bob', server: 'big' } as IKernelList,
      gpuList: gpus as IGpuList
    });
    expect(owner(panel).hidden).toBe(true);
    Widget.attach(panel, document.body);
    await wait();
    expect(owner(panel).hidden).toBe(false);
    expect(owner(panel).textContent).toBe('bob · big');
    Widget.detach(panel);
    panel.dispose();
  });
});

describe('CostPanel JupyterHub budgets', () => {
  /** The panel, shown (a hidden panel renders when shown again). */
  function shown() {
    const parts = setup();
    Widget.attach(parts.panel, document.body);
    return parts;
  }

  function budgetRows(panel: CostPanel): HTMLElement[] {
    return Array.from(panel.node.querySelectorAll<HTMLElement>('.jp-costguard-hub-budget'));
  }

  function part(row: HTMLElement, name: string): string | null | undefined {
    return row.querySelector(`.jp-costguard-hub-budget-${name}`)?.textContent;
  }

  function section(panel: CostPanel): HTMLElement {
    return panel.node.querySelector<HTMLElement>('.jp-costguard-hub-budgets-section')!;
  }

  it('shows no budget section outside a hub or on an older server', () => {
    const { data, model, panel } = shown();
    expect(model.hubBudgets).toEqual([]);
    expect(section(panel).hidden).toBe(true);
    expect(budgetRows(panel)).toHaveLength(0);
    data.set({ status: budgetStatus([]) });
    expect(section(panel).hidden).toBe(true);
    expect(budgetRows(panel)).toHaveLength(0);
    panel.dispose();
  });

  it('shows one row per budget, under the header, user first', () => {
    const { data, panel } = shown();
    data.set({ status: budgetStatus([groupBudget(), hubBudget({ spent: 12.5 })]) });
    const body = panel.node.querySelector('.jp-costguard-panel-body')!;
    expect(body.firstElementChild).toBe(section(panel));
    expect(section(panel).hidden).toBe(false);
    expect(section(panel).querySelector('h3')?.textContent).toBe('Budget');
    const rows = budgetRows(panel);
    expect(rows).toHaveLength(2);
    const [mine, group] = rows;
    expect(mine.dataset.scope).toBe('user');
    expect(mine.dataset.name).toBe('alice');
    expect(mine.dataset.period).toBe('month');
    expect(part(mine, 'who')).toBe('you');
    expect(part(mine, 'period')).toBe('monthly');
    expect(part(mine, 'used')).toBe('25% used');
    expect(part(mine, 'remaining')).toBe('USD 37.50 left of 50.00');
    expect(part(mine, 'reset')).toBe('resets 2027-01-01 UTC');
    expect(mine.dataset.costguardLevel).toBe('ok');
    expect(mine.classList).not.toContain('jp-costguard-hub-budget-warning');
    expect(mine.classList).not.toContain('jp-costguard-hub-budget-critical');
    const bar = mine.querySelector<HTMLElement>('.jp-costguard-hub-budget-bar')!;
    expect(bar.getAttribute('role')).toBe('progressbar');
    expect(bar.getAttribute('aria-valuenow')).toBe('25');
    expect(bar.querySelector<HTMLElement>('.jp-costguard-hub-budget-fill')!.style.width).toBe(
      '25%'
    );
    expect(mine.querySelector<HTMLElement>('.jp-costguard-hub-budget-note')!.hidden).toBe(true);
    expect(mine.title.split('\n')[0]).toBe(
      'Budget (you, monthly): USD 37.50 left of 50.00 — resets 2027-01-01 UTC'
    );
    expect(group.dataset.scope).toBe('group');
    expect(part(group, 'who')).toBe('group ml');
    expect(part(group, 'period')).toBe('weekly');
    expect(part(group, 'remaining')).toBe('USD 15.00 left of 20.00');
    expect(part(group, 'reset')).toBe('resets 2026-12-07 UTC');
    panel.dispose();
  });

  it('warns from 80% used and is critical once spent, the bar capped at 100%', () => {
    const { data, panel } = shown();
    data.set({ status: budgetStatus([hubBudget({ spent: 42 }), groupBudget({ spent: 26 })]) });
    const [mine, group] = budgetRows(panel);
    expect(mine.dataset.costguardLevel).toBe('warning');
    expect(mine.classList).toContain('jp-costguard-hub-budget-warning');
    expect(mine.classList).not.toContain('jp-costguard-hub-budget-critical');
    expect(group.dataset.costguardLevel).toBe('critical');
    expect(group.classList).toContain('jp-costguard-hub-budget-critical');
    expect(group.classList).not.toContain('jp-costguard-hub-budget-warning');
    expect(part(group, 'used')).toBe('130% used');
    expect(part(group, 'remaining')).toBe('USD 0.00 left of 20.00');
    const bar = group.querySelector<HTMLElement>('.jp-costguard-hub-budget-bar')!;
    expect(bar.getAttribute('aria-valuenow')).toBe('100');
    expect(bar.querySelector<HTMLElement>('.jp-costguard-hub-budget-fill')!.style.width).toBe(
      '100%'
    );
    const note = group.querySelector<HTMLElement>('.jp-costguard-hub-budget-note')!;
    expect(note.hidden).toBe(false);
    expect(note.textContent).toBe('GPU servers cannot be started until the reset');
    expect(group.title).toContain('GPU servers cannot be started until the reset');
    panel.dispose();
  });

  it('shows a group budget known only by what is left of it without a bar', () => {
    const { data, panel } = shown();
    data.set({ status: budgetStatus([hubBudget({ spent: 12.5 }), groupRemaining(3.5)]) });
    const [mine, group] = budgetRows(panel);
    expect(part(group, 'who')).toBe('group ml');
    expect(part(group, 'remaining')).toBe('USD 3.50 left');
    expect(group.querySelector<HTMLElement>('.jp-costguard-hub-budget-bar')!.hidden).toBe(
      true
    );
    expect(group.querySelector<HTMLElement>('.jp-costguard-hub-budget-used')!.hidden).toBe(
      true
    );
    expect(group.dataset.costguardLevel).toBe('ok');
    expect(group.textContent).not.toContain('NaN');
    expect(group.title).not.toContain('NaN');
    expect(group.title.split('\n')[0]).toBe(
      'Budget (group ml, weekly): USD 3.50 left — resets 2026-12-07 UTC'
    );
    expect(mine.querySelector<HTMLElement>('.jp-costguard-hub-budget-bar')!.hidden).toBe(false);
    data.set({ status: budgetStatus([groupRemaining(0)]) });
    const [spent] = budgetRows(panel);
    expect(spent.dataset.costguardLevel).toBe('critical');
    expect(spent.querySelector<HTMLElement>('.jp-costguard-hub-budget-note')!.hidden).toBe(
      false
    );
    panel.dispose();
  });

  it('updates rows in place and removes the section when the budgets go', () => {
    const { data, panel } = shown();
    data.set({ status: budgetStatus([hubBudget(), groupBudget()]) });
    const [mine] = budgetRows(panel);
    data.set({ status: budgetStatus([hubBudget({ spent: 50 }), groupBudget()]) });
    expect(budgetRows(panel)[0]).toBe(mine);
    expect(mine.classList).toContain('jp-costguard-hub-budget-critical');
    data.set({ status: budgetStatus([hubBudget()]) });
    expect(budgetRows(panel)).toHaveLength(1);
    expect(mine.classList).not.toContain('jp-costguard-hub-budget-critical');
    data.set({ status });
    expect(budgetRows(panel)).toHaveLength(0);
    expect(section(panel).hidden).toBe(true);
    panel.dispose();
  });
});
