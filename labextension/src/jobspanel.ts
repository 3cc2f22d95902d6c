/**
 * The Jobs panel (right sidebar): renders a JobsModel, nothing else. Rows are
 * keyed by job id and updated in place, so buttons, focus and scroll survive
 * the refreshes.
 *
 * Stable DOM hooks: `#jp-costguard-jobs` (`data-costguard-state`),
 * `.jp-costguard-jobs-filter input` ("This notebook only"),
 * rows `.jp-costguard-job-row[data-job-id][data-state]` (`.jp-mod-expanded`
 * and `aria-expanded` when expanded), their `.jp-costguard-job-summary`
 * (click / Enter to expand), fields `[data-field=id|state|notebook|elapsed|spend|attempts|label]`,
 * buttons `.jp-costguard-job-cancel`, `.jp-costguard-job-insert`,
 * `.jp-costguard-job-load`, `.jp-costguard-job-rerun` (absent unless they
 * apply), the log `pre.jp-costguard-job-log` (`hidden` unless expanded),
 * `.jp-costguard-jobs-empty` when there is nothing to list; under the list,
 * `.jp-costguard-jobs-more` (`hidden` unless the server has older jobs) with
 * the button `.jp-costguard-jobs-older` ("Show older jobs"; disabled, "Loading…",
 * while a page loads) and `.jp-costguard-jobs-older-error` (`hidden` unless the
 * last load failed).
 */
import { el, setAttr, setText } from './dom';
import { chargeText } from './estimatemodel';
import { formatElapsed, formatMoney } from './format';
import { type IJob, waitingReason } from './jobsapi';
import type { JobsModel } from './jobsmodel';
import { baseName } from './notebooks';
import { SidePanel } from './sidepanel';

/** DOM id of the Jobs panel. */
export const JOBS_PANEL_ID = 'jp-costguard-jobs';

/** What a row's buttons do. */
export type JobAction = 'cancel' | 'insert' | 'load' | 'rerun';

/** Buttons of a row: action, label, tooltip. */
const BUTTONS: ReadonlyArray<[JobAction, string, string]> = [
  ['cancel', 'Cancel', 'Stop the job and its processes'],
  ['insert', 'Insert outputs', 'Put the job\'s outputs into the notebook\'s cells'],
  ['load', 'Load results', 'Load the names the job brought back into the notebook\'s kernel (asks before replacing any it has)'],
  ['rerun', 'Run again', 'Submit the same code, resources and variables as a new job']
];

export namespace JobsPanel {
  export interface IOptions {
    model: JobsModel;
    /** Run a row's action (the plugin runs the matching command). */
    onAction?: (action: JobAction, job: IJob) => void;
  }
}

/** The Jobs side panel. */
export class JobsPanel extends SidePanel<JobsModel> {
  constructor(options: JobsPanel.IOptions) {
    super(options.model, ['click', 'keydown', 'change']);
    this._onAction = options.onAction;
    this.id = JOBS_PANEL_ID;
    this.addClass('jp-costguard-jobs');
    this.title.caption = 'Costguard: batch jobs';
    this._build();
    this.render();
  }

  handleEvent(event: Event): void {
    if (event.type === 'click') {
      this._onClick(event);
    } else if (event.type === 'keydown') {
      const key = (event as KeyboardEvent).key;
      const target = event.target as HTMLElement;
      if ((key === 'Enter' || key === ' ') && target.classList?.contains('jp-costguard-job-summary')) {
        event.preventDefault();
        this._onClick(event);
      }
    } else if (event.type === 'change') {
      if (event.target === this._filter) {
        this.model.filterToNotebook = this._filter.checked;
      }
    }
  }


  /** Scroll a job's row into view (after `expanded` was set). */
  reveal(id: number): void {
    const row = this._rows.get(id);
    if (row && typeof row.scrollIntoView === 'function') {
      row.scrollIntoView({ block: 'nearest' });
    }
  }

  /** Polls fast while shown. */
  protected setShown(shown: boolean): void {
    this.model.visible = shown;
  }

  private _jobOf(node: Element): IJob | undefined {
    const row = node.closest<HTMLElement>('.jp-costguard-job-row');
    const id = Number(row?.dataset.jobId);
    return Number.isFinite(id) ? this.model.job(id) : undefined;
  }

  private _onClick(event: Event): void {
    const target = event.target as HTMLElement | null;
    if (!target || !this.node.contains(target)) {
      return;
    }
    if (target.closest('.jp-costguard-jobs-older')) {
      void this.model.loadOlder();
      return;
    }
    const button = target.closest<HTMLElement>('button[data-action]');
    if (button) {
      const job = this._jobOf(button);
      const action = button.dataset.action as JobAction;
      if (job && this._onAction) {
        this._onAction(action, job);
      }
      return;
    }
    const summary = target.closest<HTMLElement>('.jp-costguard-job-summary');
    if (summary) {
      const job = this._jobOf(summary);
      if (job) {
        this.model.toggle(job.id);
      }
    }
  }

