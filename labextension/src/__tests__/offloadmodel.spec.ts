import type * as nbformat from '@jupyterlab/nbformat';

import * as schema from '../../schema/offload.json';
import type { ISlice, ISubmitRequest } from '../jobsapi';
import { CellRunTimes, heavyCells } from '../heavycells';
import { applyForm, firstLine, formFromRequest, parseNames } from '../offloadform';
import {
  buildSubmitRequest,
  defaultEstimateRequest,
  IConfirmContext,
  INotebookSnapshot,
  Offloader,
  requestCell,
  runAsJobCaption,
  selectedCodeCells,
  shouldConfirm,
  submittedMessage
} from '../offloadmodel';
import { DEFAULT_OFFLOAD_SETTINGS, parseOffloadSettings } from '../offloadsettings';
import { ShiftClickTracker } from '../shiftclick';
import { FakeServer } from './fakeserver';
import { FakeNotifier, slice, submitted } from './jobfixtures';

/** A notebook as `model.toJSON().cells` gives it. */
const cells: nbformat.ICell[] = [
  {
    id: 'c1',
    cell_type: 'code',
    source: 'import numpy as np',
    metadata: {},
    execution_count: 1,
    outputs: [{ output_type: 'stream', name: 'stdout', text: 'big\n' }]
  },
  {
    id: 'm1',
    cell_type: 'markdown',
    source: '![x](attachment:x.png)',
    metadata: {},
    attachments: { 'x.png': { 'image/png': 'AAAA' } }
  },
  {
    id: 'c3',
    cell_type: 'code',
    source: 'y = np.ones(3)  # unsaved edit',
    metadata: { tags: ['heavy'] },
    execution_count: null,
    outputs: []
  },
  { id: 'r1', cell_type: 'raw', source: 'raw', metadata: {} }
];

function snapshot(extra: Partial<INotebookSnapshot> = {}): INotebookSnapshot {
  return {
    path: 'work/train.ipynb',
    cells,
    selected: ['c3'],
    kernelId: 'k-1',
    kernelName: 'python3',
    ...extra
  };
}

describe('offload settings', () => {
  it('fills defaults that match the schema', () => {
    expect(parseOffloadSettings(undefined)).toEqual(DEFAULT_OFFLOAD_SETTINGS);
    const props = (schema as any).properties;
    const d = DEFAULT_OFFLOAD_SETTINGS;
    expect(props.gpus.default).toBe(d.resources.gpus);
    expect(props.cpus.default).toBe(d.resources.cpus);
    expect(props.memory_gib.default).toBe(d.resources.memory_gib);
    expect(props.time_limit_seconds.default).toBe(d.resources.time_limit_seconds);
    expect(props.retries.default).toBe(d.retries);
    expect(props.confirm.default).toBe(d.confirm);
    expect(props.backend.default).toBe(d.backend);
    expect(props.notifications.default).toBe(d.notifications);
    // README: no time limit by default (the server's offload_time_limit_seconds is None too).
    expect(d.resources.time_limit_seconds).toBeNull();
  });

  it('reads values and drops odd ones', () => {
    const s = parseOffloadSettings({
      gpus: 2,
      cpus: 8,
      memory_gib: 32,
      time_limit_seconds: null,
      retries: 99,
      confirm: true,
      backend: ' slurm ',
      notifications: false
    });
    expect(s).toEqual({
      resources: { gpus: 2, cpus: 8, memory_gib: 32, time_limit_seconds: null },
      retries: 10,
      confirm: true,
      backend: 'slurm',
      notifications: false
    });
    const odd = parseOffloadSettings({ gpus: 1.5, cpus: -1, retries: 'x', confirm: 'yes' });
    expect(odd.resources.gpus).toBeNull();
    expect(odd.resources.cpus).toBeNull();
    expect(odd.retries).toBe(0);
    expect(odd.confirm).toBe(false);
  });

  it('declares the cell toolbar button, the context menu entry and the shortcut', () => {
    const s = schema as any;
    expect(s['jupyter.lab.toolbars'].Cell[0].command).toBe('costguard:run-as-job');
    const menu = s['jupyter.lab.menus'].context.find((i: any) => i.command);
    expect(menu).toEqual(
      expect.objectContaining({ command: 'costguard:run-as-job', selector: '.jp-Notebook .jp-Cell' })
    );
    expect(s['jupyter.lab.shortcuts'][0]).toEqual({
      command: 'costguard:run-as-job',
      keys: ['Accel Alt Enter'],
      selector: '.jp-Notebook'
    });
  });
});

