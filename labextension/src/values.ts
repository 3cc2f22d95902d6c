/**
 * Reading values from server documents that may lack a field or carry
 * something odd: the checks the readers (`budgets.ts`, `price.ts`, the
 * panel's model) share. Pure.
 */

/** A finite number, else null. */
export function finiteOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** A plain object (not null, not an array). */
export function isRecord(value: unknown): value is { [key: string]: unknown } {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