  // ---- construction -------------------------------------------------------

  private _build(): void {
    const header = el('div', 'jp-costguard-panel-header jp-costguard-jobs-header');
    header.appendChild(el('h2', 'jp-costguard-panel-title', 'Jobs'));
    this._stateNode = el('span', 'jp-costguard-panel-state');
    header.appendChild(this._stateNode);
    this.node.appendChild(header);

    const toolbar = el('div', 'jp-costguard-jobs-toolbar');
    const label = el('label', 'jp-costguard-jobs-filter');
    this._filter = el('input');
    this._filter.type = 'checkbox';
    label.appendChild(this._filter);
    label.appendChild(document.createTextNode(' This notebook only'));
    label.title = 'List only the jobs offloaded from the notebook you are looking at';
    toolbar.appendChild(label);
    this.node.appendChild(toolbar);

    this._list = el('div', 'jp-costguard-jobs-list');
    this._list.setAttribute('role', 'list');
    this.node.appendChild(this._list);
    this._empty = el('div', 'jp-costguard-empty jp-costguard-jobs-empty');

    this._more = el('div', 'jp-costguard-jobs-more');
    this._more.hidden = true;
    this._older = el(
      'button',
      'jp-costguard-button jp-costguard-jobs-older',
      'Show older jobs'
    );
    this._older.type = 'button';
    this._older.title = 'Load the next page of older jobs';
    this._more.appendChild(this._older);
    this._olderError = el('span', 'jp-costguard-jobs-older-error');
    this._olderError.hidden = true;
    this._more.appendChild(this._olderError);
    this.node.appendChild(this._more);
  }

  private _createRow(job: IJob): HTMLElement {
    const row = el('div', 'jp-costguard-job-row');
    row.setAttribute('role', 'listitem');
    row.dataset.jobId = String(job.id);

    const summary = el('div', 'jp-costguard-job-summary');
    summary.tabIndex = 0;
    summary.setAttribute('role', 'button');
    summary.title = 'Show or hide the log';
    for (const field of ['id', 'state', 'notebook', 'elapsed', 'spend', 'attempts']) {
      const span = el('span', `jp-costguard-job-${field}`);
      span.dataset.field = field;
      summary.appendChild(span);
    }
    row.appendChild(summary);

    const label = el('div', 'jp-costguard-job-label');
    label.dataset.field = 'label';
    row.appendChild(label);

    const charge = el('div', 'jp-costguard-job-charge');
    charge.dataset.field = 'charge';
    row.appendChild(charge);

    const waiting = el('div', 'jp-costguard-job-waiting');
    waiting.dataset.field = 'waiting';
    waiting.hidden = true;
    row.appendChild(waiting);

    row.appendChild(el('div', 'jp-costguard-job-actions'));

    const log = el('pre', 'jp-costguard-job-log');
    log.hidden = true;
    row.appendChild(log);
    return row;
  }

  private _updateRow(row: HTMLElement, job: IJob): void {
    const model = this.model;
    setAttr(row, 'data-state', String(job.state));
    const expanded = model.expanded === job.id;
    row.classList.toggle('jp-mod-expanded', expanded);
    const summary = row.querySelector('.jp-costguard-job-summary')!;
    setAttr(summary, 'aria-expanded', expanded ? 'true' : 'false');

    const field = (name: string): HTMLElement =>
      row.querySelector<HTMLElement>(`[data-field="${name}"]`)!;
    setText(field('id'), `#${job.id}`);
    const state =
      job.state === 'running' && job.phase && job.phase !== 'running'
        ? `running (${job.phase})`
        : String(job.state);
    setText(field('state'), state);
    setAttr(field('state'), 'data-state', String(job.state));
    setText(field('notebook'), baseName(job.notebook) || job.notebook);
    setAttr(field('notebook'), 'title', job.notebook);
    setText(field('elapsed'), formatElapsed(job.elapsed_seconds));
    setText(
      field('spend'),
      formatMoney(Number.isFinite(job.spend) ? job.spend : 0, job.currency || model.currency)
    );
    const attempts = `attempt ${job.attempts}/${job.max_attempts}`;
    setText(field('attempts'), attempts);
    setText(field('label'), job.label ?? '');
    setAttr(field('label'), 'title', job.exit_reason ? `${job.label}\n${job.exit_reason}` : job.label ?? '');

    const charge = chargeText(job);
    field('charge').hidden = charge === null;
    setText(field('charge'), charge ?? '');
    setAttr(field('charge'), 'title', job.estimate ? `Estimate: ${job.estimate.detail}` : '');

    const waiting = waitingReason(job);
    field('waiting').hidden = waiting === null;
    setText(field('waiting'), waiting ? `waiting: ${waiting}` : '');

    this._updateButtons(row.querySelector<HTMLElement>('.jp-costguard-job-actions')!, job);

    const log = row.querySelector<HTMLPreElement>('.jp-costguard-job-log')!;
    log.hidden = !expanded;
    if (expanded) {
      const text = model.logText(job) || '(no output yet)';
      if (log.textContent !== text) {
        const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
        log.textContent = text;
        if (atEnd) {
          log.scrollTop = log.scrollHeight;
        }
      }
    }
  }

