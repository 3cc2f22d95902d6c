/**
 * @jest-environment jsdom
 */
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import type { AlertSeverity, IAlert, ICostStatus } from '../api';
import type { CostStatusModel, CostStatusState } from '../statusmodel';
import { DEFAULT_SUMMARY_OPTIONS, IActiveNotebook, ISummaryOptions } from '../statussummary';
import { CostStatusWidget, STATUS_ID } from '../statusbar';
import {
  alert,
  budgetStatus,
  groupBudget,
  hubBudget,
  notebook,
  pricedStatus,
  share,
  status as fixture
} from './fixtures';

/** Just enough of CostStatusModel for the widget. */
class FakeModel {
  changed = new Signal<this, void>(this);
  state: CostStatusState = 'loading';
  status: ICostStatus | null = null;
  error: Error | null = null;
  summaryOptions: ISummaryOptions = { ...DEFAULT_SUMMARY_OPTIONS };
  activeNotebook: IActiveNotebook | null = null;
  activeAlerts: IAlert[] = [];
  activeSeverity: AlertSeverity | null = null;
  notebooksSimulated = false;

  set(patch: Partial<FakeModel>): void {
    Object.assign(this, patch);
    this.changed.emit();
  }
}

const status: ICostStatus = { ...fixture, totals: { ...fixture.totals } };

function make(): { model: FakeModel; widget: CostStatusWidget } {
  const model = new FakeModel();
  const widget = new CostStatusWidget(model as unknown as CostStatusModel);
  return { model, widget };
}

