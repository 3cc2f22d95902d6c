/**
 * @jest-environment jsdom
 */
import { bringBackText, cellPrompt, OffloadDialogBody, sliceSummary } from '../offloaddialog';
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
    // Without the server's word on what comes back, the dialog names no names as coming back.
    expect(body.node.querySelector<HTMLElement>('.jp-costguard-slice-brings-back')!.dataset.names).toBe('');
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
      bringBack: { names: [], from: 'later_cells' },
      reslice: async send => {
        asked.push(send);
        return {
          slice: send.includes('np') ? { ...slice, cells: [slice.cells[1]] } : slice,
          bring_back: send.includes('np') ? ['y'] : [],
          bring_back_from: 'later_cells',
          max_send_bytes: 1000
        };
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
    expect(q('.jp-costguard-slice-brings-back')!.dataset.names).toBe('y'); // the new preview's
    expect(q('.jp-costguard-slice-sent li[data-name="np"]')).not.toBeNull();
    expect(body.getValue().send).toBe('np');
    q('.jp-costguard-slice-unsend')!.click();
    await new Promise(r => setTimeout(r, 0));
    expect(asked).toEqual([['np'], []]);
    expect(q('[data-cell-id="c1"]')).not.toBeNull();
    expect(body.getValue().send).toBe('');
    body.dispose();
  });

  it('lists what the job brings back and what stays in it, as the server chose', () => {
    const defines = ['ckpt', 'epoch', 'err', 'f', 'grad', 'start', 'weights', 'y'];
    const body = new OffloadDialogBody({ ...slice, defines }, request, {
      bringBack: { names: ['weights'], from: 'later_cells' }
    });
    const back = body.node.querySelector<HTMLElement>('.jp-costguard-slice-brings-back')!;
    const stays = body.node.querySelector<HTMLElement>('.jp-costguard-slice-stays')!;
    expect(back.dataset.names).toBe('weights');
    expect(back.textContent).toBe('Brings back weights: later cells read it.');
    expect(stays.dataset.names).toBe('ckpt,epoch,err,f,grad,start,y');
    expect(stays.textContent).toBe(
      'Stays in the job: ckpt, epoch, err, f, grad, start and y (no later cell reads them).'
    );
    body.dispose();
  });

  it('says why the names come back, and when nothing does', () => {
    expect(bringBackText(['a', 'b'], { names: ['a', 'b'], from: 'selected_cells' })).toEqual({
      back: 'Brings back all the selected cells define, a and b: no code cell follows them to say which names matter.',
      backNames: ['a', 'b'],
      stays: null,
      stayNames: []
    });
    expect(bringBackText(['a', 'b'], { names: ['b', 'z'], from: 'request' })).toEqual({
      back: 'Brings back b and z, as asked.',
      backNames: ['b', 'z'],
      stays: 'Stays in the job: a.',
      stayNames: ['a']
    });
    const none = bringBackText(['i', 'total'], { names: [], from: 'later_cells' });
    expect(none.back).toBe('Brings back nothing: no later cell reads what the selected cells define.');
    expect(none.stayNames).toEqual(['i', 'total']);
    expect(bringBackText([], { names: [], from: 'later_cells' }).back).toBe(
      'Brings back nothing: the selected cells define no variables.'
    );
  });

  it('offers nothing without the kernel\'s sizes', () => {
    const body = new OffloadDialogBody(slice, request);
    expect(body.node.querySelector('input.jp-costguard-slice-send')).toBeNull();
    expect(body.node.querySelector('.jp-costguard-slice-cost')).toBeNull();
    body.dispose();
  });
});
