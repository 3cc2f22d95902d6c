/**
 * @jest-environment jsdom
 */
import { cellPrompt, OffloadDialogBody, sliceSummary } from '../offloaddialog';
import { slice } from './jobfixtures';

const request = {
  notebook: 'train.ipynb',
  cells: [
    { id: 'c1', cell_type: 'code', source: 'import numpy as np\nx = 1', execution_count: 4, metadata: {}, outputs: [] },
    { id: 'c3', cell_type: 'code', source: 'y = np.ones(3)', execution_count: null, metadata: {}, outputs: [] }
  ],
  selected: ['c3'],
  kernel_id: 'k-1',
  resources: { gpus: 1, cpus: null, memory_gib: null, time_limit_seconds: 3600 },
  retries: 0
};

describe('OffloadDialogBody', () => {
  it('lists the slice, marks the selected cells, and edits the resources', () => {
    const body = new OffloadDialogBody({ ...slice, unresolved: ['df'] }, request);
    const items = Array.from(body.node.querySelectorAll<HTMLElement>('.jp-costguard-slice-cell'));
    expect(items.map(i => [i.dataset.cellId, i.dataset.selected])).toEqual([
      ['c1', 'false'],
      ['c3', 'true']
    ]);
    // Named as the notebook shows them: execution count and first line, not positions.
    expect(items[0].querySelector('[data-field="prompt"]')!.textContent).toBe('[4]');
    expect(items[1].querySelector('[data-field="prompt"]')!.textContent).toBe('[ ]');
    expect(items[0].querySelector<HTMLElement>('[data-field="prompt"]')!.title).toBe(
      'Last run as [4] (cell 1 of the notebook)'
    );
    expect(Array.from(items[0].children).map(c => c.className)).toEqual([
      'jp-costguard-slice-prompt',
      'jp-costguard-slice-source',
      'jp-costguard-slice-reason'
    ]);
    expect(items[0].querySelector('[data-field="reason"]')!.textContent).toBe('defines np used by cell 3');
    expect(items[0].querySelector('[data-field="source"]')!.textContent).toBe('import numpy as np');
    expect(items[1].querySelector('.jp-costguard-slice-selected')).not.toBeNull();
    // "selected" is the badge's word; the reason does not repeat it.
    expect(items[1].querySelector('[data-field="reason"]')!.textContent).toBe('');
    expect(body.node.querySelector('.jp-costguard-slice-summary')!.textContent).toBe(
      'The job runs 2 cells: 1 selected and 1 cell before it that it needs.'
    );
    expect(body.node.querySelector('.jp-costguard-slice-unresolved')!.textContent).toMatch(/df/);
    expect(body.node.querySelector('.jp-costguard-slice-defines')!.textContent).toBe('Brings back: y');
    const gpus = body.node.querySelector<HTMLInputElement>('input[name="gpus"]')!;
    expect(gpus.value).toBe('1');
    gpus.value = '2';
    body.node.querySelector<HTMLInputElement>('input[name="send"]')!.value = 'df';
    expect(body.getValue()).toEqual({
      gpus: '2',
      cpus: '',
      memory_gib: '',
      time_limit_seconds: '3600',
      retries: '0',
      send: 'df'
    });
    body.dispose();
  });

  it('writes prompts as JupyterLab does', () => {
    expect(cellPrompt(12)).toBe('[12]');
    expect(cellPrompt(null)).toBe('[ ]');
    expect(cellPrompt(0)).toBe('[ ]');
    expect(cellPrompt('3')).toBe('[ ]');
  });

  it('sums the slice up', () => {
    expect(sliceSummary(1, 1)).toBe('The job runs the selected cell alone.');
    expect(sliceSummary(2, 2)).toBe('The job runs the 2 selected cells alone.');
    expect(sliceSummary(5, 2)).toBe('The job runs 5 cells: 2 selected and 3 cells before them that they need.');
  });

  it('disables sending variables without a kernel', () => {
    const body = new OffloadDialogBody(slice, { ...request, kernel_id: undefined });
    expect(body.node.querySelector<HTMLInputElement>('input[name="send"]')!.disabled).toBe(true);
    body.dispose();
  });

  it('shows what re-running took and offers to send values instead, slicing again', async () => {
    const timed = {
      ...request,
      cells: [
        {
          ...request.cells[0],
          metadata: {
            execution: {
              'iopub.execute_input': '2026-12-02T08:00:00Z',
              'shell.execute_reply': '2026-12-02T08:02:05Z'
            }
          }
        },
        request.cells[1]
      ]
    };
    const asked: string[][] = [];
    const body = new OffloadDialogBody({ ...slice, warnings: ['exec() in [ ] run(code): cannot see what it defines'] }, timed, {
      sizes: new Map([['np', 120]]),
      maxSendBytes: 1000,
      reslice: async send => {
        asked.push(send);
        return send.includes('np') ? { ...slice, cells: [slice.cells[1]] } : slice;
      }
    });
    const q = (s: string) => body.node.querySelector<HTMLElement>(s);
    expect(q('[data-cell-id="c1"] [data-field="last-run"]')!.textContent).toBe('took 2 min 5 s');
    expect(q('.jp-costguard-slice-cost')!.textContent).toBe(
      'Re-running the earlier cells took 2 min 5 s when they last ran.'
    );
    expect(q('.jp-costguard-slice-warnings li')!.textContent).toMatch(/exec\(\)/);
    const offer = q('[data-cell-id="c1"] input.jp-costguard-slice-send') as HTMLInputElement;
    expect(offer.dataset.names).toBe('np');
    expect(q('[data-cell-id="c3"] input.jp-costguard-slice-send')).toBeNull(); // the selected cell
    offer.checked = true;
    offer.dispatchEvent(new Event('change'));
    await new Promise(r => setTimeout(r, 0));
    expect(asked).toEqual([['np']]);
    expect(body.sent).toEqual(['np']);
    expect(q('[data-cell-id="c1"]')).toBeNull(); // no longer re-run
    expect(q('.jp-costguard-slice-sent li[data-name="np"]')).not.toBeNull();
    expect(body.getValue().send).toBe('np');
    q('.jp-costguard-slice-unsend')!.click();
    await new Promise(r => setTimeout(r, 0));
    expect(asked).toEqual([['np'], []]);
    expect(q('[data-cell-id="c1"]')).not.toBeNull();
    expect(body.getValue().send).toBe('');
    body.dispose();
  });

  it('offers nothing without the kernel\'s sizes', () => {
    const body = new OffloadDialogBody(slice, request);
    expect(body.node.querySelector('input.jp-costguard-slice-send')).toBeNull();
    expect(body.node.querySelector('.jp-costguard-slice-cost')).toBeNull();
    body.dispose();
  });
});