describe('buildSubmitRequest', () => {
  it('sends every cell without outputs or attachments, and only selected code cells', () => {
    const r = buildSubmitRequest(snapshot({ selected: ['m1', 'c3', 'c1', 'gone'] }));
    expect(r.notebook).toBe('work/train.ipynb');
    expect(r.selected).toEqual(['c1', 'c3']);
    expect(r.cells.map(c => c.id)).toEqual(['c1', 'm1', 'c3', 'r1']);
    expect((r.cells[0] as nbformat.ICodeCell).outputs).toEqual([]);
    expect(r.cells[0].source).toBe('import numpy as np');
    expect('attachments' in r.cells[1]).toBe(false);
    expect(r.cells[2].source).toBe('y = np.ones(3)  # unsaved edit');
    expect(r.cells[2].metadata).toEqual({ tags: ['heavy'] });
    // The snapshot is not modified.
    expect((cells[0] as nbformat.ICodeCell).outputs).toHaveLength(1);
    expect((cells[1] as nbformat.IMarkdownCell).attachments).toBeDefined();
    expect(r.kernel_id).toBe('k-1');
    expect(r.kernel_name).toBe('python3');
  });

  it('uses the active cell when it is the selection, and nothing for markdown', () => {
    expect(buildSubmitRequest(snapshot({ selected: ['c3'] })).selected).toEqual(['c3']);
    expect(buildSubmitRequest(snapshot({ selected: ['m1'] })).selected).toEqual([]);
    expect(selectedCodeCells(cells, ['c3', 'c3'])).toEqual(['c3']);
  });

  it('takes resources and retries from the settings', () => {
    const r = buildSubmitRequest(snapshot(), DEFAULT_OFFLOAD_SETTINGS);
    // Every resource null by default: left to the server's defaults (no time limit).
    expect('resources' in r).toBe(false);
    expect(r.retries).toBe(0);
    expect(r.backend).toBeUndefined();
    const custom = parseOffloadSettings({ gpus: 1, cpus: 4, retries: 2, backend: 'local' });
    const c = buildSubmitRequest(snapshot({ kernelId: null, kernelName: null }), custom);
    expect(c.resources).toEqual({ gpus: 1, cpus: 4, memory_gib: null, time_limit_seconds: null });
    expect(c.retries).toBe(2);
    expect(c.backend).toBe('local');
    expect('kernel_id' in c).toBe(false);
    expect('kernel_name' in c).toBe(false);
    // All null: left to the server's defaults.
    const none = parseOffloadSettings({ time_limit_seconds: null });
    expect('resources' in buildSubmitRequest(snapshot(), none)).toBe(false);
    const limited = parseOffloadSettings({ time_limit_seconds: 3600 });
    expect(buildSubmitRequest(snapshot(), limited).resources?.time_limit_seconds).toBe(3600);
  });

  it('keeps a cell without outputs as it is', () => {
    const raw = requestCell(cells[3]);
    expect(raw).toEqual(cells[3]);
    expect(raw).not.toBe(cells[3]);
  });
});

