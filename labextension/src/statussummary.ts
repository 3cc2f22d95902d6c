/**
 * What the status bar says about a status document (and the active
 * notebook, its alerts and the JupyterHub budgets): the parts of its text,
 * its flags (simulated, unpriced, stale, budget spent, alert severity) and
 * its tooltip. Pure: built from `format.ts`'s formatters, no DOM.
 */
import type { AlertSeverity, IAlert, ICostStatus, INotebookDoc } from './api';
import { maxSeverity } from './alerts';
import { gpuActivityOf, hubBudgetsOf } from './budgets';
import {
  asOfLine,
  formatBudgetLine,
  formatBudgetsSpent,
  formatMoney,
  formatOwnerLine,
  formatPriceSource,
  formatRate,
  formatTime,
  isNumber,
  priceLines,
  SEPARATOR
} from './format';
import { priceOf } from './price';

/** Options controlling what the status-bar summary shows. */
export interface ISummaryOptions {
  /** Show the instance's hourly rate. */
  showRate: boolean;
  /** Show what the active notebook has spent so far. */
  showNotebookSpend: boolean;
  /** Show the server's total spend. */
  showServerTotal: boolean;
}

export const DEFAULT_SUMMARY_OPTIONS: ISummaryOptions = {
  showRate: true,
  showNotebookSpend: true,
  showServerTotal: false
};

/** One piece of the status-bar text; `kind` maps to a CSS class. */
export interface ISummaryPart {
  kind: 'instance' | 'rate' | 'unpriced' | 'notebook' | 'spend' | 'budget';
  text: string;
}

/** The notebook the user is looking at, and its document (if it spent anything). */
export interface IActiveNotebook {
  /** Server-relative path. */
  path: string;
  /** Its entry of `GET notebooks`, or null when it has not spent anything yet. */
  doc: INotebookDoc | null;
}

/** What else the summary may mention besides the status document. */
export interface ISummaryContext {
  /** The active notebook, if any. */
  notebook?: IActiveNotebook | null;
  /** Active alerts concerning the active notebook. */
  alerts?: ReadonlyArray<IAlert>;
}

/** What the status item should display for one API response. */
export interface IStatusSummary {
  parts: ISummaryPart[];
  /** Plain-text rendering of `parts`, joined with ` · `. */
  text: string;
  simulated: boolean;
  unpriced: boolean;
  /** Highest severity among `context.alerts` (null when none). */
  severity: AlertSeverity | null;
  /** Whether the server says the price is out of date (`price.stale`). */
  stale: boolean;
  /** Whether a JupyterHub budget of this server is spent (`hub_budgets`). */
  budgetSpent: boolean;
  tooltip: string;
}

/** Text shown when the server cannot be reached. */
export const OFFLINE_TEXT = 'costguard: offline';

/** Text shown before the first response arrives. */
export const LOADING_TEXT = 'costguard: …';

/** Status-bar part shown while a JupyterHub budget is spent. */
export const BUDGET_SPENT_PART = 'budget spent';

/**
 * Waste and unattributed, in a word each: an idle GPU a kernel holds is
 * waste (its notebook can free it); an idle GPU nobody holds is not waste
 * but unattributed (only a smaller or stopped instance saves it). So "waste
 * 4%" can stand beside GPUs that are 99% idle.
 */
export const WASTE_WORDS = 'idle GPUs a kernel holds';
export const UNHELD_WORDS = 'GPUs nobody holds';
/** The longer tooltips of the cost panel's Waste and Unattributed rows. */
export const WASTE_EXPLAINED =
  'Waste: GPU time a kernel held while the GPU sat idle and the kernel was not busy. ' +
  'Shutting the kernel down (or freeing its GPU memory) stops it.';
export const UNATTRIBUTED_EXPLAINED =
  "Unattributed: what no notebook spent. An idle GPU that no kernel holds counts here, " +
  "not as waste: no notebook can free it; a smaller or stopped instance saves it. " +
  "Also the host's unused share and kernels without a notebook.";

type Totals = ICostStatus['totals'] | null | undefined;

/** The line under Waste: `41% of spend: idle GPUs a kernel holds`. */
export function wasteNote(totals: Totals): string {
  const spend = totals?.spend;
  const waste = totals?.waste;
  const share =
    isNumber(spend) && isNumber(waste) && spend > 0
      ? `${Math.round((100 * waste) / spend)}% of spend: `
      : '';
  return `${share}${WASTE_WORDS}`;
}

/** The line under Unattributed: `USD 0.05 of it: GPUs nobody holds (not waste)`. */
export function unattributedNote(totals: Totals, currency: string): string {
  const gpu = totals?.unattributed_gpu;
  const part = isNumber(gpu) ? `${formatMoney(gpu, currency)} of it: ` : 'incl. ';
  return `${part}${UNHELD_WORDS} (not waste)`;
}

/** What one summary is made of, read once from the status document. */
interface IFacts {
  status: ICostStatus;
  currency: string;
  instanceType: unknown;
  unpriced: boolean;
  active: IActiveNotebook | null;
  /** What the active notebook has spent (0 before it spent anything). */
  notebookSpend: number;
  /** The line saying a budget is spent, or null. */
  spentLine: string | null;
}

