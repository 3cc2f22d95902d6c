/**
 * The hub service's page: an admin's view of every user, group and server, or
 * a user's own servers and budgets, with the spend chart; refreshed every
 * 30 s while the tab is shown. State lives here; what is shown is decided in
 * `model.ts` and drawn by the view modules.
 */
import { drawChart } from './chart';
import { HubClient } from './client';
import type { Fetch, IPeriod } from './client';
import { byId, el, selectSeg } from './dom';
import {
  IBucket,
  IChartRange,
  ISort,
  PeriodName,
  SortKey,
  chartBuckets,
  chartSubject,
  chartWindow,
  nextSort,
  periodOf,
  pickCurrency
} from './model';
import { renderAsOf, renderCounted, renderKpis, renderPoll } from './parts';
import { renderTable } from './table';
import { pad, utc } from './text';
import type { By, IBoot, Me, Poll, Row, Step } from './types';
import { renderBudgets, renderServers } from './user';

export const REFRESH_MS = 30000;

interface IState {
  by: By;
  period: PeriodName;
  sort: ISort;
  filter: string;
  step: Step;
  key: string;
  rows: Record<By, Row[]>;
  poll: Poll | null;
  currency: string;
  me: Me | null;
  seq: number;
  chartSeq: number;
  chart: { buckets: IBucket[]; range: IChartRange } | null;
}

export class HubPage {
  readonly api: HubClient;
  private readonly s: IState;

  constructor(
    readonly boot: IBoot,
    private readonly now: () => number = () => Date.now() / 1000,
    fetcher?: Fetch
  ) {
    this.api = new HubClient(boot.prefix || '/services/costguard/', boot.xsrf, fetcher);
    this.s = {
      by: 'user',
      period: 'all',
      sort: { key: 'name', dir: 1 },
      filter: '',
      step: 'hour',
      key: '',
      rows: { user: [], group: [], server: [] },
      poll: null,
      currency: boot.currency || '',
      me: null,
      seq: 0,
      chartSeq: 0,
      chart: null
    };
  }

  /** The period chosen (an admin's; a user's page is all time). */
  period(): IPeriod {
    if (!this.boot.admin) {
      return { since: null, until: null };
    }
    const since = byId<HTMLInputElement>('cg-since').value;
    const until = byId<HTMLInputElement>('cg-until').value;
    return periodOf(this.s.period, this.now(), since, until);
  }

  private periodLabel(): string {
    if (!this.boot.admin) {
      return 'all time';
    }
    if (this.s.period === 'custom') {
      const since = byId<HTMLInputElement>('cg-since').value;
      const until = byId<HTMLInputElement>('cg-until').value;
      return `${since || '…'} to ${until || 'now'}`;
    }
    const o = byId<HTMLSelectElement>('cg-period');
    return o.options[o.selectedIndex].text.toLowerCase();
  }

  showError(msg: string | null): void {
    const e = byId('cg-error');
    e.hidden = !msg;
    e.textContent = msg || '';
  }

  private renderTable(): void {
    renderTable(byId('cg-table'), {
      by: this.s.by,
      rows: this.s.rows[this.s.by],
      sort: this.s.sort,
      filter: this.s.filter,
      currency: this.s.currency,
      onSort: (key: SortKey, numeric: boolean) => {
        this.s.sort = nextSort(this.s.sort, key, numeric);
        this.renderTable();
      }
    });
  }

  private updateLinks(): void {
    const q = this.api.spendQuery(this.s.by, this.period());
    const csv = byId<HTMLAnchorElement>('cg-csv');
    csv.href = this.api.url('api/spend.csv', q);
    csv.setAttribute('download', `costguard-${this.s.by}.csv`);
    byId<HTMLAnchorElement>('cg-json').href = this.api.url('api/spend', q);
  }

  private renderSimulated(rows: ReadonlyArray<Row>): void {
    byId('cg-sim').hidden = !rows.some(r => r.simulated);
  }

