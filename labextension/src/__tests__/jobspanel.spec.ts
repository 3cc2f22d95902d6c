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

function setup(jobs: IJob[]) {
  const answers: { [path: string]: unknown } = {
    jobs: { jobs, currency: 'USD' },
    'jobs/2/results': results(2),
    'jobs/3/log?offset=0': { offset: 0, next_offset: 4, size: 4, text: 'log\n', complete: false }
  };
  mockedRequest.mockImplementation(async (path = '') => {
    if (!(path in answers)) {
      throw new Error(`no route ${path}`);
    }
    return answers[path] as any;
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
      job(3, 'running', { elapsed_seconds: 12, spend: 0.01, label: 'job 3 running on local · 12s · USD 0.01' }),
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
    expect(buttons(panel, 3)).toEqual(['cancel']);
    expect(buttons(panel, 2)).toEqual(['insert', 'load', 'rerun']);
    expect(buttons(panel, 1)).toEqual(['rerun']);
    row(panel, 3).querySelector<HTMLElement>('.jp-costguard-job-cancel')!.click();
    row(panel, 2).querySelector<HTMLElement>('.jp-costguard-job-insert')!.click();
    expect(actions).toEqual([
      ['cancel', 3],
      ['insert', 2]
    ]);
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
