/**
 * The cost panel's "Instance" section: what costguard believes it runs on,
 * its rate and where the price comes from, and a `<details>` list of how the
 * price was decided.
 *
 * Stable DOM hooks: `.jp-costguard-instance-details [data-field]`,
 * `dd.jp-costguard-warn` (a stale price), `.jp-costguard-detail-note` (a
 * row's second line), `.jp-costguard-price-tried` (the `<details>`).
 */
import type { ICostPrice, ICostStatus } from './api';
import type { CostPanelModel } from './costpanelmodel';
import { CostPanelSection, DetailItem, renderDetails } from './costpanelsection';
import { el, setText } from './dom';
import {
  formatContainerShare,
  formatMarket,
  formatPriceDate,
  formatPriceSource,
  formatRate,
  formatRegion,
  formatStale
} from './format';
import { priceOf } from './price';

/** Rows about the machine: owner, type, provider, GPUs, host. */
function machineItems(status: ICostStatus, owner: string | null): DetailItem[] {
  const i = status.instance;
  const items: DetailItem[] = [];
  if (owner) {
    items.push(['owner', 'Owner', owner]);
  }
  items.push(['instance-type', 'Type', i?.instance_type ? String(i.instance_type) : 'unknown']);
  items.push(['provider', 'Provider', i?.provider ? String(i.provider) : '–']);
  let gpus = 'none';
  if (i && typeof i.gpu_count === 'number' && i.gpu_count > 0) {
    const memory = typeof i.gpu_memory_gib === 'number' ? ` (${i.gpu_memory_gib} GiB)` : '';
    gpus = `${i.gpu_count} × ${i.gpu_model ?? 'GPU'}${memory}`;
  } else if (typeof status.gpu_count === 'number' && status.gpu_count > 0) {
    gpus = `${status.gpu_count} visible`;
  }
  items.push(['gpus', 'GPUs', gpus]);
  if (i && (i.vcpus || i.memory_gib)) {
    items.push(['host', 'Host', `${i.vcpus ?? '?'} vCPU, ${i.memory_gib ?? '?'} GiB RAM`]);
  }
  return items;
}

/** Rows about the price: rate, market, source, detail, and the server's `price` facts. */
function priceItems(status: ICostStatus, price: ICostPrice | null, currency: string): DetailItem[] {
  const items: DetailItem[] = [
    [
      'rate',
      'Rate',
      typeof status.rate_per_hour === 'number'
        ? formatRate(status.rate_per_hour, currency)
        : 'unpriced'
    ],
    ['market', 'Market', price ? formatMarket(price) : status.market ? String(status.market) : '–'],
    ['price-source', 'Price source', formatPriceSource(status.price_source)],
    ['price-detail', 'Price detail', status.price_detail ? String(status.price_detail) : '–']
  ];
  if (price) {
    items.push([
      'price-date',
      'Price date',
      formatPriceDate(price) ?? 'unknown',
      undefined,
      { warn: price.stale, note: formatStale(price) }
    ]);
    items.push(['region', 'Region', formatRegion(price) ?? 'unknown', undefined, { note: price.region_note }]);
    const share = formatContainerShare(price, currency);
    if (share) {
      items.push(['share', 'Container share', share, undefined, { note: price.share?.detail }]);
    }
  }
  return items;
}

/** Rows about the catalog (with its link) and GPU telemetry that is not ok. */
function sourceItems(status: ICostStatus): DetailItem[] {
  const i = status.instance;
  const retrieved = i?.retrieved ? String(i.retrieved) : '–';
  const url =
    i?.source_url && /^https?:\/\//i.test(String(i.source_url)) ? String(i.source_url) : undefined;
  const items: DetailItem[] = [['retrieved', 'Catalog retrieved', retrieved, url]];
  if (status.gpu_status && status.gpu_status !== 'ok') {
    items.push([
      'gpu-telemetry',
      'GPU telemetry',
      `${status.gpu_status}${status.gpu_detail ? ` (${status.gpu_detail})` : ''}`
    ]);
  }
  return items;
}

/** The "Instance" section (see the file's header). */
export class InstanceSection extends CostPanelSection {
  constructor(model: CostPanelModel) {
    super(model, 'Instance', 'jp-costguard-instance-section');
    this._details = el('dl', 'jp-costguard-details jp-costguard-instance-details');
    this.node.appendChild(this._details);
    this._tried = el('details', 'jp-costguard-price-tried');
    this._tried.appendChild(
      el('summary', 'jp-costguard-price-tried-summary', 'How the price was decided')
    );
    this._triedList = el('ol', 'jp-costguard-price-tried-list');
    this._tried.appendChild(this._triedList);
    this._tried.hidden = true;
    this.node.appendChild(this._tried);
  }

  render(): void {
    const status = this.model.status;
    if (!status) {
      renderDetails(this._details, [['instance-type', 'Type', '–']]);
      this._renderTried([]);
      return;
    }
    const price = priceOf(status);
    renderDetails(this._details, [
      ...machineItems(status, this.model.owner),
      ...priceItems(status, price, this.model.currency),
      ...sourceItems(status)
    ]);
    this._renderTried(price?.tried ?? []);
  }

  /** The `<details>` list of how the server decided on the price. */
  private _renderTried(steps: ReadonlyArray<string>): void {
    this._tried.hidden = steps.length === 0;
    const list = this._triedList;
    while (list.children.length > steps.length) {
      list.lastElementChild!.remove();
    }
    steps.forEach((step, index) => {
      const li = list.children[index] ?? list.appendChild(el('li'));
      setText(li, step);
    });
  }

  private _details: HTMLElement;
  private _tried: HTMLDetailsElement;
  private _triedList: HTMLOListElement;
}