  renderPoll(): void {
    if (this.boot.admin) {
      renderPoll(byId('cg-poll'), this.s.poll, this.now());
    } else if (this.s.me) {
      renderAsOf(byId('cg-poll'), this.s.me, this.now());
    }
  }

  /** The chart's data, then the chart; an answer that a newer request overtook is dropped. */
  async refreshChart(): Promise<void> {
    const seq = ++this.s.chartSeq;
    const period = this.period();
    const window = chartWindow(this.s.step, period, this.now());
    const subject = chartSubject(this.boot.admin, this.boot.user, this.s.key);
    const doc = await this.api.series({ ...subject, step: this.s.step, since: window.start, until: window.end });
    if (seq !== this.s.chartSeq) {
      return;
    }
    this.s.chart = chartBuckets(doc, window, period.since === null);
    this.drawChart();
  }

  drawChart(): void {
    if (!this.s.chart) {
      return;
    }
    drawChart(byId('cg-chart'), byId('cg-chart-foot'), byId('cg-tip'), {
      ...this.s.chart,
      step: this.s.step,
      currency: this.s.currency
    });
  }

  private renderKeyOptions(): void {
    const sel = byId<HTMLSelectElement>('cg-key');
    const keep = this.s.key;
    const users = this.s.rows.user.map(r => r.key).sort();
    const groups = this.s.rows.group.map(r => r.key).sort();
    sel.textContent = '';
    sel.appendChild(el('option', { value: '', text: 'the whole hub' }));
    if (users.length) {
      sel.appendChild(el('optgroup', { label: 'Users' }, users.map(u => el('option', { value: `user:${u}`, text: u }))));
    }
    if (groups.length) {
      sel.appendChild(el('optgroup', { label: 'Groups' }, groups.map(g => el('option', { value: `group:${g}`, text: `${g} (group)` }))));
    }
    const known = ['', ...users.map(u => `user:${u}`), ...groups.map(g => `group:${g}`)];
    if (keep && !known.includes(keep)) {
      // keep a choice the current period lacks
      sel.appendChild(el('option', { value: keep, text: keep.slice(keep.indexOf(':') + 1) }));
    }
    sel.value = keep;
  }

  private stamp(): void {
    byId('cg-updated').textContent = `updated ${utc(this.now(), true)}`;
  }

  private async refreshAdmin(): Promise<void> {
    const seq = ++this.s.seq;
    const p = this.period();
    if (p.since !== null && p.until !== null && p.until <= p.since) {
      this.showError('The custom period ends before it starts.');
      return;
    }
    this.updateLinks();
    const [users, groups, servers] = await Promise.all(
      (['user', 'group', 'server'] as By[]).map(by => this.api.spend(by, p))
    );
    if (seq !== this.s.seq) {
      return;
    }
    this.s.rows = { user: users.rows, group: groups.rows, server: servers.rows };
    this.s.poll = users.poll ?? null;
    const all = [...users.rows, ...servers.rows];
    this.s.currency = pickCurrency(all, this.s.currency);
    this.renderSimulated(all);
    this.renderPoll();
    renderKpis(byId('cg-kpis'), this.s.rows.user, this.periodLabel(), true, this.s.currency);
    this.renderTable();
    renderCounted(byId('cg-counted'), this.s.rows.server, true);
    this.renderKeyOptions();
    this.showError(null);
    this.stamp();
    await this.refreshChart();
  }

  private async refreshUser(): Promise<void> {
    const me = await this.api.me();
    this.s.me = me;
    const rows = me.servers || [];
    const totals = me.totals ? [me.totals] : [];
    this.s.currency = pickCurrency([...rows, ...totals], this.s.currency);
    this.renderSimulated([...rows, ...totals]);
    this.renderPoll();
    renderKpis(byId('cg-kpis'), totals, 'all time, all your servers', false, this.s.currency);
    renderServers(byId('cg-user-table'), byId('cg-user-counted'), me, this.s.currency);
    renderBudgets(byId('cg-budget-list'), byId('cg-budget-period'), me.budgets || [], this.s.currency, this.now());
    this.showError(null);
    this.stamp();
    await this.refreshChart();
  }

