/**
 * Pure formatting helpers for costguard numbers. No DOM, no JupyterLab
 * imports: everything here is unit-tested in isolation. What the status bar
 * says, built from these, is `statussummary.ts`.
 */
import type { ICostPrice, ICostStatus, IHubBudget, IOwnerFields } from './api';
import { isBudgetSpent, spentUntil } from './budgets';

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
  metadata: 'cloud metadata',
  hourly_rate: 'configured hourly rate',
  unpriced: 'no price known'
};

/** Separator between summary parts. */
export const SEPARATOR = ' · ';

/** The icon shown in front of the summary. */
export const ICON = '⚡';

/** A finite number. */
export function isNumber(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/** Local clock time `13:05` (`13:05:09` with `seconds`). */
export function formatClock(epochSeconds: number, seconds = false): string {
  const d = new Date(epochSeconds * 1000);
  const pad = (n: number): string => String(n).padStart(2, '0');
  const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return seconds ? `${hm}:${pad(d.getSeconds())}` : hm;
}

/**
 * `Figures as of 13:05:09`: the sample a surface's figures come from (a
 * document's `time`), so that surfaces read from different polls say which
 * sample each shows; null without one.
 */
export function asOfLine(time: unknown): string | null {
  return isNumber(time) && time > 0 ? `Figures as of ${formatClock(time, true)}` : null;
}

/** Format an epoch-seconds timestamp for tooltips. */
export function formatTime(epochSeconds: number): string {
  return new Date(epochSeconds * 1000).toLocaleString();
}

/**
 * Whose server this is, in a few words: `alice` for the user's default
 * server (`server` is `""` or null), `alice · gpu-large` for a named server;
 * null when not under JupyterHub (`user` null, empty or absent).
 */
export function formatOwner(
  user: string | null | undefined,
  server: string | null | undefined
): string | null {
  if (typeof user !== 'string' || user.length === 0) {
    return null;
  }
  return typeof server === 'string' && server.length > 0
    ? `${user}${SEPARATOR}${server}`
    : user;
}

/**
 * The tooltip line about the owner: `alice's server` (default server),
 * `alice's server gpu-large` (named server); null when not under JupyterHub.
 */
export function formatOwnerLine(
  user: string | null | undefined,
  server: string | null | undefined
): string | null {
  if (formatOwner(user, server) === null) {
    return null;
  }
  return typeof server === 'string' && server.length > 0
    ? `${user}'s server ${server}`
    : `${user}'s server`;
}

/**
 * The owner fields of the first document that names a user (documents of
 * older servers, without the fields, are skipped); null when none does.
 */
export function ownerOf(
  docs: ReadonlyArray<IOwnerFields | null | undefined>
): { user: string; server: string | null } | null {
  for (const doc of docs) {
    const user = doc?.user;
    if (typeof user === 'string' && user.length > 0) {
      const server = doc?.server;
      return { user, server: typeof server === 'string' ? server : null };
    }
  }
  return null;
}

/** What a spent budget means for the user. */
export const BUDGET_SPENT_TEXT = 'GPU servers cannot be started until the reset';

/** Adjectives of the budget periods. */
const BUDGET_PERIOD_LABELS: Record<string, string> = {
  month: 'monthly',
  week: 'weekly',
  day: 'daily'
};

/** A budget period as an adjective: `monthly`, `weekly`, `daily` (else as sent). */
export function formatBudgetPeriod(period: string | null | undefined): string {
  if (!period) {
    return '';
  }
  return BUDGET_PERIOD_LABELS[period] ?? period;
}

/** Whose budget: `you` (the user's own), `group ml`. */
export function formatBudgetWho(budget: Pick<IHubBudget, 'scope' | 'name'>): string {
  if (budget.scope === 'user') {
    return 'you';
  }
  return budget.name ? `group ${budget.name}` : 'group';
}

/**
 * An instant in UTC, as budget periods are: `2027-01-01 UTC` at midnight,
 * `2027-01-01 13:05 UTC` otherwise; `–` when unknown.
 */
export function formatUtcDate(epochSeconds: number | null | undefined): string {
  if (!isNumber(epochSeconds)) {
    return '–';
  }
  const iso = new Date(epochSeconds * 1000).toISOString();
  const date = iso.slice(0, 10);
  const time = iso.slice(11, 16);
  return time === '00:00' ? `${date} UTC` : `${date} ${time} UTC`;
}

/**
 * What remains of a budget: `USD 12.40 left of 50.00`; `USD 12.40 left` when
 * only what is left is known.
 */
export function formatBudgetRemaining(budget: IHubBudget, currency = 'USD'): string {
  const left = `${formatMoney(budget.remaining, currency)} left`;
  return budget.budget === null ? left : `${left} of ${formatAmount(budget.budget)}`;
}

/** When a budget resets: `resets 2027-01-01 UTC`; null when unknown. */
export function formatBudgetReset(budget: IHubBudget): string | null {
  return isNumber(budget.period_end)
    ? `resets ${formatUtcDate(budget.period_end)}`
    : null;
}

/** The share of a budget used, uncapped: `25%`, `124%`. */
export function formatBudgetUsed(budget: IHubBudget): string {
  return formatPercent(isNumber(budget.used) ? budget.used * 100 : null);
}

/**
 * The tooltip line of a budget, e.g. `Budget (you, monthly): USD 12.40 left
 * of 50.00 — resets 2027-01-01 UTC`, `Budget (group ml, weekly): …`.
 */
export function formatBudgetLine(budget: IHubBudget, currency = 'USD'): string {
  const label = [formatBudgetWho(budget), formatBudgetPeriod(budget.period)]
    .filter(Boolean)
    .join(', ');
  const reset = formatBudgetReset(budget);
  return `Budget (${label}): ${formatBudgetRemaining(budget, currency)}${
    reset ? ` — ${reset}` : ''
  }`;
}

/**
 * The line saying a budget is spent, e.g. `Budget spent: GPU servers cannot
 * be started until the reset on 2027-01-01 UTC` (the latest reset among the
 * spent budgets); null when none is spent.
 */
export function formatBudgetsSpent(budgets: ReadonlyArray<IHubBudget>): string | null {
  if (!budgets.some(isBudgetSpent)) {
    return null;
  }
  const until = spentUntil(budgets);
  return `Budget spent: ${BUDGET_SPENT_TEXT}${
    until !== null ? ` on ${formatUtcDate(until)}` : ''
  }`;
}

/** Format a byte count in binary units: `0 B`, `512 MiB`, `39.5 GiB`. */
export function formatBytes(bytes: number | null | undefined): string {
  if (!isNumber(bytes) || bytes < 0) {
    return '–';
  }
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  if (unit === 0) {
    return `${Math.round(value)} B`;
  }
  const text = value >= 100 ? value.toFixed(0) : value.toFixed(1);
  return `${text.replace(/\.0$/, '')} ${units[unit]}`;
}

/** Format a percentage: `–` when unknown, one decimal below 10 (`2.5%`), else whole (`87%`). */
export function formatPercent(value: number | null | undefined): string {
  if (!isNumber(value)) {
    return '–';
  }
  const text = Math.abs(value) < 10 ? value.toFixed(1) : value.toFixed(0);
  return `${text.replace(/\.0$/, '')}%`;
}

/**
 * A GPU's utilisation as the user reads it: `unknown` when the server says its
 * activity is unknown (a MIG instance reports no utilisation: neither busy nor
 * idle, never waste), else `formatPercent` of the figure.
 */
export function formatUtilization(
  value: number | null | undefined,
  activity: string | null | undefined
): string {
  return activity === 'unknown' ? 'unknown' : formatPercent(value);
}

/** The tooltip of a utilisation shown as `unknown`. */
export const UNKNOWN_ACTIVITY_TITLE =
  'Activity unknown: this GPU (a MIG instance) reports no utilisation, so it is ' +
  'neither busy nor idle; its cost is spend, never waste';

/**
 * Format a duration in seconds, coarsely: `–`, `0 s`, `45 s`, `12 min`,
 * `3 h 05 min`, `2 d 3 h`.
 */
export function formatDuration(seconds: number | null | undefined): string {
  if (!isNumber(seconds) || seconds < 0) {
    return '–';
  }
  const s = Math.floor(seconds);
  if (s < 60) {
    return `${s} s`;
  }
  const minutes = Math.floor(s / 60);
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const hours = Math.floor(minutes / 60);
  if (hours < 24) {
    return `${hours} h ${String(minutes % 60).padStart(2, '0')} min`;
  }
  const days = Math.floor(hours / 24);
  return `${days} d ${hours % 24} h`;
}

/** Human-readable label for a price source (`detected` → `detected instance, catalog price`). */
export function formatPriceSource(source: string | null | undefined): string {
  if (!source) {
    return '–';
  }
  return PRICE_SOURCE_LABELS[source] ?? source;
}

/** Human-readable labels for where the market (on-demand, spot) was read. */
const MARKET_SOURCE_LABELS: Record<string, string> = {
  config: 'set in configuration',
  metadata: 'cloud metadata',
  environment: 'from environment'
};

/** Label for a market source (`metadata` → `cloud metadata`); '' when none. */
export function formatMarketSource(source: string | null | undefined): string {
  if (!source) {
    return '';
  }
  return MARKET_SOURCE_LABELS[source] ?? source;
}

/** The market and where it was read, e.g. `spot (cloud metadata)`. */
export function formatMarket(price: ICostPrice): string {
  const source = formatMarketSource(price.market_source);
  const market = price.market || '–';
  return source ? `${market} (${source})` : market;
}

/** A 0..1 share as a percentage with at most one decimal: `25%`, `15.6%`. */
export function formatShare(fraction: number): string {
  if (!isNumber(fraction)) {
    return '–';
  }
  return `${(fraction * 100).toFixed(1).replace(/\.0$/, '')}%`;
}

/** Age of a price: `today`, `1 day old`, `320 days old` ('' when unknown). */
export function formatAge(days: number | null | undefined): string {
  if (!isNumber(days) || days < 0) {
    return '';
  }
  const whole = Math.floor(days);
  if (whole === 0) {
    return 'today';
  }
  return `${whole} ${whole === 1 ? 'day' : 'days'} old`;
}

/** The price's date and age, e.g. `2025-01-15 (320 days old)`; null when unknown. */
export function formatPriceDate(price: ICostPrice): string | null {
  const age = formatAge(price.age_days);
  if (price.retrieved) {
    return age ? `${price.retrieved} (${age})` : price.retrieved;
  }
  return age || null;
}

/**
 * The warning for an out-of-date price, e.g. `This price may be out of date
 * (older than 90 days): run `jupyter costguard catalog update``; null when fresh.
 */
export function formatStale(price: ICostPrice): string | null {
  if (!price.stale) {
    return null;
  }
  const hint = price.refresh_hint ? `: run \`${price.refresh_hint}\`` : '';
  return `This price may be out of date (older than ${price.stale_after_days} days)${hint}`;
}

/** The region, and whose price is used when that differs: `eu-north-1 (priced as us-east-1)`. */
export function formatRegion(price: ICostPrice): string | null {
  const { region, region_priced: priced } = price;
  if (region && priced && priced !== region) {
    return `${region} (priced as ${priced})`;
  }
  return region ?? (priced ? `priced as ${priced}` : null);
}

/**
 * The container's share of the instance, e.g. `1 of 8 GPUs, 25% of CPU/memory
 * → 15.6% of the instance's USD 32.77/h`; null when costguard holds the
 * whole instance.
 */
export function formatContainerShare(
  price: ICostPrice,
  currency = 'USD'
): string | null {
  const share = price.share;
  if (!share) {
    return null;
  }
  const held: string[] = [];
  if (isNumber(share.gpus_instance) && share.gpus_instance > 0) {
    const gpus = isNumber(share.gpus_held) ? share.gpus_held : '?';
    held.push(`${gpus} of ${share.gpus_instance} GPUs`);
  }
  if (isNumber(share.host_share)) {
    held.push(`${formatShare(share.host_share)} of CPU/memory`);
  }
  const rate = isNumber(price.instance_rate_per_hour)
    ? `the instance's ${formatRate(price.instance_rate_per_hour, currency)}`
    : 'the instance';
  const whole = `${formatShare(share.fraction)} of ${rate}`;
  return held.length ? `${held.join(', ')} → ${whole}` : whole;
}

/**
 * Tooltip lines about the price: what it is and how old
 * (`USD 32.77/h on-demand · aws p4d.24xlarge, us-east-1 · price of
 * 2025-01-15 (320 days old)`), the stale warning, the region note and the
 * container share, each only when the server says something about it.
 */
export function priceLines(status: ICostStatus, price: ICostPrice): string[] {
  const currency = status.currency || 'USD';
  const lines: string[] = [];
  const rate = isNumber(price.instance_rate_per_hour)
    ? price.instance_rate_per_hour
    : isNumber(status.rate_per_hour)
      ? status.rate_per_hour
      : null;
  const what = [rate !== null ? formatRate(rate, currency) : '', price.market]
    .filter(Boolean)
    .join(' ');
  const machine = [price.provider, price.instance_type].filter(Boolean).join(' ');
  const region = price.region_priced ?? price.region;
  const where = [machine, region].filter(Boolean).join(', ');
  const date = price.retrieved
    ? `price of ${formatPriceDate(price)}`
    : formatAge(price.age_days);
  const parts = [what, where, date].filter(Boolean);
  if (parts.length) {
    lines.push(parts.join(SEPARATOR));
  }
  const stale = formatStale(price);
  if (stale) {
    lines.push(stale);
  }
  if (price.region_note) {
    lines.push(`Region: ${price.region_note}`);
  }
  const share = formatContainerShare(price, currency);
  if (share) {
    lines.push(`Container share: ${share}`);
  }
  return lines;
}

/**
 * A job's run time as the server writes it in job labels: `45s`, `3m12s`,
 * `1h02m` (`–` when unknown).
 */
export function formatElapsed(seconds: number | null | undefined): string {
  if (!isNumber(seconds)) {
    return '–';
  }
  const s = Math.round(Math.max(0, seconds));
  if (s < 60) {
    return `${s}s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  }
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}