describe('confirm', () => {
  it('asks when the setting, the args or a Shift-click say so', () => {
    const off = DEFAULT_OFFLOAD_SETTINGS;
    const on = { ...off, confirm: true };
    expect(shouldConfirm(off)).toBe(false);
    expect(shouldConfirm(on)).toBe(true);
    expect(shouldConfirm(off, { confirm: true })).toBe(true);
    expect(shouldConfirm(on, { confirm: false })).toBe(false);
    expect(shouldConfirm(off, {}, true)).toBe(true);
  });

  it('remembers a Shift-click on the command button, once', () => {
    let now = 1000;
    const t = new ShiftClickTracker('costguard:run-as-job', 1500, () => now);
    const button = { closest: (s: string) => (s === '[data-command="costguard:run-as-job"]' ? {} : null) };
    const other = { closest: () => null };
    t.handleEvent({ shiftKey: true, target: button as any });
    expect(t.consume()).toBe(true);
    expect(t.consume()).toBe(false);
    t.handleEvent({ shiftKey: false, target: button as any });
    expect(t.consume()).toBe(false);
    t.handleEvent({ shiftKey: true, target: button as any });
    t.handleEvent({ shiftKey: true, target: other as any });
    expect(t.consume()).toBe(false);
    t.handleEvent({ shiftKey: true, target: button as any });
    now += 5000;
    expect(t.consume()).toBe(false);
  });

  it('turns the form into the request', () => {
    const request = buildSubmitRequest(snapshot());
    const form = formFromRequest(request);
    expect(form).toEqual({
      gpus: '',
      cpus: '',
      memory_gib: '',
      time_limit_seconds: '', // the dialog pre-fills no time limit (README: none by default)
      retries: '0',
      send: ''
    });
    const ok = applyForm(request, {
      ...form,
      gpus: '1',
      memory_gib: '16.5',
      time_limit_seconds: '3600',
      retries: '2',
      send: 'df, model df'
    });
    expect('request' in ok && ok.request).toEqual(
      expect.objectContaining({
        resources: { gpus: 1, cpus: null, memory_gib: 16.5, time_limit_seconds: 3600 },
        retries: 2,
        send: ['df', 'model']
      })
    );
    const cleared = applyForm(request, { ...form, time_limit_seconds: '' }); // nothing set
    expect('request' in cleared && 'resources' in cleared.request).toBe(false);
    expect(applyForm(request, { ...form, gpus: '1.5' })).toEqual({ error: expect.stringMatching(/GPUs/) });
    expect(applyForm(request, { ...form, cpus: '0' })).toEqual({ error: expect.stringMatching(/CPUs/) });
    expect(applyForm(request, { ...form, retries: '11' })).toEqual({ error: expect.stringMatching(/Retries/) });
    expect(applyForm(request, { ...form, send: 'a-b' })).toEqual({ error: 'Not a variable name: a-b' });
    const noKernel = buildSubmitRequest(snapshot({ kernelId: null }));
    expect(applyForm(noKernel, { ...form, send: 'df' })).toEqual({ error: expect.stringMatching(/kernel/) });
    expect(parseNames(' a,b  c,,a ')).toEqual(['a', 'b', 'c']);
    expect(firstLine('\n\n  x = 1\ny = 2')).toBe('x = 1');
    expect(firstLine('a'.repeat(100), 10)).toBe(`${'a'.repeat(9)}…`);
  });
});

