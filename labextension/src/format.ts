/**
 * Pure formatting helpers for costguard numbers. No DOM, no JupyterLab
 * imports: everything here is unit-tested in isolation.
 */
import type { ICostStatus } from './api';

/** Largest number of decimals used for small amounts. */
const MAX_DECIMALS = 6;

/**
 * Format a number with enough decimals to be meaningful:
 * two decimals from 1 upwards (`32.77`), at least two significant digits
 * below 1 (`0.042`, `0.0012`), trailing zeros trimmed down to two decimals.
 */
export function formatAmount(value: number): string {
  if (!Number.isFinite(value)) {
    return '–';
  }
  const abs = Math.abs(value);
  let decimals = 2;
  if (abs > 0 && abs < 1) {
    decimals = Math.min(
      MAX_DECIMALS,
      Math.max(3, 1 - Math.floor(Math.log10(abs)))
    );
  }
  let text = abs.toFixed(decimals);
  if (decimals > 2) {
    text = text.replace(/0+$/, '');
    const dot = text.indexOf('.');
    const shown = dot < 0 ? 0 : text.length - dot - 1;
    if (shown < 2) {
      text = abs.toFixed(2);
    }
  }
  // Avoid "-0.00" for tiny negatives that round to zero.
  const negative = value < 0 && /[1-9]/.test(text);
  return (negative ? '-' : '') + text;
}

/** Money with its currency code, e.g. `USD 32.77`, `USD 0.042`. */
export function formatMoney(value: number, currency = 'USD'): string {
  const code = (currency || '').trim();
  const amount = formatAmount(value);
  return code ? `${code} ${amount}` : amount;
}

/** An hourly rate, e.g. `USD 32.77/h`. */
export function formatRate(value: number, currency = 'USD'): string {
  return `${formatMoney(value, currency)}/h`;
}

/** Human-readable labels for where the price came from. */
const PRICE_SOURCE_LABELS: Record<string, string> = {
  config: 'set in configuration',
  environment: 'from environment',
  detected: 'detected instance, catalog price',
  hourly_rate: 'configured hourly rate',
  unpriced: 'no price known'
};

/** Options controlling what the status-bar summary shows. */
export interface ISummaryOptions {
  /** Show the instance's hourly rate. */
  showRate: boolean;
  /** Show the server's total spend. */
  showSpend: boolean;
}

export const DEFAULT_SUMMARY_OPTIONS: ISummaryOptions = {
  showRate: true,
  showSpend: true
};

/** One piece of the status-bar text; `kind` maps to a CSS class. */
export interface ISummaryPart {
  kind: 'instance' | 'rate' | 'unpriced' | 'spend';
  text: string;
}

/** What the status item should display for one API response. */
export interface IStatusSummary {
  parts: ISummaryPart[];
  /** Plain-text rendering of `parts`, joined with ` · `. */
  text: string;
  simulated: boolean;
  unpriced: boolean;
  tooltip: string;
}

/** Separator between summary parts. */
export const SEPARATOR = ' · ';

/** The icon shown in front of the summary. */
export const ICON = '⚡';

/** Text shown when the server cannot be reached. */
export const OFFLINE_TEXT = 'costguard: offline';

/** Text shown before the first response arrives. */
export const LOADING_TEXT = 'costguard: …';

function isNumber(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/** Format an epoch-seconds timestamp for tooltips. */
export function formatTime(epochSeconds: number): string {
  return new Date(epochSeconds * 1000).toLocaleString();
}

/**
 * Summarise a status response for the status bar.
 */
export function summarizeStatus(
  status: ICostStatus,
  options: ISummaryOptions = DEFAULT_SUMMARY_OPTIONS
): IStatusSummary {
  const currency = status.currency || 'USD';
  const parts: ISummaryPart[] = [];
  const instanceType = status.instance?.instance_type;
  if (instanceType) {
    parts.push({ kind: 'instance', text: String(instanceType) });
  }
  const unpriced = !isNumber(status.rate_per_hour);
  if (unpriced && options.showRate) {
    parts.push({ kind: 'unpriced', text: 'unpriced' });
  } else if (!unpriced && options.showRate) {
    parts.push({
      kind: 'rate',
      text: formatRate(status.rate_per_hour as number, currency)
    });
  }
  const spend = status.totals?.spend;
  if (options.showSpend && isNumber(spend)) {
    parts.push({ kind: 'spend', text: `spent ${formatMoney(spend, currency)}` });
  }

  const lines: string[] = [];
  const provider = status.instance?.provider;
  if (instanceType) {
    lines.push(
      `Instance: ${instanceType}${provider ? ` (${provider})` : ''}`
    );
  } else {
    lines.push('Instance: unknown');
  }
  if (unpriced) {
    lines.push('Rate: unpriced');
  } else {
    const market = status.market ? ` ${status.market}` : '';
    lines.push(
      `Rate: ${formatRate(status.rate_per_hour as number, currency)}${market}`
    );
  }
  const source = status.price_source
    ? PRICE_SOURCE_LABELS[status.price_source] ?? status.price_source
    : '';
  if (source || status.price_detail) {
    lines.push(
      `Price: ${[source, status.price_detail].filter(Boolean).join(' — ')}`
    );
  }
  const totals = status.totals;
  if (totals) {
    const since = isNumber(totals.since)
      ? ` since ${formatTime(totals.since)}`
      : '';
    if (isNumber(totals.spend)) {
      lines.push(`Spent: ${formatMoney(totals.spend, currency)}${since}`);
    }
    if (isNumber(totals.waste)) {
      lines.push(`Waste: ${formatMoney(totals.waste, currency)}`);
    }
    if (isNumber(totals.unattributed)) {
      lines.push(`Unattributed: ${formatMoney(totals.unattributed, currency)}`);
    }
  }
  if (status.gpu_status && status.gpu_status !== 'ok') {
    const detail = status.gpu_detail ? ` (${status.gpu_detail})` : '';
    lines.push(`GPU telemetry: ${status.gpu_status}${detail}`);
  }
  if (status.simulated) {
    lines.push('Simulated: numbers come from a replayed trace, not this machine');
  }

  return {
    parts,
    text: parts.map(p => p.text).join(SEPARATOR),
    simulated: status.simulated === true,
    unpriced,
    tooltip: lines.join('\n')
  };
}
