/**
 * The cost panel's "Budget" section: the JupyterHub budgets of this user's
 * server, one row each; the section is hidden when there are none.
 *
 * Stable DOM hooks: `.jp-costguard-hub-budgets-section` (`hidden` without
 * budgets) with one `.jp-costguard-hub-budget[data-scope][data-name][data-period]`
 * per budget (`data-costguard-level` `ok`/`warning`/`critical`, classes
 * `.jp-costguard-hub-budget-warning` from 80% used and
 * `.jp-costguard-hub-budget-critical` once spent), its
 * `.jp-costguard-hub-budget-bar` (`role="progressbar"`) and its `-who`,
 * `-period`, `-used`, `-remaining`, `-reset`, `-note` parts (the bar and
 * `-used` hidden for a group budget known only by what is left of it).
 */
import type { IHubBudget } from './api';
import { budgetBarFraction, budgetLevel, hasBudgetBar, isBudgetSpent } from './budgets';
import type { CostPanelModel } from './costpanelmodel';
import { CostPanelSection } from './costpanelsection';
import { el, setAttr, setText, syncRows } from './dom';
import {
  BUDGET_SPENT_TEXT,
  formatBudgetLine,
  formatBudgetPeriod,
  formatBudgetRemaining,
  formatBudgetReset,
  formatBudgetUsed,
  formatBudgetWho,
  formatMoney,
  formatUtcDate
} from './format';

/** A budget's row, empty (`updateBudgetRow` fills it). */
function createBudgetRow(): HTMLElement {
  const row = el('div', 'jp-costguard-hub-budget');
  const head = el('div', 'jp-costguard-hub-budget-head');
  head.appendChild(el('span', 'jp-costguard-hub-budget-who'));
  head.appendChild(el('span', 'jp-costguard-hub-budget-period'));
  head.appendChild(el('span', 'jp-costguard-hub-budget-used'));
  row.appendChild(head);
  const bar = el('div', 'jp-costguard-hub-budget-bar');
  bar.setAttribute('role', 'progressbar');
  bar.setAttribute('aria-valuemin', '0');
  bar.setAttribute('aria-valuemax', '100');
  bar.appendChild(el('div', 'jp-costguard-hub-budget-fill'));
  row.appendChild(bar);
  const figures = el('div', 'jp-costguard-hub-budget-figures');
  figures.appendChild(el('span', 'jp-costguard-hub-budget-remaining'));
  figures.appendChild(el('span', 'jp-costguard-hub-budget-reset'));
  row.appendChild(figures);
  const note = el('div', 'jp-costguard-hub-budget-note', BUDGET_SPENT_TEXT);
  note.hidden = true;
  row.appendChild(note);
  return row;
}

/** The bar and the share used, hidden for a budget known only by what is left of it. */
function updateBar(row: HTMLElement, b: IHubBudget, who: string, period: string, used: string): void {
  const withBar = hasBudgetBar(b);
  const usedPart = row.querySelector<HTMLElement>('.jp-costguard-hub-budget-used')!;
  setText(usedPart, withBar ? `${used} used` : '');
  usedPart.hidden = !withBar;
  const percent = Math.round(budgetBarFraction(b) * 1000) / 10;
  const bar = row.querySelector<HTMLElement>('.jp-costguard-hub-budget-bar')!;
  bar.hidden = !withBar;
  setAttr(bar, 'aria-valuenow', String(percent));
  setAttr(bar, 'aria-label', `${who}, ${period}: ${used} of the budget used`);
  const fill = row.querySelector<HTMLElement>('.jp-costguard-hub-budget-fill')!;
  if (fill.style.width !== `${percent}%`) {
    fill.style.width = `${percent}%`;
  }
}

/** Fill a budget's row. */
function updateBudgetRow(row: HTMLElement, b: IHubBudget, currency: string): void {
  const level = budgetLevel(b);
  row.dataset.scope = b.scope;
  row.dataset.name = b.name;
  row.dataset.period = b.period;
  row.dataset.costguardLevel = level;
  row.classList.toggle('jp-costguard-hub-budget-warning', level === 'warning');
  row.classList.toggle('jp-costguard-hub-budget-critical', level === 'critical');
  const who = formatBudgetWho(b);
  const period = formatBudgetPeriod(b.period);
  const used = formatBudgetUsed(b);
  setText(row.querySelector('.jp-costguard-hub-budget-who')!, who);
  setText(row.querySelector('.jp-costguard-hub-budget-period')!, period);
  updateBar(row, b, who, period, used);
  setText(
    row.querySelector('.jp-costguard-hub-budget-remaining')!,
    formatBudgetRemaining(b, currency)
  );
  setText(row.querySelector('.jp-costguard-hub-budget-reset')!, formatBudgetReset(b) ?? '');
  const note = row.querySelector<HTMLElement>('.jp-costguard-hub-budget-note')!;
  note.hidden = !isBudgetSpent(b);
  const since = Number.isFinite(b.period_start) ? ` since ${formatUtcDate(b.period_start)}` : '';
  const spentLine =
    b.spent === null ? '' : `\nSpent ${formatMoney(b.spent, currency)} (${used})${since}`;
  setAttr(
    row,
    'title',
    `${formatBudgetLine(b, currency)}${spentLine}${
      isBudgetSpent(b) ? `\n${BUDGET_SPENT_TEXT}` : ''
    }`
  );
}

/** The "Budget" section (see the file's header). */
export class BudgetsSection extends CostPanelSection {
  constructor(model: CostPanelModel) {
    super(model, 'Budget', 'jp-costguard-hub-budgets-section');
    this.node.title =
      "Your JupyterHub budgets, with this server's spend since it started " +
      "(other servers' later spend is on the hub's page); periods are in UTC";
    this.node.hidden = true;
    this._list = el('div', 'jp-costguard-hub-budgets');
    this.node.appendChild(this._list);
  }

  render(): void {
    const budgets = this.model.hubBudgets;
    const currency = this.model.currency;
    this.node.hidden = budgets.length === 0;
    this._rows = syncRows<IHubBudget, HTMLElement>(
      this._list,
      this._rows,
      budgets,
      b => `${b.scope}\u0000${b.name}\u0000${b.period}`,
      createBudgetRow,
      (row, b) => updateBudgetRow(row, b, currency)
    );
  }

  private _list: HTMLElement;
  private _rows = new Map<string, HTMLElement>();
}
