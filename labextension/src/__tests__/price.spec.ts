/**
 * The `price` object of the status document: reading it tolerantly, and the
 * tooltip lines made of it.
 */
import type { ICostStatus } from '../api';
import {
  formatAge,
  formatContainerShare,
  formatMarket,
  formatPriceDate,
  formatPriceSource,
  formatRegion,
  formatShare,
  formatStale
} from '../format';
import { formatClock } from '../format';
import { summarizeStatus } from '../statussummary';
import { priceOf } from '../price';
import { price, pricedStatus, share, status } from './fixtures';

/** Tooltip lines of a status document. */
function tooltip(doc: ICostStatus): string[] {
  return summarizeStatus(doc).tooltip.split('\n');
}

const PRICE_LINE =
  'USD 32.77/h on-demand · aws p4d.24xlarge, us-east-1 · price of 2025-11-01 (29 days old)';

describe('priceOf', () => {
  it('is null for an older server without price', () => {
    expect(priceOf(status)).toBeNull();
    expect(priceOf({ ...status, price: null })).toBeNull();
    expect(priceOf({ ...status, price: 'x' as any })).toBeNull();
    expect(priceOf({ ...status, price: [] as any })).toBeNull();
    expect(priceOf(null)).toBeNull();
  });

  it('passes a well-formed price through', () => {
    expect(priceOf(pricedStatus())).toEqual(price);
    expect(priceOf(pricedStatus({ share }))?.share).toEqual(share);
  });

  it('reads missing or mistyped fields as unknown', () => {
    const p = priceOf({
      ...status,
      market: 'spot',
      price: { provider: 7, region: '', age_days: 'old', tried: ['a', 3, ''] } as any
    })!;
    expect(p.provider).toBeNull();
    expect(p.region).toBeNull();
    expect(p.age_days).toBeNull();
    expect(p.retrieved).toBeNull();
    expect(p.market).toBe('spot');
    expect(p.stale).toBe(false);
    expect(p.stale_after_days).toBe(90);
    expect(p.refresh_hint).toBe('jupyter costguard catalog update');
    expect(p.share).toBeNull();
    expect(p.tried).toEqual(['a']);
  });

  it('falls back to age_days > stale_after_days when stale is missing', () => {
    const aged = (age: number) =>
      priceOf({ ...status, price: { age_days: age, stale_after_days: 30 } as any })!.stale;
    expect(aged(31)).toBe(true);
    expect(aged(30)).toBe(false);
    // The server's word wins.
    expect(priceOf(pricedStatus({ age_days: 400, stale: false }))!.stale).toBe(false);
  });

  it('keeps a share only with a fraction', () => {
    expect(priceOf({ ...status, price: { share: { gpus_held: 1 } } as any })!.share).toBeNull();
    const s = priceOf({
      ...status,
      price: { share: { fraction: 0.5, cpu_share: 0.5, memory_share: 0.25 } } as any
    })!.share!;
    expect(s.fraction).toBe(0.5);
    expect(s.host_share).toBe(0.5);
    expect(s.detail).toBe('');
  });
});

describe('price formatting', () => {
  it('labels the metadata price source', () => {
    expect(formatPriceSource('metadata')).toBe('cloud metadata');
  });

  it('formats shares, ages and dates', () => {
    expect(formatShare(0.25)).toBe('25%');
    expect(formatShare(0.15625)).toBe('15.6%');
    expect(formatShare(NaN)).toBe('–');
    expect(formatAge(0)).toBe('today');
    expect(formatAge(1)).toBe('1 day old');
    expect(formatAge(320)).toBe('320 days old');
    expect(formatAge(null)).toBe('');
    expect(formatPriceDate(price)).toBe('2025-11-01 (29 days old)');
    expect(formatPriceDate({ ...price, age_days: null })).toBe('2025-11-01');
    expect(formatPriceDate({ ...price, retrieved: null, age_days: null })).toBeNull();
  });

  it('formats market, region and staleness', () => {
    expect(formatMarket(price)).toBe('on-demand (set in configuration)');
    expect(formatMarket({ ...price, market: 'spot', market_source: 'metadata' })).toBe(
      'spot (cloud metadata)'
    );
    expect(formatMarket({ ...price, market_source: '' })).toBe('on-demand');
    expect(formatRegion(price)).toBe('us-east-1');
    expect(formatRegion({ ...price, region: 'eu-north-1' })).toBe(
      'eu-north-1 (priced as us-east-1)'
    );
    expect(formatRegion({ ...price, region: null, region_priced: null })).toBeNull();
    expect(formatStale(price)).toBeNull();
    expect(formatStale({ ...price, stale: true, stale_after_days: 60 })).toBe(
      'This price may be out of date (older than 60 days): run `jupyter costguard catalog update`'
    );
  });

  it('formats the container share', () => {
    expect(formatContainerShare(price)).toBeNull();
    expect(formatContainerShare({ ...price, share })).toBe(
      "1 of 8 GPUs, 25% of CPU/memory → 15.6% of the instance's USD 32.77/h"
    );
    expect(
      formatContainerShare({
        ...price,
        instance_rate_per_hour: null,
        share: { ...share, gpus_instance: 0 }
      })
    ).toBe('25% of CPU/memory → 15.6% of the instance');
  });
});