describe('CostStatusWidget', () => {
  it('has a stable id and class', () => {
    const { widget } = make();
    expect(widget.node.id).toBe(STATUS_ID);
    expect(widget.node.classList).toContain('jp-costguard-status');
    expect(widget.node.dataset.costguardState).toBe('loading');
    expect(widget.node.textContent).toBe('costguard: …');
  });

  it('renders the summary and the simulated badge', () => {
    const { model, widget } = make();
    model.set({ state: 'ok', status });
    expect(widget.node.textContent).toBe(
      '⚡ p4d.24xlarge · USD 32.77/h' + 'simulated'
    );
    const badge = widget.node.querySelector('.jp-costguard-simulated');
    expect(badge?.textContent).toBe('simulated');
    expect(badge?.id).toBe('jp-costguard-simulated');
    expect(widget.node.dataset.costguardSimulated).toBe('true');
    expect(widget.node.querySelector('.jp-costguard-rate')?.textContent).toBe(
      'USD 32.77/h'
    );
    expect(widget.node.title).toContain('c.CostGuard.instance_type');
  });

  it("shows the active notebook's spend", () => {
    const { model, widget } = make();
    model.set({
      state: 'ok',
      status: { ...status, simulated: false },
      activeNotebook: {
        path: 'explore.ipynb',
        doc: notebook('explore.ipynb', 0.75)
      }
    });
    expect(
      widget.node.querySelector('.jp-costguard-notebook')?.textContent
    ).toBe('notebook USD 0.75');
    expect(widget.node.dataset.costguardNotebook).toBe('explore.ipynb');
    expect(widget.node.querySelector('.jp-costguard-simulated')).toBeNull();
  });

  it('shows the server total when enabled', () => {
    const { model, widget } = make();
    model.set({
      state: 'ok',
      status,
      summaryOptions: { ...DEFAULT_SUMMARY_OPTIONS, showServerTotal: true }
    });
    expect(widget.node.querySelector('.jp-costguard-spend')?.textContent).toBe(
      'total USD 1.23'
    );
  });

  it('keeps the pill when only the notebook figures are simulated', () => {
    const { model, widget } = make();
    model.set({
      state: 'ok',
      status: { ...status, simulated: false },
      notebooksSimulated: true
    });
    expect(widget.node.querySelector('#jp-costguard-simulated')).not.toBeNull();
  });

  it('takes the warning colour while the notebook has an alert', () => {
    const { model, widget } = make();
    model.set({
      state: 'ok',
      status,
      activeNotebook: { path: 'explore.ipynb', doc: null },
      activeAlerts: [alert('a1', 'warning')],
      activeSeverity: 'warning'
    });
    expect(widget.node.classList).toContain('jp-costguard-alert');
    expect(widget.node.dataset.costguardSeverity).toBe('warning');
    expect(widget.node.title).toContain('Alert (warning): GPU idle');
    model.set({ activeAlerts: [], activeSeverity: null });
    expect(widget.node.classList).not.toContain('jp-costguard-alert');
    expect(widget.node.dataset.costguardSeverity).toBeUndefined();
  });

  it('shows unpriced with the detail in the tooltip', () => {
    const { model, widget } = make();
    model.set({
      state: 'ok',
      status: {
        ...status,
        rate_per_hour: null,
        price_source: 'unpriced',
        price_detail: 'unknown host'
      }
    });
    expect(
      widget.node.querySelector('.jp-costguard-unpriced')?.textContent
    ).toBe('unpriced');
    expect(widget.node.title).toContain('unknown host');
  });

  it('goes quietly offline', () => {
    const { model, widget } = make();
    model.set({ state: 'ok', status, activeSeverity: 'critical' });
    model.set({ state: 'offline', error: new Error('boom') });
    expect(widget.node.textContent).toBe('costguard: offline');
    expect(widget.node.classList).toContain('jp-costguard-offline');
    expect(widget.node.classList).not.toContain('jp-costguard-alert');
    expect(widget.node.dataset.costguardState).toBe('offline');
    expect(widget.node.title).toContain('boom');
  });

  it('emits clicked on click and Enter', () => {
    const { widget } = make();
    Widget.attach(widget, document.body);
    let clicks = 0;
    widget.clicked.connect(() => clicks++);
    widget.node.click();
    widget.node.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter' }));
    expect(clicks).toBe(2);
    Widget.detach(widget);
    widget.node.click();
    expect(clicks).toBe(2);
    widget.dispose();
  });

  it('puts the price, its date and the share in the tooltip', () => {
    const { model, widget } = make();
    model.set({ state: 'ok', status: { ...pricedStatus({ share }), rate_per_hour: 5.12 } });
    const lines = widget.node.title.split('\n');
    expect(lines).toContain(
      'USD 32.77/h on-demand · aws p4d.24xlarge, us-east-1 · price of 2025-11-01 (29 days old)'
    );
    expect(lines).toContain(
      "Container share: 1 of 8 GPUs, 25% of CPU/memory → 15.6% of the instance's USD 32.77/h"
    );
    expect(widget.node.classList).not.toContain('jp-costguard-price-stale');
  });

  it('marks a stale price and drops the mark when it is fresh again', () => {
    const { model, widget } = make();
    model.set({
      state: 'ok',
      status: pricedStatus({ retrieved: '2025-01-15', age_days: 320, stale: true })
    });
    expect(widget.node.classList).toContain('jp-costguard-price-stale');
    expect(widget.node.title).toContain(
      'This price may be out of date (older than 90 days): run `jupyter costguard catalog update`'
    );
    model.set({ status: pricedStatus() });
    expect(widget.node.classList).not.toContain('jp-costguard-price-stale');
    expect(widget.node.title).not.toContain('out of date');
    model.set({ status: pricedStatus({ stale: true }) });
    model.set({ state: 'offline', error: new Error('boom') });
    expect(widget.node.classList).not.toContain('jp-costguard-price-stale');
  });

  it('renders an older server without price as before', () => {
    const { model, widget } = make();
    model.set({ state: 'ok', status });
    expect(widget.node.textContent).toBe('⚡ p4d.24xlarge · USD 32.77/h' + 'simulated');
    expect(widget.node.classList).not.toContain('jp-costguard-price-stale');
    expect(widget.node.title).not.toContain('price of');
    expect(widget.node.title).not.toContain('Container share');
  });

  it("names the JupyterHub user's server first in the tooltip", () => {
    const { model, widget } = make();
    model.set({ state: 'ok', status: { ...status, user: 'alice', server: 'gpu-large' } });
    expect(widget.node.title.split('\n')[0]).toBe("alice's server gpu-large");
    expect(widget.node.textContent).toBe('⚡ p4d.24xlarge · USD 32.77/h' + 'simulated');
    model.set({ status: { ...status, user: 'alice', server: '' } });
    expect(widget.node.title.split('\n')[0]).toBe("alice's server");
    model.set({ status });
    expect(widget.node.title.split('\n')[0]).toBe('Instance: p4d.24xlarge (aws)');
    expect(widget.node.title).not.toContain("'s server");
  });

  it('lists the JupyterHub budgets in the tooltip, one line each', () => {
    const { model, widget } = make();
    model.set({ state: 'ok', status: budgetStatus([groupBudget(), hubBudget()]) });
    const lines = widget.node.title.split('\n');
    const budgetLines = lines.filter(l => l.startsWith('Budget'));
    expect(budgetLines).toEqual([
      'Budget (you, monthly): USD 12.40 left of 50.00 — resets 2027-01-01 UTC',
      'Budget (group ml, weekly): USD 15.00 left of 20.00 — resets 2026-12-07 UTC'
    ]);
    expect(widget.node.classList).not.toContain('jp-costguard-budget-spent');
    expect(widget.node.querySelector('.jp-costguard-budget')).toBeNull();
    expect(widget.node.textContent).toBe('⚡ p4d.24xlarge · USD 32.77/h' + 'simulated');
  });

  it('marks a spent budget, says GPU servers wait for the reset, and drops the mark', () => {
    const { model, widget } = make();
    model.set({
      state: 'ok',
      status: budgetStatus([hubBudget(), groupBudget({ spent: 20 })])
    });
    expect(widget.node.classList).toContain('jp-costguard-budget-spent');
    expect(widget.node.querySelector('.jp-costguard-budget')?.textContent).toBe(
      'budget spent'
    );
    expect(widget.node.textContent).toBe(
      '⚡ p4d.24xlarge · USD 32.77/h · budget spent' + 'simulated'
    );
    const lines = widget.node.title.split('\n');
    expect(lines).toContain(
      'Budget (group ml, weekly): USD 0.00 left of 20.00 — resets 2026-12-07 UTC'
    );
    expect(lines).toContain(
      'Budget spent: GPU servers cannot be started until the reset on 2026-12-07 UTC'
    );
    // a new period (the next spawn's budgets): nothing spent any more
    model.set({ status: budgetStatus([hubBudget(), groupBudget({ spent: 0 })]) });
    expect(widget.node.classList).not.toContain('jp-costguard-budget-spent');
    expect(widget.node.title).not.toContain('cannot be started');
    model.set({ status: budgetStatus([hubBudget({ spent: 50 })]) });
    expect(widget.node.classList).toContain('jp-costguard-budget-spent');
    model.set({ state: 'offline', error: new Error('boom') });
    expect(widget.node.classList).not.toContain('jp-costguard-budget-spent');
  });

  it('renders an older server without hub_budgets as before', () => {
    const { model, widget } = make();
    model.set({ state: 'ok', status });
    expect(widget.node.title).not.toContain('Budget');
    expect(widget.node.classList).not.toContain('jp-costguard-budget-spent');
  });
});