/** The status-bar text's parts, as the options ask. */
function summaryParts(facts: IFacts, options: ISummaryOptions): ISummaryPart[] {
  const { status, currency, active } = facts;
  const parts: ISummaryPart[] = [];
  if (facts.instanceType) {
    parts.push({ kind: 'instance', text: String(facts.instanceType) });
  }
  if (facts.unpriced && options.showRate) {
    parts.push({ kind: 'unpriced', text: 'unpriced' });
  } else if (!facts.unpriced && options.showRate) {
    parts.push({ kind: 'rate', text: formatRate(status.rate_per_hour as number, currency) });
  }
  if (options.showNotebookSpend && active) {
    parts.push({
      kind: 'notebook',
      text: `notebook ${formatMoney(facts.notebookSpend, currency)}`
    });
  }
  const spend = status.totals?.spend;
  if (options.showServerTotal && isNumber(spend)) {
    parts.push({ kind: 'spend', text: `total ${formatMoney(spend, currency)}` });
  }
  if (facts.spentLine) {
    parts.push({ kind: 'budget', text: BUDGET_SPENT_PART });
  }
  return parts;
}

/** Tooltip lines about whose server, the instance, its rate and its price. */
function instanceLines(facts: IFacts): string[] {
  const { status, currency } = facts;
  const lines: string[] = [];
  const ownerLine = formatOwnerLine(status.user, status.server);
  if (ownerLine) {
    lines.push(ownerLine);
  }
  const provider = status.instance?.provider;
  if (facts.instanceType) {
    lines.push(`Instance: ${facts.instanceType}${provider ? ` (${provider})` : ''}`);
  } else {
    lines.push('Instance: unknown');
  }
  if (facts.unpriced) {
    lines.push('Rate: unpriced');
  } else {
    const market = status.market ? ` ${status.market}` : '';
    lines.push(`Rate: ${formatRate(status.rate_per_hour as number, currency)}${market}`);
  }
  const source = status.price_source ? formatPriceSource(status.price_source) : '';
  if (source || status.price_detail) {
    lines.push(`Price: ${[source, status.price_detail].filter(Boolean).join(' — ')}`);
  }
  const price = priceOf(status);
  if (price) {
    lines.push(...priceLines(status, price));
  }
  return lines;
}

/** Tooltip lines about the active notebook and the server's totals. */
function spendLines(facts: IFacts): string[] {
  const { currency, active } = facts;
  const lines: string[] = [];
  if (active) {
    const doc = active.doc;
    const bits = [`spent ${formatMoney(facts.notebookSpend, currency)}`];
    if (doc && isNumber(doc.waste)) {
      bits.push(`waste ${formatMoney(doc.waste, currency)}`);
    }
    if (doc && isNumber(doc.spend_rate_per_hour)) {
      bits.push(`now ${formatRate(doc.spend_rate_per_hour, currency)}`);
    }
    lines.push(`Notebook ${active.path}: ${bits.join(', ')}`);
  }
  const totals = facts.status.totals;
  if (totals) {
    const since = isNumber(totals.since) ? ` since ${formatTime(totals.since)}` : '';
    if (isNumber(totals.spend)) {
      lines.push(`Server spent: ${formatMoney(totals.spend, currency)}${since}`);
    }
    if (isNumber(totals.waste)) {
      lines.push(`Waste: ${formatMoney(totals.waste, currency)} (${wasteNote(totals)})`);
    }
    if (isNumber(totals.unattributed)) {
      lines.push(
        `Unattributed: ${formatMoney(totals.unattributed, currency)} ` +
          `(${unattributedNote(totals, currency)})`
      );
    }
  }
  return lines;
}

/** Tooltip lines about budgets, GPU telemetry, alerts and simulation, and the click hint. */
function noticeLines(facts: IFacts, alerts: ReadonlyArray<IAlert>): string[] {
  const { status, currency } = facts;
  const lines = hubBudgetsOf(status).map(budget => formatBudgetLine(budget, currency));
  if (facts.spentLine) {
    lines.push(facts.spentLine);
  }
  if (status.gpu_status && status.gpu_status !== 'ok') {
    const detail = status.gpu_detail ? ` (${status.gpu_detail})` : '';
    lines.push(`GPU telemetry: ${status.gpu_status}${detail}`);
  }
  const unknown = gpuActivityOf(status)?.gpus_unknown ?? 0;
  if (unknown > 0) {
    lines.push(
      'GPU activity unknown: ' +
        (unknown === 1 ? '1 held GPU (MIG) reports' : `${unknown} held GPUs (MIG) report`) +
        ' no utilisation; charged as spend, never as waste'
    );
  }
  for (const alert of alerts) {
    lines.push(`Alert (${alert.severity}): ${alert.title}`);
  }
  if (status.simulated) {
    lines.push('Simulated: numbers come from a replayed trace, not this machine');
  }
  const asOf = asOfLine(status.time);
  if (asOf) {
    lines.push(asOf);
  }
  lines.push('Click to open the cost panel');
  return lines;
}

/**
 * Summarise a status response (and the active notebook) for the status bar.
 */
export function summarizeStatus(
  status: ICostStatus,
  options: ISummaryOptions = DEFAULT_SUMMARY_OPTIONS,
  context: ISummaryContext = {}
): IStatusSummary {
  const active = context.notebook ?? null;
  const facts: IFacts = {
    status,
    currency: status.currency || 'USD',
    instanceType: status.instance?.instance_type,
    unpriced: !isNumber(status.rate_per_hour),
    active,
    notebookSpend: active?.doc && isNumber(active.doc.spend) ? active.doc.spend : 0,
    spentLine: formatBudgetsSpent(hubBudgetsOf(status))
  };
  const parts = summaryParts(facts, options);
  const alerts = context.alerts ?? [];
  const lines = [...instanceLines(facts), ...spendLines(facts), ...noticeLines(facts, alerts)];
  return {
    parts,
    text: parts.map(p => p.text).join(SEPARATOR),
    simulated: status.simulated === true,
    unpriced: facts.unpriced,
    severity: maxSeverity(alerts.map(a => a.severity)),
    stale: priceOf(status)?.stale === true,
    budgetSpent: facts.spentLine !== null,
    tooltip: lines.join('\n')
  };
}
