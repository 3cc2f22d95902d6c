import type { ICostStatus, IGpuActivity } from '../api';
import {
  budgetBarFraction,
  budgetLevel,
  gpuActivityOf,
  hubBudgetsOf,
  isBudgetSpent,
  spentUntil
} from '../budgets';
import {
  formatBudgetLine,
  formatBudgetPeriod,
  formatBudgetRemaining,
  formatBudgetReset,
  formatBudgetsSpent,
  formatBudgetUsed,
  formatBudgetWho,
  formatUtcDate
} from '../format';
import { summarizeStatus } from '../statussummary';
import {
  budgetStatus,
  groupBudget,
  groupRemaining,
  hubBudget,
  JAN_2027,
  status,
  WEEK_END,
  WEEK_START
} from './fixtures';

describe('hubBudgetsOf', () => {
  it('reads an older server (no hub_budgets) and one outside a hub as []', () => {
    expect(hubBudgetsOf(status)).toEqual([]);
    expect(hubBudgetsOf(budgetStatus([]))).toEqual([]);
    expect(hubBudgetsOf(null)).toEqual([]);
    expect(hubBudgetsOf(undefined)).toEqual([]);
    expect(hubBudgetsOf({ ...status, hub_budgets: null } as unknown as ICostStatus)).toEqual([]);
    expect(hubBudgetsOf({ ...status, hub_budgets: {} } as unknown as ICostStatus)).toEqual([]);
  });

  it("puts the user's own budget first, then the groups' by name", () => {
    const budgets = hubBudgetsOf(
      budgetStatus([
        groupBudget({ name: 'vision' }),
        groupBudget({ name: 'ml' }),
        hubBudget()
      ])
    );
    expect(budgets.map(b => `${b.scope}:${b.name}`)).toEqual([
      'user:alice',
      'group:ml',
      'group:vision'
    ]);
    expect(budgets[0]).toEqual(hubBudget());
  });

  it('leaves out what is not a budget and fills in what can be derived', () => {
    const raw = [
      null,
      'budget',
      { scope: 'team', name: 'x', budget: 10 },
      { scope: 'user', name: 'alice', budget: 0 },
      { scope: 'group', name: 'ml', budget: 'lots' },
      { scope: 'group', name: 'ml', budget: 20, spent: 25, period: 'week' }
    ];
    const budgets = hubBudgetsOf({ ...status, hub_budgets: raw } as unknown as ICostStatus);
    expect(budgets).toHaveLength(1);
    expect(budgets[0]).toMatchObject({
      scope: 'group',
      name: 'ml',
      budget: 20,
      spent: 25,
      remaining: 0,
      used: 1.25,
      period: 'week'
    });
    expect(Number.isNaN(budgets[0].period_end)).toBe(true);
  });
});

describe('budget levels', () => {
  it('is ok below 80%, a warning from 80%, critical once spent', () => {
    expect(budgetLevel(hubBudget({ spent: 10 }))).toBe('ok');
    expect(budgetLevel(hubBudget({ spent: 39.99 }))).toBe('ok');
    expect(budgetLevel(hubBudget({ spent: 40 }))).toBe('warning');
    expect(budgetLevel(hubBudget({ spent: 49.99 }))).toBe('warning');
    expect(budgetLevel(hubBudget({ spent: 50 }))).toBe('critical');
    expect(budgetLevel(hubBudget({ spent: 62 }))).toBe('critical');
    expect(isBudgetSpent(hubBudget({ spent: 50 }))).toBe(true);
    expect(isBudgetSpent(hubBudget({ spent: 12 }))).toBe(false);
  });

  it('caps the bar at 100%', () => {
    expect(budgetBarFraction(hubBudget({ spent: 12.5 }))).toBe(0.25);
    expect(budgetBarFraction(hubBudget({ spent: 62 }))).toBe(1);
    expect(budgetBarFraction(hubBudget({ used: NaN }))).toBe(0);
  });

  it('says until when the spent budgets hold GPU servers back', () => {
    expect(spentUntil([hubBudget(), groupBudget()])).toBeNull();
    expect(spentUntil([hubBudget({ spent: 50 }), groupBudget()])).toBe(JAN_2027);
    expect(spentUntil([hubBudget(), groupBudget({ spent: 20 })])).toBe(WEEK_END);
    expect(
      spentUntil([hubBudget({ spent: 60 }), groupBudget({ spent: 20 })])
    ).toBe(JAN_2027);
  });
});

