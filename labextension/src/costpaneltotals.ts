/**
 * The cost panel's "Totals" section: what the server has spent and wasted,
 * what no notebook spent, and since when. Waste and Unattributed each say in
 * a line (and a tooltip) which idle GPUs they count: waste the ones a kernel
 * holds, unattributed the ones nobody holds (`statussummary.ts`'s words).
 * Beside waste, the waste hibernating removed (`GET snapshots`), where the
 * server hibernates.
 *
 * Stable DOM hooks: `.jp-costguard-totals [data-field]` (the figure in
 * `.jp-costguard-detail-text`, the line under it `.jp-costguard-detail-note`).
 */
import type { CostPanelModel } from './costpanelmodel';
import { CostPanelSection, DetailItem, renderDetails } from './costpanelsection';
import { el } from './dom';
import { formatMoney, formatTime } from './format';
import {
  UNATTRIBUTED_EXPLAINED,
  unattributedNote,
  WASTE_EXPLAINED,
  wasteNote
} from './statussummary';

/** The tooltips of the rows' labels. */
export const WASTE_REMOVED_EXPLAINED =
  'What hibernating idle GPU kernels saved: the rate each kernel held × the time it ' +
  'stayed hibernated, until its first restore and at most 12 hours a snapshot, over the ' +
  'kept snapshots (deleting one drops its share).';

const LABEL_TITLES: { [field: string]: string } = {
  waste: WASTE_EXPLAINED,
  'waste-removed': WASTE_REMOVED_EXPLAINED,
  unattributed: UNATTRIBUTED_EXPLAINED
};

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
    const known = (v: unknown): boolean => typeof v === 'number';
    const removed = this.model.wasteRemoved;
    const removedItem: DetailItem[] = removed
      ? [
          [
            'waste-removed',
            'Waste removed',
            formatMoney(removed.value, removed.currency),
            undefined,
            { note: 'by hibernating idle GPU kernels' }
          ]
        ]
      : [];
    renderDetails(this._details, [
      ['spend', 'Spend', money(t?.spend)],
      ['waste', 'Waste', money(t?.waste), undefined, { note: known(t?.waste) ? wasteNote(t) : null }],
      ...removedItem,
      [
        'unattributed',
        'Unattributed',
        money(t?.unattributed),
        undefined,
        { note: known(t?.unattributed) ? unattributedNote(t, currency) : null }
      ],
      ['since', 'Since', typeof t?.since === 'number' ? formatTime(t.since) : '–']
    ]);
    for (const [field, title] of Object.entries(LABEL_TITLES)) {
      const dt = this._details.querySelector<HTMLElement>(`dt[data-field="${field}"]`);
      if (dt && dt.title !== title) {
        dt.title = title;
      }
    }
  }

  private _details: HTMLElement;
}
