/**
 * @jest-environment jsdom
 */
import { Widget } from '@lumino/widgets';

import { requestAPI } from '../api';
import { JobAction, JOBS_PANEL_ID, JobsPanel } from '../jobspanel';
import type { IJob } from '../jobsapi';
import { JobsModel } from '../jobsmodel';
import { job, results } from './jobfixtures';

// jsdom has no fetch: answer the API calls here.
jest.mock('../api', () => ({
  ...jest.requireActual('../api'),
  requestAPI: jest.fn()
}));

const mockedRequest = requestAPI as jest.MockedFunction<typeof requestAPI>;

const wait = (ms = 30) => new Promise(resolve => setTimeout(resolve, ms));

function setup(jobs: IJob[], more: { [path: string]: unknown } = {}) {
  const answers: { [path: string]: unknown } = {
    'jobs?limit=50': { jobs, currency: 'USD' },
    ...more,
    'jobs/2/results': results(2),
    'jobs/3/log?offset=0': { offset: 0, next_offset: 4, size: 4, text: 'log\n', complete: false }
  };
  mockedRequest.mockImplementation(async (path = '') => {
    if (!(path in answers)) {
      throw new Error(`no route ${path}`);
    }
    const answer = answers[path];
    return (typeof answer === 'function' ? await answer() : answer) as any;
  });
  const model = new JobsModel({
    isNotebookOpen: path => path === 'work/train.ipynb'
  });
  const actions: [JobAction, number][] = [];
  const panel = new JobsPanel({ model, onAction: (a, j) => actions.push([a, j.id]) });
  Widget.attach(panel, document.body);
  return { model, panel, actions };
}

function row(panel: JobsPanel, id: number): HTMLElement {
  return panel.node.querySelector<HTMLElement>(`.jp-costguard-job-row[data-job-id="${id}"]`)!;
}

function field(panel: JobsPanel, id: number, name: string): string | null {
  return row(panel, id).querySelector(`[data-field="${name}"]`)!.textContent;
}

function buttons(panel: JobsPanel, id: number): string[] {
  return Array.from(row(panel, id).querySelectorAll<HTMLElement>('button[data-action]')).map(
    b => b.className.match(/jp-costguard-job-(cancel|insert|load|rerun)/)![1]
  );
}

