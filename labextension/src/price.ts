/**
 * Reading the `price` object of `GET costguard/api/status` (where the price
 * comes from, how old it is, the container's share). Pure: no DOM, no
 * JupyterLab imports, so the formatters can use it.
 */
import type { ICostPrice, ICostPriceShare, ICostStatus } from './api';
import { finiteOrNull, isRecord } from './values';

/** Days after which a price is stale when the server does not say. */
export const DEFAULT_STALE_AFTER_DAYS = 90;

/** Command that refreshes the catalog when the server does not say. */
export const DEFAULT_REFRESH_HINT = 'jupyter costguard catalog update';

function text(value: unknown): string | null {
  return typeof value === 'string' && value.trim().length > 0 ? value : null;
}

/**
 * The `price` object of a status document, checked field by field: null when
 * the server sends none (older servers); missing or mistyped fields read as
 * unknown (null), `stale` falls back to `age_days > stale_after_days`, and
 * `share` is kept only when it carries a `fraction`.
 */
export function priceOf(status: ICostStatus | null | undefined): ICostPrice | null {
  const raw = status?.price as unknown;
  if (!isRecord(raw)) {
    return null;
  }
  const ageDays = finiteOrNull(raw.age_days);
  const staleAfter = finiteOrNull(raw.stale_after_days) ?? DEFAULT_STALE_AFTER_DAYS;
  const stale =
    typeof raw.stale === 'boolean'
      ? raw.stale
      : ageDays !== null && ageDays > staleAfter;
  let share: ICostPriceShare | null = null;
  const rawShare = raw.share;
  if (isRecord(rawShare) && finiteOrNull(rawShare.fraction) !== null) {
    const cpu = finiteOrNull(rawShare.cpu_share) ?? NaN;
    const memory = finiteOrNull(rawShare.memory_share) ?? NaN;
    share = {
      gpus_held: finiteOrNull(rawShare.gpus_held) ?? NaN,
      gpus_instance: finiteOrNull(rawShare.gpus_instance) ?? NaN,
      cpu_share: cpu,
      memory_share: memory,
      host_share:
        finiteOrNull(rawShare.host_share) ??
        (Number.isFinite(cpu) || Number.isFinite(memory)
          ? Math.max(Number.isFinite(cpu) ? cpu : 0, Number.isFinite(memory) ? memory : 0)
          : NaN),
      fraction: rawShare.fraction as number,
      detail: text(rawShare.detail) ?? ''
    };
  }
  return {
    provider: text(raw.provider),
    instance_type: text(raw.instance_type),
    region: text(raw.region),
    region_priced: text(raw.region_priced),
    region_note: text(raw.region_note),
    market: text(raw.market) ?? text(status?.market) ?? '',
    market_source: text(raw.market_source) ?? '',
    retrieved: text(raw.retrieved),
    age_days: ageDays,
    stale,
    stale_after_days: staleAfter,
    refresh_hint: text(raw.refresh_hint) ?? DEFAULT_REFRESH_HINT,
    instance_rate_per_hour: finiteOrNull(raw.instance_rate_per_hour),
    share,
    tried: Array.isArray(raw.tried)
      ? raw.tried.filter((t): t is string => typeof t === 'string' && t.length > 0)
      : []
  };
}