describe('gpuActivityOf', () => {
  it('reads the field, and an older server as null', () => {
    expect(gpuActivityOf(status)).toBeNull();
    expect(gpuActivityOf(null)).toBeNull();
    const older = { gpus_held: 2, gpus_busy: 0, idle_since: 1764460000 } as IGpuActivity;
    expect(gpuActivityOf({ ...status, gpu_activity: older })).toEqual({
      ...older,
      gpus_unknown: 0
    });
    expect(
      gpuActivityOf({
        ...status,
        gpu_activity: { gpus_held: 1, gpus_busy: 0, gpus_unknown: 1, idle_since: null }
      })
    ).toEqual({ gpus_held: 1, gpus_busy: 0, gpus_unknown: 1, idle_since: null });
    expect(
      gpuActivityOf({ ...status, gpu_activity: { gpus_busy: 1 } } as unknown as ICostStatus)
    ).toBeNull();
  });
});

describe('budget formatting', () => {
  it('names whose budget and its period', () => {
    expect(formatBudgetWho(hubBudget())).toBe('you');
    expect(formatBudgetWho(groupBudget())).toBe('group ml');
    expect(formatBudgetPeriod('month')).toBe('monthly');
    expect(formatBudgetPeriod('week')).toBe('weekly');
    expect(formatBudgetPeriod('day')).toBe('daily');
    expect(formatBudgetPeriod('quarter')).toBe('quarter');
    expect(formatBudgetPeriod('')).toBe('');
  });

  it('writes dates in UTC, as the periods are', () => {
    expect(formatUtcDate(JAN_2027)).toBe('2027-01-01 UTC');
    expect(formatUtcDate(JAN_2027 + 13 * 3600 + 5 * 60)).toBe('2027-01-01 13:05 UTC');
    expect(formatUtcDate(NaN)).toBe('–');
    expect(formatUtcDate(null)).toBe('–');
  });

  it('writes what remains, the share used and the reset', () => {
    const b = hubBudget();
    expect(formatBudgetRemaining(b, 'USD')).toBe('USD 12.40 left of 50.00');
    expect(formatBudgetRemaining(b, 'EUR')).toBe('EUR 12.40 left of 50.00');
    expect(formatBudgetRemaining(hubBudget({ spent: 49.958 }))).toBe('USD 0.042 left of 50.00');
    expect(formatBudgetUsed(b)).toBe('75%');
    expect(formatBudgetUsed(hubBudget({ spent: 62 }))).toBe('124%');
    expect(formatBudgetUsed(hubBudget({ spent: 1 }))).toBe('2%');
    expect(formatBudgetReset(b)).toBe('resets 2027-01-01 UTC');
    expect(formatBudgetReset(hubBudget({ period_end: NaN }))).toBeNull();
  });

  it('writes one tooltip line per budget', () => {
    expect(formatBudgetLine(hubBudget())).toBe(
      'Budget (you, monthly): USD 12.40 left of 50.00 — resets 2027-01-01 UTC'
    );
    expect(formatBudgetLine(groupBudget(), 'USD')).toBe(
      'Budget (group ml, weekly): USD 15.00 left of 20.00 — resets 2026-12-07 UTC'
    );
    expect(formatBudgetLine(hubBudget({ period: 'day', period_end: NaN }))).toBe(
      'Budget (you, daily): USD 12.40 left of 50.00'
    );
  });

  it('says when a spent budget holds GPU servers back', () => {
    expect(formatBudgetsSpent([])).toBeNull();
    expect(formatBudgetsSpent([hubBudget(), groupBudget()])).toBeNull();
    expect(formatBudgetsSpent([hubBudget(), groupBudget({ spent: 21 })])).toBe(
      'Budget spent: GPU servers cannot be started until the reset on 2026-12-07 UTC'
    );
    expect(formatBudgetsSpent([hubBudget({ spent: 50, period_end: NaN })])).toBe(
      'Budget spent: GPU servers cannot be started until the reset'
    );
  });
});