  /** Load the figures; a failure says so and the next refresh tries again. */
  async refresh(): Promise<void> {
    try {
      await (this.boot.admin ? this.refreshAdmin() : this.refreshUser());
    } catch (e) {
      this.showError(`Could not load the figures: ${(e as Error).message}. Retrying in 30 s.`);
    }
  }

  private chartAgain(): void {
    this.refreshChart().catch(e => this.showError(`Could not load the chart: ${(e as Error).message}`));
  }

  private wireAdmin(): void {
    byId('cg-admin').hidden = false;
    byId('cg-subtitle').textContent = 'GPU spend across the hub';
    byId('cg-by').addEventListener('click', ev => {
      const b = (ev.target as Element).closest('button[data-by]');
      if (!b) {
        return;
      }
      this.s.by = b.getAttribute('data-by') as By;
      selectSeg(byId('cg-by'), 'data-by', this.s.by);
      byId<HTMLInputElement>('cg-filter').placeholder = `Filter ${this.s.by}s`;
      this.updateLinks();
      this.renderTable();
    });
    const period = byId<HTMLSelectElement>('cg-period');
    period.addEventListener('change', () => {
      this.s.period = period.value as PeriodName;
      byId('cg-custom').hidden = this.s.period !== 'custom';
      const since = byId<HTMLInputElement>('cg-since');
      if (this.s.period === 'custom' && !since.value) {
        const d = new Date(this.now() * 1000);
        since.value = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-01`;
        byId<HTMLInputElement>('cg-until').value = d.toISOString().slice(0, 10);
      }
      void this.refresh();
    });
    for (const id of ['cg-since', 'cg-until']) {
      byId(id).addEventListener('change', () => {
        if (this.s.period === 'custom') {
          void this.refresh();
        }
      });
    }
    const filter = byId<HTMLInputElement>('cg-filter');
    filter.addEventListener('input', () => {
      this.s.filter = filter.value.trim();
      this.renderTable();
    });
    const key = byId<HTMLSelectElement>('cg-key');
    key.addEventListener('change', () => {
      this.s.key = key.value;
      this.chartAgain();
    });
  }

  private wireUser(): void {
    byId('cg-user').hidden = false;
    byId('cg-poll').textContent = 'loading your figures…';
    byId('cg-subtitle').textContent = 'your GPU spend';
    byId('cg-key-field').hidden = true;
    byId('cg-chart-title').textContent = 'Your spend over time';
  }

  /** Wire the controls, load, and keep refreshing. */
  start(): void {
    byId('cg-who').textContent = this.boot.user || '';
    const prefix = this.api.prefix;
    const hubHome = prefix.replace(/services\/[^/]+\/?$/, 'hub/home');
    byId<HTMLAnchorElement>('cg-hub').href = hubHome === prefix ? '/hub/home' : hubHome;
    if (this.boot.admin) {
      this.wireAdmin();
    } else {
      this.wireUser();
    }
    byId('cg-step').addEventListener('click', ev => {
      const b = (ev.target as Element).closest('button[data-step]');
      if (!b) {
        return;
      }
      this.s.step = b.getAttribute('data-step') as Step;
      selectSeg(byId('cg-step'), 'data-step', this.s.step);
      this.chartAgain();
    });
    let resize: number | undefined;
    window.addEventListener('resize', () => {
      window.clearTimeout(resize);
      resize = window.setTimeout(() => this.drawChart(), 120);
    });
    void this.refresh();
    window.setInterval(() => {
      if (!document.hidden) {
        void this.refresh();
      }
    }, REFRESH_MS);
    window.setInterval(() => {
      if (this.s.poll || this.s.me) {
        this.renderPoll();
      }
    }, 5000);
  }
}

/** The boot document the service writes into the shell. */
export function readBoot(doc: Document = document): IBoot {
  const text = doc.getElementById('boot')?.textContent || '{}';
  return JSON.parse(text) as IBoot;
}