describe('status tooltip with price', () => {
  it('renders as before for an older server', () => {
    const lines = tooltip(status);
    expect(lines).toEqual([
      'Instance: p4d.24xlarge (aws)',
      'Rate: USD 32.77/h on-demand',
      'Price: set in configuration — c.CostGuard.instance_type',
      expect.stringMatching(/^Server spent: USD 1\.23 since /),
      'Waste: USD 0.50 (41% of spend: idle GPUs a kernel holds)',
      'Unattributed: USD 0.10 (USD 0.05 of it: GPUs nobody holds (not waste))',
      'Simulated: numbers come from a replayed trace, not this machine',
      `Figures as of ${formatClock(status.time as number, true)}`,
      'Click to open the cost panel'
    ]);
    expect(summarizeStatus(status).stale).toBe(false);
  });

  it('adds the price and its date after the price source', () => {
    const lines = tooltip(pricedStatus());
    const at = lines.indexOf(PRICE_LINE);
    expect(at).toBeGreaterThan(0);
    expect(lines[at - 1]).toMatch(/^Price: set in configuration/);
    expect(lines.some(l => l.startsWith('This price may be out of date'))).toBe(false);
    expect(lines.some(l => l.startsWith('Region:'))).toBe(false);
    expect(lines.some(l => l.startsWith('Container share:'))).toBe(false);
    expect(summarizeStatus(pricedStatus()).stale).toBe(false);
  });

  it('warns when the price is stale, with the hint and the threshold', () => {
    const doc = pricedStatus({
      retrieved: '2025-01-15',
      age_days: 320,
      stale: true,
      refresh_hint: 'jupyter costguard catalog update --provider aws'
    });
    const lines = tooltip(doc);
    expect(lines).toContain(
      'USD 32.77/h on-demand · aws p4d.24xlarge, us-east-1 · price of 2025-01-15 (320 days old)'
    );
    expect(lines).toContain(
      'This price may be out of date (older than 90 days): run `jupyter costguard catalog update --provider aws`'
    );
    expect(summarizeStatus(doc).stale).toBe(true);
  });

  it('shows the region note and prices the line with the priced region', () => {
    const lines = tooltip(
      pricedStatus({
        region: 'eu-north-1',
        region_note: 'price of us-east-1; eu-north-1 not in the catalog'
      })
    );
    expect(lines).toContain(PRICE_LINE);
    expect(lines).toContain('Region: price of us-east-1; eu-north-1 not in the catalog');
  });

  it("shows the container share against the instance's rate", () => {
    const doc = { ...pricedStatus({ share }), rate_per_hour: 5.12 };
    const lines = tooltip(doc);
    expect(lines).toContain('Rate: USD 5.12/h on-demand');
    expect(lines).toContain(PRICE_LINE);
    expect(lines).toContain(
      "Container share: 1 of 8 GPUs, 25% of CPU/memory → 15.6% of the instance's USD 32.77/h"
    );
  });

  it('says only what it knows', () => {
    const lines = tooltip({
      ...status,
      instance: null,
      rate_per_hour: null,
      price: { market: 'spot', age_days: 3 } as any
    });
    expect(lines).toContain('spot · 3 days old');
    const none = tooltip({ ...status, rate_per_hour: null, market: undefined, price: {} as any });
    expect(none.filter(l => l.includes(' · '))).toEqual([]);
  });
});
