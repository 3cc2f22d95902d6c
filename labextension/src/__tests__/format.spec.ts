import {
  formatAmount,
  formatMoney,
  formatRate,
  summarizeStatus
} from '../format';
import type { ICostStatus } from '../api';

const base: ICostStatus = {
  instance: { provider: 'aws', instance_type: 'p4d.24xlarge' },
  rate_per_hour: 32.77,
  currency: 'USD',
  market: 'on-demand',
  price_source: 'detected',
  price_detail: 'catalog 2025-11-01',
  simulated: false,
  totals: { spend: 1.2345, waste: 0.5, unattributed: 0.1, since: 1764460000 },
  gpu_status: 'ok',
  last_sample_time: 1764460000
};

describe('formatAmount', () => {
  it.each([
    [32.77, '32.77'],
    [1.2345, '1.23'],
    [1, '1.00'],
    [0, '0.00'],
    [1234.5, '1234.50'],
    [0.042, '0.042'],
    [0.5, '0.50'],
    [0.123456, '0.123'],
    [0.0012, '0.0012'],
    [0.0000001, '0.00'],
    [-0.042, '-0.042'],
    [-0.0000001, '0.00']
  ])('%p -> %p', (value, expected) => {
    expect(formatAmount(value)).toBe(expected);
  });

  it('handles non-finite values', () => {
    expect(formatAmount(NaN)).toBe('–');
  });
});

describe('formatMoney / formatRate', () => {
  it('prefixes the currency code', () => {
    expect(formatMoney(1.2345, 'USD')).toBe('USD 1.23');
    expect(formatMoney(0.042, 'EUR')).toBe('EUR 0.042');
    expect(formatRate(32.77, 'USD')).toBe('USD 32.77/h');
  });
});

describe('summarizeStatus', () => {
  it('renders instance, rate and spend', () => {
    const s = summarizeStatus(base);
    expect(s.text).toBe('p4d.24xlarge · USD 32.77/h · spent USD 1.23');
    expect(s.simulated).toBe(false);
    expect(s.unpriced).toBe(false);
    expect(s.tooltip).toContain('catalog 2025-11-01');
  });

  it('flags simulated numbers', () => {
    expect(summarizeStatus({ ...base, simulated: true }).simulated).toBe(true);
  });

  it('shows unpriced with the price detail in the tooltip', () => {
    const s = summarizeStatus({
      ...base,
      rate_per_hour: null,
      price_source: 'unpriced',
      price_detail: 'no catalog match for this host',
      totals: { spend: 0 }
    });
    expect(s.unpriced).toBe(true);
    expect(s.text).toBe('p4d.24xlarge · unpriced · spent USD 0.00');
    expect(s.tooltip).toContain('no catalog match for this host');
  });

  it('omits an unknown instance and honours toggles', () => {
    const s = summarizeStatus(
      { ...base, instance: null },
      { showRate: false, showSpend: true }
    );
    expect(s.text).toBe('spent USD 1.23');
    const t = summarizeStatus(base, { showRate: true, showSpend: false });
    expect(t.text).toBe('p4d.24xlarge · USD 32.77/h');
  });

  it('tolerates missing totals', () => {
    const s = summarizeStatus({ ...base, totals: null });
    expect(s.text).toBe('p4d.24xlarge · USD 32.77/h');
  });
});