describe('Offloader', () => {
  function setup(confirmWith?: (slice: ISlice, request: ISubmitRequest) => ISubmitRequest | null) {
    const s = new FakeServer();
    s.routes['POST jobs/slice'] = () => ({
      body: { slice, bring_back: ['y'], bring_back_from: 'later_cells', max_send_bytes: 100 }
    });
    s.routes['POST jobs'] = () => ({ status: 201, body: submitted(12) });
    const manager = new FakeNotifier();
    const asked: ISlice[] = [];
    const contexts: IConfirmContext[] = [];
    const shown: number[] = [];
    const tracked: number[] = [];
    const offloader = new Offloader({
      manager,
      serverSettings: s.settings(),
      confirm: async (sl, request, context) => {
        asked.push(sl);
        contexts.push(context);
        return confirmWith ? confirmWith(sl, request) : request;
      },
      showJobs: job => shown.push(job.id),
      submitted: job => tracked.push(job.id)
    });
    return { s, manager, offloader, asked, contexts, shown, tracked };
  }

  it('submits at once with the defaults, then says so with "Show jobs"', async () => {
    const { s, manager, offloader, asked, shown, tracked } = setup();
    const job = await offloader.run(snapshot(), DEFAULT_OFFLOAD_SETTINGS, false);
    expect(job?.id).toBe(12);
    expect(s.requests.map(r => `${r.method} ${r.path}`)).toEqual(['POST jobs']);
    const body = JSON.parse(s.requests[0].body);
    expect(body.selected).toEqual(['c3']);
    expect(body.resources).toBeUndefined(); // no time limit unless asked for
    expect(asked).toEqual([]);
    const note = manager.last()!;
    expect(note.type).toBe('success');
    expect(note.message).toBe('Job 12 submitted: 2 cells (1 selected)');
    manager.click(note, 'Show jobs');
    expect(shown).toEqual([12]);
    expect(tracked).toEqual([12]);
  });

  it('previews the slice and submits what the dialog returns when confirming', async () => {
    const { s, offloader, asked, contexts } = setup((_, request) => ({ ...request, retries: 3 }));
    await offloader.run(snapshot(), DEFAULT_OFFLOAD_SETTINGS, true);
    expect(s.requests.map(r => `${r.method} ${r.path}`)).toEqual(['POST jobs/slice', 'POST jobs']);
    expect(JSON.parse(s.requests[0].body).selected).toEqual(['c3']);
    expect(asked).toEqual([slice]);
    // the dialog is told what the job will bring back, as the server chose it
    expect(contexts).toEqual([{ maxSendBytes: 100, bringBack: { names: ['y'], from: 'later_cells' } }]);
    expect(JSON.parse(s.requests[1].body).retries).toBe(3);
  });

  it('submits nothing when the dialog is cancelled', async () => {
    const { s, offloader, manager } = setup(() => null);
    expect(await offloader.run(snapshot(), DEFAULT_OFFLOAD_SETTINGS, true)).toBeNull();
    expect(s.count('POST', 'jobs')).toBe(0);
    expect(manager.shown).toEqual([]);
  });

  it('warns when no code cell is selected', async () => {
    const { s, offloader, manager } = setup();
    expect(await offloader.run(snapshot({ selected: ['m1'] }), DEFAULT_OFFLOAD_SETTINGS, false)).toBeNull();
    expect(s.requests).toEqual([]);
    expect(manager.last()?.type).toBe('warning');
  });

  it("shows the server's message when it refuses (409, 413) or the slice fails", async () => {
    const { s, offloader, manager, tracked } = setup();
    s.routes['POST jobs'] = () => ({
      status: 409,
      body: { status: 409, message: 'the monthly budget is spent: offloads are refused' }
    });
    expect(await offloader.run(snapshot(), DEFAULT_OFFLOAD_SETTINGS, false)).toBeNull();
    expect(manager.last()).toEqual(
      expect.objectContaining({
        type: 'error',
        message: 'Could not submit the batch job: the monthly budget is spent: offloads are refused'
      })
    );
    s.routes['POST jobs'] = () => ({ status: 413, body: { message: 'df is 3 GiB; at most 1 GiB may be sent' } });
    await offloader.run(snapshot(), DEFAULT_OFFLOAD_SETTINGS, false);
    expect(manager.last()?.message).toBe('Could not submit the batch job: df is 3 GiB; at most 1 GiB may be sent');
    s.routes['POST jobs/slice'] = () => ({ status: 400, body: { message: 'cell c3 does not parse' } });
    await offloader.run(snapshot(), DEFAULT_OFFLOAD_SETTINGS, true);
    expect(manager.last()?.message).toBe('Could not prepare the batch job: cell c3 does not parse');
    expect(tracked).toEqual([]);
  });

  it('says what the submitted job is about to cost', () => {
    const estimate = {
      priced: true,
      hourly_price: 0.1,
      max_cost: 0.0167,
      currency: 'USD',
      source: 'catalog',
      detail: 'catalog: aws p4d.24xlarge on-demand'
    };
    expect(submittedMessage({ ...submitted(5), estimate })).toBe(
      'Job 5 submitted: 2 cells (1 selected), about USD 0.10/h on local, at most USD 0.017'
    );
    const unpriced = { ...estimate, priced: false, hourly_price: null, max_cost: null };
    expect(submittedMessage({ ...submitted(5), estimate: unpriced })).toBe(
      'Job 5 submitted: 2 cells (1 selected)'
    );
  });

  it("puts a one-click submit's estimate in the button's tooltip", () => {
    expect(runAsJobCaption(null)).toBe(
      'Run the selected code cells, with the earlier cells they need, as a batch job ' +
        '(Shift-click to review the cells and resources first)'
    );
    const e = { backend: 'local', priced: true, hourly_price: 0.1, max_cost: null, currency: 'USD' };
    expect(runAsJobCaption(e as never)).toBe(
      'Run the selected code cells, with the earlier cells they need, as a batch job: ' +
        'about USD 0.10/h on local (Shift-click to review the cells and resources first)'
    );
    expect(runAsJobCaption({ ...e, priced: false, hourly_price: null } as never)).toContain(
      'as a batch job: not priced on local ('
    );
    expect(defaultEstimateRequest(DEFAULT_OFFLOAD_SETTINGS)).toEqual({ backend: null, resources: null });
    expect(
      defaultEstimateRequest({
        ...DEFAULT_OFFLOAD_SETTINGS,
        backend: 'slurm',
        resources: { ...DEFAULT_OFFLOAD_SETTINGS.resources, gpus: 2 }
      })
    ).toEqual({
      backend: 'slurm',
      resources: { gpus: 2, cpus: null, memory_gib: null, time_limit_seconds: null }
    });
  });

  it('counts the cells of the slice', () => {
    expect(submittedMessage({ ...submitted(4), slice: { cells: [slice.cells[1]], defines: [], unresolved: [] } })).toBe(
      'Job 4 submitted: 1 cell (1 selected)'
    );
  });
});

