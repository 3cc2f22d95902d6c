/**
 * @jest-environment jsdom
 *
 * Both pages in the service's own shell (`jupyter_costguard/hub/page.html`)
 * against the service's answers (a stand-in `fetch`): the admin's table, its
 * GPU columns over the same GPUs, its chart from the first hour recorded; a
 * user's servers and budgets.
 */
import * as fs from 'fs';
import * as path from 'path';

import { HubPage } from '../page';
import type { IBoot } from '../types';
import { HOUR_NOW, NOW, budget, me, row, series, spendList } from './fixtures';

const SHELL = path.resolve(__dirname, '..', '..', '..', '..', 'jupyter_costguard', 'hub', 'page.html');

function loadShell(): void {
  const html = fs.readFileSync(SHELL, 'utf8');
  document.documentElement.innerHTML = html.slice(html.indexOf('<head>'), html.lastIndexOf('</html>'));
}

function respond(doc: unknown): Response {
  return { ok: true, status: 200, json: async () => doc } as Response;
}

const ROWS = {
  user: [
    row({ budget: { ...budget(), used: 0.31 } }),
    row({ key: 'bob', user: 'bob', gpus_paid: 1, gpus_held: 1, gpus_busy: 1, spend: 2 })
  ],
  group: [row({ key: 'ml', user: null, group: 'ml' })],
  server: [row({ key: 'alice/', server: '', state: 'ok', detail: null })]
};

function fakeHub(asked: string[]) {
  return async (url: string): Promise<Response> => {
    asked.push(url);
    const u = new URL(url, 'http://hub');
    if (u.pathname.endsWith('api/spend')) {
      const by = (u.searchParams.get('by') || 'user') as keyof typeof ROWS;
      return respond(spendList(by, ROWS[by]));
    }
    if (u.pathname.endsWith('api/series')) {
      return respond(series([HOUR_NOW]));
    }
    if (u.pathname.endsWith('api/me')) {
      return respond(me());
    }
    return { ok: false, status: 404, json: async () => ({ message: 'not found' }) } as Response;
  };
}

function boot(admin: boolean): IBoot {
  return { admin, user: admin ? 'root' : 'alice', prefix: '/services/costguard/', xsrf: 'x', currency: 'USD' };
}

beforeEach(() => {
  jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
  loadShell();
});

afterEach(() => {
  jest.clearAllTimers();
  jest.useRealTimers();
});

