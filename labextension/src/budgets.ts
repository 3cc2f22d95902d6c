/**
 * Reading the `hub_budgets` and `gpu_activity` fields of `GET
 * costguard/api/status`: the JupyterHub budgets of this user's server and
 * the GPUs it holds. Pure: no DOM, no JupyterLab imports, so the formatters
 * and the models can use it. Older servers send neither field: they read as
 * `[]` and null.
 */
import type { ICostStatus, IGpuActivity, IHubBudget } from './api';
import { finiteOrNull, isRecord } from './values';

/** From this share of a budget used on, it shows as a warning. */
export const BUDGET_WARNING_FRACTION = 0.8;

/** How close a budget is to being spent: `critical` once it is. */
export type BudgetLevel = 'ok' | 'warning' | 'critical';

/**
 * One entry of `hub_budgets`, checked; null when it is not a budget. An
 * entry with no budget but what remains of it (a group budget the site shows
 * members only what is left of) keeps `budget`, `spent` and `used` null.
 */
function budgetOf(raw: unknown): IHubBudget | null {
  if (!isRecord(raw)) {
    return null;
  }
  const scope = raw.scope;
  if (scope !== 'user' && scope !== 'group') {
    return null;
  }
  const common = {
    scope,
    name: typeof raw.name === 'string' ? raw.name : '',
    period: typeof raw.period === 'string' ? raw.period : '',
    period_start: finiteOrNull(raw.period_start) ?? NaN,
    period_end: finiteOrNull(raw.period_end) ?? NaN
  } as const;
  const budget = finiteOrNull(raw.budget);
  if (budget === null && raw.budget === null) {
    const left = finiteOrNull(raw.remaining);
    return left === null
      ? null
      : { ...common, budget: null, spent: null, used: null, remaining: Math.max(0, left) };
  }
  if (budget === null || budget <= 0) {
    return null;
  }
  const spent = Math.max(0, finiteOrNull(raw.spent) ?? 0);
  const remaining = finiteOrNull(raw.remaining) ?? Math.max(0, budget - spent);
  return {
    ...common,
    budget,
    spent,
    remaining: Math.max(0, remaining),
    used: Math.max(0, finiteOrNull(raw.used) ?? spent / budget)
  };
}

/**
 * The `hub_budgets` of a status document, checked entry by entry: `[]` when
 * the server sends none (outside a hub, or an older server); entries that
 * are not budgets are left out. The user's own budget comes first, then the
 * groups' by name (the server's order among equals).
 */
export function hubBudgetsOf(status: ICostStatus | null | undefined): IHubBudget[] {
  const raw = status?.hub_budgets as unknown;
  if (!Array.isArray(raw)) {
    return [];
  }
  const budgets = raw
    .map(budgetOf)
    .filter((b): b is IHubBudget => b !== null)
    .map((budget, index) => ({ budget, index }));
  budgets.sort((a, b) => {
    const scope =
      (a.budget.scope === 'user' ? 0 : 1) - (b.budget.scope === 'user' ? 0 : 1);
    if (scope !== 0) {
      return scope;
    }
    const name =
      a.budget.name < b.budget.name ? -1 : a.budget.name > b.budget.name ? 1 : 0;
    return name !== 0 ? name : a.index - b.index;
  });
  return budgets.map(b => b.budget);
}

/** Whether a budget is spent (nothing remains): the hub starts no GPU server then. */
export function isBudgetSpent(budget: IHubBudget): boolean {
  return budget.remaining <= 0 || (budget.used !== null && budget.used >= 1);
}

/** `critical` once spent, `warning` from `BUDGET_WARNING_FRACTION` used, else `ok`. */
export function budgetLevel(budget: IHubBudget): BudgetLevel {
  if (isBudgetSpent(budget)) {
    return 'critical';
  }
  return budget.used !== null && budget.used >= BUDGET_WARNING_FRACTION
    ? 'warning'
    : 'ok';
}

/** The share of the budget used, for a bar: 0..1 (capped at 1). */
export function budgetBarFraction(budget: IHubBudget): number {
  const used = budget.used;
  return Math.min(1, Math.max(0, used !== null && Number.isFinite(used) ? used : 0));
}

/** Whether a budget has a bar: not when only what is left of it is known. */
export function hasBudgetBar(budget: IHubBudget): boolean {
  return budget.budget !== null && budget.used !== null;
}

/**
 * When GPU servers can be started again: the latest reset among the spent
 * budgets (epoch seconds); null when none is spent or none says when.
 */
export function spentUntil(budgets: ReadonlyArray<IHubBudget>): number | null {
  let until: number | null = null;
  for (const budget of budgets) {
    if (isBudgetSpent(budget) && Number.isFinite(budget.period_end)) {
      until = until === null ? budget.period_end : Math.max(until, budget.period_end);
    }
  }
  return until;
}

/**
 * The `gpu_activity` of a status document, checked: null when the server
 * sends none (older servers) or it is not one.
 */
export function gpuActivityOf(status: ICostStatus | null | undefined): IGpuActivity | null {
  const raw = status?.gpu_activity as unknown;
  if (!isRecord(raw)) {
    return null;
  }
  const held = finiteOrNull(raw.gpus_held);
  const busy = finiteOrNull(raw.gpus_busy);
  if (held === null || busy === null) {
    return null;
  }
  return {
    gpus_held: held,
    gpus_busy: busy,
    // held GPUs of unknown activity (MIG); 0 from servers before it was counted
    gpus_unknown: finiteOrNull(raw.gpus_unknown) ?? 0,
    idle_since: finiteOrNull(raw.idle_since)
  };
}
