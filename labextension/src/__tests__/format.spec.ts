import {
  formatAmount,
  formatBytes,
  formatDuration,
  formatElapsed,
  formatMoney,
  formatOwner,
  formatOwnerLine,
  formatPercent,
  formatPriceSource,
  formatRate,
  ownerOf
} from '../format';
import { summarizeStatus } from '../statussummary';
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
  const all = { showRate: true, showNotebookSpend: true, showServerTotal: true };
  const notebook = {
    path: 'work/explore.ipynb',
    doc: {
      path: 'work/explore.ipynb',
      spend: 0.42,
      waste: 0.3,
      spend_rate_per_hour: 4.1
    }
  };

  it('renders instance and rate by default, no server total', () => {
    const s = summarizeStatus(base);
    expect(s.text).toBe('p4d.24xlarge · USD 32.77/h');
    expect(s.simulated).toBe(false);
    expect(s.unpriced).toBe(false);
    expect(s.severity).toBeNull();
    expect(s.tooltip).toContain('catalog 2025-11-01');
  });

  it("adds the active notebook's spend", () => {
    const s = summarizeStatus(base, undefined, { notebook });
    expect(s.text).toBe('p4d.24xlarge · USD 32.77/h · notebook USD 0.42');
    expect(s.parts.map(p => p.kind)).toEqual(['instance', 'rate', 'notebook']);
    expect(s.tooltip).toContain(
      'Notebook work/explore.ipynb: spent USD 0.42, waste USD 0.30, now USD 4.10/h'
    );
  });

  it('shows zero for an active notebook that has not spent yet', () => {
    const s = summarizeStatus(base, undefined, {
      notebook: { path: 'new.ipynb', doc: null }
    });
    expect(s.text).toBe('p4d.24xlarge · USD 32.77/h · notebook USD 0.00');
  });

  it('renders every part when asked', () => {
    const s = summarizeStatus(base, all, { notebook });
    expect(s.text).toBe(
      'p4d.24xlarge · USD 32.77/h · notebook USD 0.42 · total USD 1.23'
    );
  });

  it('flags simulated numbers', () => {
    expect(summarizeStatus({ ...base, simulated: true }).simulated).toBe(true);
  });

  it('reports the highest alert severity and lists alerts in the tooltip', () => {
    const alert = (severity: 'info' | 'warning' | 'critical', title: string) => ({
      id: title,
      kind: 'idle-gpu',
      severity,
      notebook: 'work/explore.ipynb',
      kernel_id: null,
      title,
      message: '',
      actions: [],
      created: 1,
      updated: 1,
      state: 'active'
    });
    const s = summarizeStatus(base, undefined, {
      notebook,
      alerts: [alert('info', 'a'), alert('warning', 'GPU idle')]
    });
    expect(s.severity).toBe('warning');
    expect(s.tooltip).toContain('Alert (warning): GPU idle');
  });

  it('shows unpriced with the price detail in the tooltip', () => {
    const s = summarizeStatus(
      {
        ...base,
        rate_per_hour: null,
        price_source: 'unpriced',
        price_detail: 'no catalog match for this host',
        totals: { spend: 0 }
      },
      all
    );
    expect(s.unpriced).toBe(true);
    expect(s.text).toBe('p4d.24xlarge · unpriced · total USD 0.00');
    expect(s.tooltip).toContain('no catalog match for this host');
  });

  it('omits an unknown instance and honours toggles', () => {
    const s = summarizeStatus(
      { ...base, instance: null },
      { showRate: false, showNotebookSpend: false, showServerTotal: true }
    );
    expect(s.text).toBe('total USD 1.23');
    const t = summarizeStatus(
      base,
      { showRate: true, showNotebookSpend: false, showServerTotal: false },
      { notebook }
    );
    expect(t.text).toBe('p4d.24xlarge · USD 32.77/h');
  });

  it('tolerates missing totals', () => {
    const s = summarizeStatus({ ...base, totals: null }, all);
    expect(s.text).toBe('p4d.24xlarge · USD 32.77/h');
  });
});

describe('formatBytes', () => {
  it.each([
    [0, '0 B'],
    [512, '512 B'],
    [1024, '1 KiB'],
    [1536, '1.5 KiB'],
    [512 * 1024 ** 2, '512 MiB'],
    [39.5 * 1024 ** 3, '39.5 GiB'],
    [80 * 1024 ** 3, '80 GiB'],
    [2 * 1024 ** 4, '2 TiB'],
    [null, '–'],
    [-1, '–']
  ])('%p -> %p', (value, expected) => {
    expect(formatBytes(value as number | null)).toBe(expected);
  });
});

