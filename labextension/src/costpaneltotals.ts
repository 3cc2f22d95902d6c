/**
 * The cost panel's "Totals" section: what the server has spent and wasted,
 * what no notebook spent, and since when.
 *
 * Stable DOM hooks: `.jp-costguard-totals [data-field]`.
 */
import type { CostPanelModel } from './costpanelmodel';
import { CostPanelSection, renderDetails } from './costpanelsection';
import { el } from './dom';
import { formatMoney, formatTime } from './format';

/** The "Totals" section (see the file's header). */
export class TotalsSection extends CostPanelSection {
  constructor(model: CostPanelModel) {
    super(model, 'Totals', 'jp-costguard-totals-section');
    this._details = el('dl', 'jp-costguard-details jp-costguard-totals');
    this.node.appendChild(this._details);
  }

  render(): void {
    const currency = this.model.currency;
    const t = this.model.status?.totals;
    const money = (v: unknown): string =>
      typeof v === 'number' ? formatMoney(v, currency) : '–';
    renderDetails(this._details, [
      ['spend', 'Spend', money(t?.spend)],
      ['waste', 'Waste', money(t?.waste)],
      ['unattributed', 'Unattributed', money(t?.unattributed)],
      ['since', 'Since', typeof t?.since === 'number' ? formatTime(t.since) : '–']
    ]);
  }

  private _details: HTMLElement;
}