  private _updateButtons(actions: HTMLElement, job: IJob): void {
    const model = this.model;
    const wanted: JobAction[] = [];
    if (model.canCancel(job)) {
      wanted.push('cancel');
    }
    if (model.canInsert(job)) {
      wanted.push('insert');
    }
    if (model.canLoad(job)) {
      wanted.push('load');
    }
    if (model.canRerun(job)) {
      wanted.push('rerun');
    }
    const key = wanted.join(',');
    if (actions.dataset.actions === key) {
      return;
    }
    actions.dataset.actions = key;
    actions.textContent = '';
    for (const [action, label, caption] of BUTTONS) {
      if (!wanted.includes(action)) {
        continue;
      }
      const button = el(
        'button',
        `jp-costguard-button jp-costguard-job-button jp-costguard-job-${action}${
          action === 'cancel' ? ' jp-mod-warn' : ''
        }`,
        label
      );
      button.type = 'button';
      button.dataset.action = action;
      button.title = caption;
      actions.appendChild(button);
    }
  }

  // ---- rendering ----------------------------------------------------------

  protected render(): void {
    const model = this.model;
    this.node.dataset.costguardState = model.state;
    let stateText = '';
    if (model.state === 'offline') {
      stateText = 'costguard: offline';
    } else if (model.state === 'loading') {
      stateText = 'loading…';
    } else if (model.jobs.length) {
      const active = model.jobs.filter(j => model.canCancel(j)).length;
      stateText = active ? `${active} active` : '';
    }
    setText(this._stateNode, stateText);
    this._filter.checked = model.filterToNotebook;

    const rows = model.rows;
    const next = new Map<number, HTMLElement>();
    rows.forEach((job, index) => {
      let row = this._rows.get(job.id);
      if (!row) {
        row = this._createRow(job);
      }
      this._updateRow(row, job);
      next.set(job.id, row);
      const current = this._list.children[index];
      if (current !== row) {
        this._list.insertBefore(row, current ?? null);
      }
    });
    for (const [id, row] of this._rows) {
      if (!next.has(id)) {
        row.remove();
      }
    }
    this._rows = next;
    while (this._list.children.length > next.size) {
      this._list.lastElementChild?.remove();
    }
    if (!rows.length) {
      setText(this._empty, this._emptyText());
      this._list.appendChild(this._empty);
    }
    this._renderMore();
  }

  /** "Show older jobs" under the list. */
  private _renderMore(): void {
    const model = this.model;
    const loading = model.loadingOlder;
    const error = model.olderError;
    this._more.hidden = !(model.hasOlder || loading || error);
    this._older.hidden = !(model.hasOlder || loading);
    this._older.disabled = loading;
    setText(this._older, loading ? 'Loading…' : 'Show older jobs');
    this._olderError.hidden = !error;
    setText(this._olderError, error ? `Could not load older jobs: ${error}` : '');
    setAttr(this._olderError, 'title', error);
  }

  private _emptyText(): string {
    const model = this.model;
    if (model.state === 'unavailable') {
      return 'Batch jobs are not available on this server (c.Offload.enabled).';
    }
    if (model.state === 'offline' && !model.jobs.length) {
      return 'The server cannot be reached.';
    }
    if (model.state === 'loading' || model.state === 'idle') {
      return 'Loading…';
    }
    if (model.filterToNotebook) {
      if (!model.currentNotebook) {
        return 'No notebook is active.';
      }
      return model.hasOlder
        ? 'No batch jobs from this notebook among the jobs loaded.'
        : 'No batch jobs from this notebook.';
    }
    return 'No batch jobs yet. Select code cells and use "Run as batch job" (cell toolbar, context menu, Ctrl/Cmd+Alt+Enter).';
  }

  private _empty!: HTMLElement;
  private _filter!: HTMLInputElement;
  private _list!: HTMLElement;
  private _more!: HTMLElement;
  private _older!: HTMLButtonElement;
  private _olderError!: HTMLElement;
  private _onAction?: (action: JobAction, job: IJob) => void;
  private _rows = new Map<number, HTMLElement>();
  private _stateNode!: HTMLElement;
}