describe('summarizeStatus with GPUs of unknown activity', () => {
  it('says so in the tooltip, and nothing when there is none', () => {
    expect(summarizeStatus(status).tooltip).not.toContain('unknown');
    const mig = {
      ...status,
      gpu_activity: { gpus_held: 1, gpus_busy: 0, gpus_unknown: 1, idle_since: null }
    };
    expect(summarizeStatus(mig).tooltip.split('\n')).toContain(
      'GPU activity unknown: 1 held GPU (MIG) reports no utilisation; charged as spend, never as waste'
    );
  });
});

describe('summarizeStatus with hub budgets', () => {
  it('adds nothing outside a hub or on an older server', () => {
    for (const doc of [status, budgetStatus([])]) {
      const summary = summarizeStatus(doc);
      expect(summary.budgetSpent).toBe(false);
      expect(summary.tooltip).not.toContain('Budget');
      expect(summary.parts.map(p => p.kind)).not.toContain('budget');
    }
  });

  it('lists each budget, user first, after the totals', () => {
    const summary = summarizeStatus(budgetStatus([groupBudget(), hubBudget()]));
    const lines = summary.tooltip.split('\n');
    const first = lines.indexOf(
      'Budget (you, monthly): USD 12.40 left of 50.00 — resets 2027-01-01 UTC'
    );
    expect(first).toBeGreaterThan(lines.findIndex(l => l.startsWith('Unattributed:')));
    expect(lines[first + 1]).toBe(
      'Budget (group ml, weekly): USD 15.00 left of 20.00 — resets 2026-12-07 UTC'
    );
    expect(summary.budgetSpent).toBe(false);
    expect(summary.text).toBe('p4d.24xlarge · USD 32.77/h');
  });

  it('marks a spent budget and says GPU servers wait for the reset', () => {
    const summary = summarizeStatus(budgetStatus([hubBudget({ spent: 50 }), groupBudget()]));
    expect(summary.budgetSpent).toBe(true);
    expect(summary.parts[summary.parts.length - 1]).toEqual({
      kind: 'budget',
      text: 'budget spent'
    });
    const lines = summary.tooltip.split('\n');
    expect(lines).toContain(
      'Budget (you, monthly): USD 0.00 left of 50.00 — resets 2027-01-01 UTC'
    );
    expect(lines).toContain(
      'Budget spent: GPU servers cannot be started until the reset on 2027-01-01 UTC'
    );
  });
});

describe('a group budget known only by what is left of it', () => {
  const raw = {
    scope: 'group',
    name: 'ml',
    budget: null,
    spent: null,
    used: null,
    remaining: 3.5,
    period: 'week',
    period_start: WEEK_START,
    period_end: WEEK_END
  };

  it('is read with budget, spent and used null, and shown as what is left', () => {
    const [b] = hubBudgetsOf({ ...status, hub_budgets: [raw] } as unknown as ICostStatus);
    expect(b).toEqual(groupRemaining(3.5));
    expect(isBudgetSpent(b)).toBe(false);
    expect(budgetLevel(b)).toBe('ok');
    expect(budgetBarFraction(b)).toBe(0);
    expect(formatBudgetRemaining(b, 'USD')).toBe('USD 3.50 left');
    expect(formatBudgetLine(b, 'USD')).toBe(
      'Budget (group ml, weekly): USD 3.50 left — resets 2026-12-07 UTC'
    );
    const tooltip = summarizeStatus(budgetStatus([hubBudget(), b])).tooltip;
    expect(tooltip).toContain('Budget (group ml, weekly): USD 3.50 left — resets');
    expect(tooltip).not.toContain('NaN');
  });

  it('is spent once nothing is left, and is no budget without what is left', () => {
    const spent = groupRemaining(0);
    expect(isBudgetSpent(spent)).toBe(true);
    expect(budgetLevel(spent)).toBe('critical');
    expect(summarizeStatus(budgetStatus([spent])).budgetSpent).toBe(true);
    const none = { ...raw, remaining: null };
    expect(hubBudgetsOf({ ...status, hub_budgets: [none] } as unknown as ICostStatus)).toEqual(
      []
    );
  });
});