describe('formatPercent', () => {
  it.each([
    [null, '–'],
    [undefined, '–'],
    [0, '0%'],
    [2.54, '2.5%'],
    [9.96, '10%'],
    [87.4, '87%'],
    [100, '100%']
  ])('%p -> %p', (value, expected) => {
    expect(formatPercent(value as number | null | undefined)).toBe(expected);
  });
});

describe('formatDuration', () => {
  it.each([
    [null, '–'],
    [-5, '–'],
    [0, '0 s'],
    [45.9, '45 s'],
    [60, '1 min'],
    [12 * 60 + 30, '12 min'],
    [3 * 3600 + 5 * 60, '3 h 05 min'],
    [2 * 86400 + 3 * 3600 + 59, '2 d 3 h']
  ])('%p -> %p', (value, expected) => {
    expect(formatDuration(value as number | null)).toBe(expected);
  });
});

describe('formatPriceSource', () => {
  it('labels known sources and passes others through', () => {
    expect(formatPriceSource('detected')).toBe('detected instance, catalog price');
    expect(formatPriceSource('something')).toBe('something');
    expect(formatPriceSource(undefined)).toBe('–');
  });
});

describe('formatElapsed', () => {
  it('writes durations like the server labels', () => {
    expect(formatElapsed(null)).toBe('–');
    expect(formatElapsed(0)).toBe('0s');
    expect(formatElapsed(45.4)).toBe('45s');
    expect(formatElapsed(192)).toBe('3m12s');
    expect(formatElapsed(3725)).toBe('1h02m');
  });
});

describe('the figures the cost widget shows', () => {
  // Moved here from the widget's own tests when it dropped its copies of
  // formatBytes and formatPercent; 4 GiB reads `4 GiB` (the widget said `4.0 GiB`).
  const GiB = 1024 ** 3;

  it('formats durations, bytes and percentages', () => {
    expect(formatDuration(12.7)).toBe('12 s');
    expect(formatDuration(725)).toBe('12 min');
    expect(formatDuration(3 * 3600 + 5 * 60)).toBe('3 h 05 min');
    expect(formatDuration(2 * 86400 + 4 * 3600)).toBe('2 d 4 h');
    expect(formatDuration(-1)).toBe('–');
    expect(formatBytes(4 * GiB)).toBe('4 GiB');
    expect(formatBytes(300 * 1024 ** 2)).toBe('300 MiB');
    expect(formatPercent(2)).toBe('2%');
    expect(formatPercent(0.46)).toBe('0.5%');
    expect(formatPercent(87.6)).toBe('88%');
  });
});

describe('whose server (JupyterHub)', () => {
  it.each([
    ['alice', '', 'alice'],
    ['alice', null, 'alice'],
    ['alice', undefined, 'alice'],
    ['alice', 'gpu-large', 'alice · gpu-large'],
    [null, 'gpu-large', null],
    [null, null, null],
    ['', '', null],
    [undefined, undefined, null]
  ])('formatOwner(%p, %p) -> %p', (user, server, expected) => {
    expect(formatOwner(user, server)).toBe(expected);
  });

  it('writes the tooltip line', () => {
    expect(formatOwnerLine('alice', '')).toBe("alice's server");
    expect(formatOwnerLine('alice', null)).toBe("alice's server");
    expect(formatOwnerLine('alice', 'gpu-large')).toBe("alice's server gpu-large");
    expect(formatOwnerLine(null, 'gpu-large')).toBeNull();
    expect(formatOwnerLine('', '')).toBeNull();
  });

  it('takes the first document that names a user', () => {
    expect(ownerOf([])).toBeNull();
    expect(ownerOf([null, {}, { user: null, server: null }])).toBeNull();
    expect(
      ownerOf([{}, { user: 'alice', server: 'gpu-large' }, { user: 'bob', server: '' }])
    ).toEqual({ user: 'alice', server: 'gpu-large' });
    expect(ownerOf([{ user: 'alice' }])).toEqual({ user: 'alice', server: null });
  });

  it("starts the status tooltip with the owner's server", () => {
    const named = summarizeStatus({ ...base, user: 'alice', server: 'gpu-large' });
    expect(named.tooltip.split('\n')[0]).toBe("alice's server gpu-large");
    const main = summarizeStatus({ ...base, user: 'alice', server: '' });
    expect(main.tooltip.split('\n')[0]).toBe("alice's server");
    // The status-bar text itself does not change.
    expect(named.text).toBe(summarizeStatus(base).text);
  });

  it('leaves the tooltip as it was without a hub or on an older server', () => {
    const older = summarizeStatus(base);
    expect(older.tooltip.split('\n')[0]).toBe('Instance: p4d.24xlarge (aws)');
    const noHub = summarizeStatus({ ...base, user: null, server: null });
    expect(noHub.tooltip).toBe(older.tooltip);
    expect(noHub.tooltip).not.toContain("'s server");
  });
});
