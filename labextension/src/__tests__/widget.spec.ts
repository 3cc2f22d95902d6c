/**
 * @jest-environment jsdom
 */
import { Signal } from '@lumino/signaling';

import type { ICostStatus } from '../api';
import type { CostStatusModel, CostStatusState } from '../model';
import { DEFAULT_SUMMARY_OPTIONS, ISummaryOptions } from '../format';
import { CostStatusWidget, STATUS_ID } from '../widget';

/** Just enough of CostStatusModel for the widget. */
class FakeModel {
  changed = new Signal<this, void>(this);
  state: CostStatusState = 'loading';
  status: ICostStatus | null = null;
  error: Error | null = null;
  summaryOptions: ISummaryOptions = { ...DEFAULT_SUMMARY_OPTIONS };

  set(patch: Partial<FakeModel>): void {
    Object.assign(this, patch);
    this.changed.emit();
  }
}

const status: ICostStatus = {
  instance: { provider: 'aws', instance_type: 'p4d.24xlarge' },
  rate_per_hour: 32.77,
  currency: 'USD',
  market: 'on-demand',
  price_source: 'config',
  price_detail: 'c.CostGuard.instance_type',
  simulated: true,
  totals: { spend: 1.2345, waste: 0.5, unattributed: 0.1, since: 1764460000 },
  gpu_status: 'ok',
  last_sample_time: 1764460000
};

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
  });

  it('renders the summary and the simulated badge', () => {
    const { model, widget } = make();
    model.set({ state: 'ok', status });
    expect(widget.node.textContent).toBe(
      '⚡ p4d.24xlarge · USD 32.77/h · spent USD 1.23simulated'
    );
    const badge = widget.node.querySelector('.jp-costguard-simulated');
    expect(badge?.textContent).toBe('simulated');
    expect(badge?.id).toBe('jp-costguard-simulated');
    expect(widget.node.querySelector('.jp-costguard-rate')?.textContent).toBe(
      'USD 32.77/h'
    );
    expect(widget.node.title).toContain('c.CostGuard.instance_type');
  });

  it('drops the badge for real numbers', () => {
    const { model, widget } = make();
    model.set({ state: 'ok', status: { ...status, simulated: false } });
    expect(widget.node.querySelector('.jp-costguard-simulated')).toBeNull();
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
    model.set({ state: 'ok', status });
    model.set({ state: 'offline', error: new Error('boom') });
    expect(widget.node.textContent).toBe('costguard: offline');
    expect(widget.node.classList).toContain('jp-costguard-offline');
    expect(widget.node.dataset.costguardState).toBe('offline');
    expect(widget.node.title).toContain('boom');
  });
});