describe('the admin page', () => {
  it('shows every user with the GPUs paid for beside their idle hours, and says so', async () => {
    const asked: string[] = [];
    const page = new HubPage(boot(true), () => NOW, fakeHub(asked));
    page.start();
    await page.refresh();
    const alice = document.querySelector('#cg-table tbody tr[data-key="alice"]')!;
    expect(alice.querySelector('td.gpus')!.textContent).toBe('8 (1 held · 0 busy)');
    expect(alice.querySelector('td.idle')!.textContent).toBe('0.13');
    expect(alice.querySelector('td.idle')!.getAttribute('title')).toBe('idle hours of the 8 GPUs paid for');
    const head = document.querySelector('#cg-table th[data-sort="gpus"]')!;
    expect(head.textContent).toContain('GPUs paid (held)');
    expect(head.getAttribute('title')).toMatch(/pay for/);
    expect(document.querySelector('#cg-table th[data-sort="idle"]')!.getAttribute('title')).toMatch(/pay for/);
    expect(document.querySelector('#cg-kpis .kpi.gpus')!.textContent).toContain('GPUs paid for9');
    expect(alice.querySelector('td.budget-cell')!.textContent).toBe('31%');
    expect(document.querySelector('#cg-table tfoot')!.textContent).toContain('Total · 2 users');
    expect(document.getElementById('cg-admin')!.hidden).toBe(false);
    expect(document.getElementById('cg-user')!.hidden).toBe(true);
    expect(document.getElementById('cg-poll')!.textContent).toMatch(/^Last poll 22:30:57 UTC · 3 s ago · 1\/1 reporting/);
    expect((document.getElementById('cg-csv') as HTMLAnchorElement).getAttribute('href')).toBe(
      '/services/costguard/api/spend.csv?by=user'
    );
  });

  it('charts the hub from its first hour recorded, not a fixed 48 h', async () => {
    const asked: string[] = [];
    const page = new HubPage(boot(true), () => NOW, fakeHub(asked));
    page.start();
    await page.refresh();
    const svg = document.querySelector('#cg-chart svg')!;
    expect(Number(svg.getAttribute('data-start'))).toBe(HOUR_NOW);
    expect(Number(svg.getAttribute('data-end'))).toBe(HOUR_NOW + 3600);
    expect(svg.querySelectorAll('g.bar').length).toBe(1);
    expect(document.getElementById('cg-chart-foot')!.textContent).toMatch(
      /^2026-12-07 22:00 to 2026-12-07 23:00 UTC · USD 0.50 in this range/
    );
    const chart = asked.find(u => u.includes('api/series'))!;
    expect(chart).toContain('by=user&step=hour');
  });

  it('charts a period chosen whole, and the hub from its first hour again after', async () => {
    const page = new HubPage(boot(true), () => NOW, fakeHub([]));
    page.start();
    await page.refresh();
    const period = document.getElementById('cg-period') as HTMLSelectElement;
    const span = (): number => {
      const svg = document.querySelector('#cg-chart svg')!;
      return (Number(svg.getAttribute('data-end')) - Number(svg.getAttribute('data-start'))) / 3600;
    };
    period.value = '24h';
    period.dispatchEvent(new Event('change'));
    await page.refresh();
    expect(span()).toBe(24);
    period.value = 'all';
    period.dispatchEvent(new Event('change'));
    await page.refresh();
    expect(span()).toBe(1);
  });

    it('sorts on a header click and filters as one types', async () => {
    const page = new HubPage(boot(true), () => NOW, fakeHub([]));
    page.start();
    await page.refresh();
    const keys = (): string[] =>
      Array.from(document.querySelectorAll('#cg-table tbody tr[data-key]')).map(tr => tr.getAttribute('data-key')!);
    expect(keys()).toEqual(['alice', 'bob']);
    (document.querySelector('#cg-table th[data-sort="gpus"] button') as HTMLElement).click();
    expect(keys()).toEqual(['alice', 'bob']); // 8 GPUs paid before 1
    (document.querySelector('#cg-table th[data-sort="gpus"] button') as HTMLElement).click();
    expect(keys()).toEqual(['bob', 'alice']);
    const filter = document.getElementById('cg-filter') as HTMLInputElement;
    filter.value = 'bo';
    filter.dispatchEvent(new Event('input'));
    expect(keys()).toEqual(['bob']);
    (document.querySelector('#cg-by button[data-by="group"]') as HTMLElement).click();
    expect(document.querySelector('#cg-table tbody tr.cg-empty')!.textContent).toBe('No groups match “bo”.');
  });

  it('says why when the figures cannot be loaded', async () => {
    const page = new HubPage(boot(true), () => NOW, async () =>
      ({ ok: false, status: 500, json: async () => ({ message: 'the store is locked' }) }) as Response);
    page.start();
    await page.refresh();
    expect(document.getElementById('cg-error')!.textContent).toBe(
      'Could not load the figures: the store is locked. Retrying in 30 s.'
    );
  });
});

describe("a user's page", () => {
  it('shows their servers over the GPUs they pay for, their budgets, and their chart', async () => {
    const asked: string[] = [];
    const page = new HubPage(boot(false), () => NOW, fakeHub(asked));
    page.start();
    await page.refresh();
    expect(document.getElementById('cg-admin')!.hidden).toBe(true);
    expect(document.getElementById('cg-user')!.hidden).toBe(false);
    const server = document.querySelector('#cg-user-table tbody tr[data-key="alice/"]')!;
    expect(server.querySelector('td.name')!.textContent).toBe('default server');
    expect(server.querySelector('td.gpus')!.textContent).toBe('8 (1 held · 0 busy)');
    const cards = document.querySelectorAll('#cg-budgets .bcard');
    expect(cards.length).toBe(2);
    expect(cards[0].textContent).toContain('USD 1.50 left of USD 2.00');
    expect(cards[0].textContent).toContain('25% used');
    // a group budget shown only as what is left: no bar, no spend
    expect(cards[1].textContent).toContain('USD 3.00 left');
    expect(cards[1].querySelector('.bar')).toBeNull();
    expect(document.getElementById('cg-poll')!.textContent).toMatch(/^Figures as of .* · 1 server running$/);
    expect(asked.some(u => u.includes('api/series?by=user&key=alice&step=hour'))).toBe(true);
    expect(document.querySelectorAll('#cg-chart svg g.bar').length).toBe(1);
  });
});