describe('JobsPanel', () => {
  let cleanup: (() => void) | null = null;
  afterEach(() => {
    cleanup?.();
    cleanup = null;
  });

  it('lists jobs newest first with their figures and actions', async () => {
    const { model, panel, actions } = setup([
      job(1, 'succeeded', { notebook: 'other.ipynb' }),
      job(2, 'succeeded'),
      job(3, 'running', {
        elapsed_seconds: 12,
        spend: 0.01,
        label: 'job 3 running on local · 12s · USD 0.01',
        charged_per_hour: 0.075,
        estimate: {
          priced: true,
          hourly_price: 0.1,
          max_cost: null,
          currency: 'USD',
          source: 'catalog',
          detail: 'catalog: aws p4d.24xlarge on-demand'
        }
      }),
      job(4, 'queued', {
        backend: 'slurm',
        backend_detail: { slurm_job_id: '7', slurm_state: 'PENDING', reason: 'Resources' }
      })
    ]);
    cleanup = () => {
      panel.dispose();
      model.dispose();
    };
    expect(panel.id).toBe(JOBS_PANEL_ID);
    expect(model.visible).toBe(true);
    await model.refresh();
    await wait();
    const ids = Array.from(panel.node.querySelectorAll<HTMLElement>('.jp-costguard-job-row')).map(
      r => r.dataset.jobId
    );
    expect(ids).toEqual(['4', '3', '2', '1']);
    const waiting = row(panel, 4).querySelector<HTMLElement>('[data-field="waiting"]')!;
    expect(waiting.hidden).toBe(false);
    expect(waiting.textContent).toBe('waiting: PENDING: Resources');
    expect(row(panel, 3).querySelector<HTMLElement>('[data-field="waiting"]')!.hidden).toBe(true);
    expect(row(panel, 3).dataset.state).toBe('running');
    expect(field(panel, 3, 'id')).toBe('#3');
    expect(field(panel, 3, 'state')).toBe('running');
    expect(field(panel, 3, 'notebook')).toBe('train.ipynb');
    expect(field(panel, 3, 'elapsed')).toBe('12s');
    expect(field(panel, 3, 'spend')).toBe('USD 0.01');
    expect(field(panel, 3, 'attempts')).toBe('attempt 1/1');
    expect(field(panel, 3, 'label')).toBe('job 3 running on local · 12s · USD 0.01');
    // what it is charged beside what it was estimated to cost
    expect(field(panel, 3, 'charge')).toBe('charged USD 0.075/h · estimated USD 0.10/h');
    expect(row(panel, 3).querySelector<HTMLElement>('[data-field="charge"]')!.title).toBe(
      'Estimate: catalog: aws p4d.24xlarge on-demand'
    );
    expect(row(panel, 2).querySelector<HTMLElement>('[data-field="charge"]')!.hidden).toBe(true);
    expect(buttons(panel, 3)).toEqual(['cancel']);
    expect(buttons(panel, 2)).toEqual(['insert', 'load', 'rerun']);
    expect(buttons(panel, 1)).toEqual(['rerun']);
    row(panel, 3).querySelector<HTMLElement>('.jp-costguard-job-cancel')!.click();
    row(panel, 2).querySelector<HTMLElement>('.jp-costguard-job-insert')!.click();
    expect(actions).toEqual([
      ['cancel', 3],
      ['insert', 2]
    ]);
    // The server said nothing of older jobs: no "Show older jobs".
    expect(panel.node.querySelector<HTMLElement>('.jp-costguard-jobs-more')!.hidden).toBe(true);
  });

  it('offers "Show older jobs" while the server has older ones, and loads them on click', async () => {
    let release: (() => void) | null = null;
    const { model, panel } = setup([job(5, 'succeeded'), job(4, 'succeeded')], {
      'jobs?limit=50': { jobs: [job(5, 'succeeded'), job(4, 'succeeded')], next_before: 4, currency: 'USD' },
      'jobs?limit=50&before=4': () =>
        new Promise(resolve => {
          release = () =>
            resolve({ jobs: [job(3, 'succeeded'), job(2, 'succeeded')], next_before: 2, currency: 'USD' });
        }),
      'jobs?limit=50&before=2': { jobs: [job(1, 'failed')], next_before: null, currency: 'USD' }
    });
    cleanup = () => {
      panel.dispose();
      model.dispose();
    };
    const more = panel.node.querySelector<HTMLElement>('.jp-costguard-jobs-more')!;
    const button = more.querySelector<HTMLButtonElement>('button.jp-costguard-jobs-older')!;
    const ids = () =>
      Array.from(panel.node.querySelectorAll<HTMLElement>('.jp-costguard-job-row')).map(r =>
        Number(r.dataset.jobId)
      );
    expect(more.hidden).toBe(true); // nothing loaded yet
    await model.refresh();
    expect(ids()).toEqual([5, 4]);
    expect(more.hidden).toBe(false);
    expect(button.hidden).toBe(false);
    expect(button.disabled).toBe(false);
    expect(button.textContent).toBe('Show older jobs');
    // Under the list.
    const list = panel.node.querySelector('.jp-costguard-jobs-list')!;
    expect(list.compareDocumentPosition(more) & Node.DOCUMENT_POSITION_FOLLOWING).toBeTruthy();

    button.click();
    expect(mockedRequest).toHaveBeenLastCalledWith('jobs?limit=50&before=4', { method: 'GET' }, undefined);
    expect(button.disabled).toBe(true);
    expect(button.textContent).toBe('Loading…');
    button.click(); // a second click while loading asks nothing more
    await wait(5);
    expect(mockedRequest.mock.calls.filter(c => c[0] === 'jobs?limit=50&before=4')).toHaveLength(1);
    release!();
    await wait();
    expect(ids()).toEqual([5, 4, 3, 2]);
    expect(button.disabled).toBe(false);
    expect(button.textContent).toBe('Show older jobs');
    expect(more.hidden).toBe(false);

    button.click();
    await wait();
    expect(ids()).toEqual([5, 4, 3, 2, 1]);
    expect(more.hidden).toBe(true);
  });

  it('says why older jobs could not be loaded, next to the button', async () => {
    const { model, panel } = setup([], {
      'jobs?limit=50': { jobs: [job(5, 'succeeded')], next_before: 5, currency: 'USD' },
      'jobs?limit=50&before=5': () => Promise.reject(new Error('the server cannot be reached'))
    });
    cleanup = () => {
      panel.dispose();
      model.dispose();
    };
    await model.refresh();
    const error = panel.node.querySelector<HTMLElement>('.jp-costguard-jobs-older-error')!;
    const button = panel.node.querySelector<HTMLButtonElement>('.jp-costguard-jobs-older')!;
    expect(error.hidden).toBe(true);
    button.click();
    await wait();
    expect(error.hidden).toBe(false);
    expect(error.textContent).toBe('Could not load older jobs: the server cannot be reached');
    expect(button.disabled).toBe(false);
    expect(button.hidden).toBe(false);
    expect(panel.node.querySelectorAll('.jp-costguard-job-row')).toHaveLength(1);
  });

  it('expands a row to show its log', async () => {
    const { model, panel } = setup([job(3, 'running')]);
    cleanup = () => {
      panel.dispose();
      model.dispose();
    };
    await model.refresh();
    const log = row(panel, 3).querySelector<HTMLElement>('pre.jp-costguard-job-log')!;
    expect(log.hidden).toBe(true);
    row(panel, 3).querySelector<HTMLElement>('.jp-costguard-job-summary')!.click();
    expect(model.expanded).toBe(3);
    expect(row(panel, 3).classList.contains('jp-mod-expanded')).toBe(true);
    expect(log.hidden).toBe(false);
    await wait();
    expect(log.textContent).toBe('log\n');
    row(panel, 3).querySelector<HTMLElement>('.jp-costguard-job-summary')!.click();
    expect(log.hidden).toBe(true);
  });

  it('filters to the current notebook and says when there is nothing', async () => {
    const { model, panel } = setup([job(1, 'succeeded', { notebook: 'other.ipynb' })]);
    cleanup = () => {
      panel.dispose();
      model.dispose();
    };
    await model.refresh();
    const toggle = panel.node.querySelector<HTMLInputElement>('.jp-costguard-jobs-filter input')!;
    toggle.checked = true;
    toggle.dispatchEvent(new Event('change', { bubbles: true }));
    expect(model.filterToNotebook).toBe(true);
    expect(panel.node.querySelectorAll('.jp-costguard-job-row')).toHaveLength(0);
    expect(panel.node.querySelector('.jp-costguard-jobs-empty')?.textContent).toBe('No notebook is active.');
    model.currentNotebook = 'other.ipynb';
    expect(panel.node.querySelectorAll('.jp-costguard-job-row')).toHaveLength(1);
    expect(panel.node.querySelector('.jp-costguard-jobs-empty')).toBeNull();
  });
});