describe('heavyCells', () => {
  const cell = (id: string, source: string, type = 'code', metadata: object = {}) =>
    ({ id, cell_type: type, source, metadata, outputs: [], execution_count: null }) as unknown as nbformat.ICell;
  const demo = [cell('train-0', '# Training', 'markdown'), cell('train-1', 'for epoch in range(3):\n    pass')];
  const notebook = [
    cell('setup', 'import random'),
    cell('peek', 'print(data[:3])'),
    cell('train', 'weights = fit(rows)'),
    cell('blank', '  \n')
  ];

  it('takes the cell that ran longest, in this page or as JupyterLab recorded it', () => {
    const ran = new Map([['setup', 0.01], ['peek', 0.02], ['train', 6.4]]);
    expect(heavyCells(notebook, ran)).toEqual({ ids: ['train'], why: 'it ran longest (6 s)' });
    const recorded = notebook.map(c =>
      c.id === 'peek'
        ? cell('peek', 'print(data[:3])', 'code', {
            execution: { 'iopub.execute_input': '2026-12-02T08:00:00Z', 'shell.execute_reply': '2026-12-02T08:02:00Z' }
          })
        : c
    );
    // peek has not run in this page; JupyterLab recorded 2 min for it
    expect(heavyCells(recorded, new Map([['setup', 0.01], ['train', 6.4]]))?.ids).toEqual(['peek']);
  });

  it("takes a notebook's only code cell, and guesses nothing among several", () => {
    expect(heavyCells(demo)).toEqual({ ids: ['train-1'], why: 'it is the only code cell' });
    expect(heavyCells(notebook)).toBeNull();
    expect(heavyCells([demo[0]])).toBeNull();
  });
});

describe('CellRunTimes', () => {
  it('times each run from when it could start, not from when it was queued', () => {
    let now = 0;
    const times = new CellRunTimes(() => now);
    const nb = {};
    // "Run all": three cells queued at once, run one after the other
    for (const id of ['a', 'b', 'c']) {
      times.scheduled(nb, id);
    }
    now = 1000;
    times.executed(nb, 'a');
    now = 9000;
    times.executed(nb, 'b');
    now = 9500;
    times.executed(nb, 'c');
    expect(Object.fromEntries(times.seconds)).toEqual({ a: 1, b: 8, c: 0.5 });
    // run again later, alone: from when it was queued
    now = 60_000;
    times.scheduled(nb, 'a');
    now = 63_000;
    times.executed(nb, 'a');
    expect(times.seconds.get('a')).toBe(3);
    // an end without a start (a page opened mid-run) times nothing
    times.executed(nb, 'z');
    expect(times.seconds.has('z')).toBe(false);
  });
});
