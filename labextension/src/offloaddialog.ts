/**
 * Body of the "Run as batch job" confirm dialog: the slice (each cell the job
 * runs, named as the notebook shows it: its execution count `[n]` (`[ ]` when
 * never run) and first line, then why, and how long it took when it last ran;
 * the selected ones marked), what the slicer could not decide, the names it
 * leaves unresolved, what the job brings back (the server's choice, the one
 * the submit makes) and what stays in it, and editable resources. An earlier cell
 * whose values live in the kernel and are small enough offers "send instead
 * of re-running": ticking it sends them by value and asks the server for the
 * slice again (`reslice`), so the cell, and what only it needed, drop out.
 * `getValue()` returns the typed form; `applyForm` (offloadmodel.ts) checks it.
 *
 * DOM hooks: `.jp-costguard-offload-dialog`, `.jp-costguard-slice-cell[data-cell-id][data-selected]`
 * (fields `[data-field=prompt|reason|source]`; the prompt's title gives the position), `.jp-costguard-slice-unresolved`,
 * `.jp-costguard-slice-brings-back[data-names]` (what comes back),
 * `.jp-costguard-slice-stays[data-names]` (what stays in the job),
 * `.jp-costguard-slice-warnings li`, a cell's
 * `[data-field=last-run]`, its `input.jp-costguard-slice-send[data-names]`
 * (send instead), `.jp-costguard-slice-sent li[data-name]` with its
 * `button.jp-costguard-slice-unsend`, `.jp-costguard-slice-cost` (what
 * re-running the earlier cells took), inputs
 * `input[name=gpus|cpus|memory_gib|time_limit_seconds|retries|send]`,
 * `.jp-costguard-offload-estimate[data-state=loading|ok|error]` (what the job
 * will cost: fields `[data-field=price|most|source|cap|error]`), asked again
 * as the resources change; it never blocks the submit.
 */
import { Widget } from '@lumino/widgets';

import { el, setText } from './dom';
import { estimateRequest, EstimateModel, estimateText } from './estimatemodel';
import type { ISlice, ISliceCell, ISlicePreview, ISubmitRequest } from './jobsapi';
import { formatBytes, formatDuration } from './format';
import { applyForm, firstLine, formFromRequest, IOffloadForm } from './offloadform';
import { bringBackOf, IBringBack } from './offloadmodel';
import { ISendOffer, lastRunTimes, sendOffers } from './sendoffer';

/**
 * The prompt JupyterLab shows left of a code cell: `[3]` after its third run,
 * `[ ]` when it has not run (or the count is unknown). Positions are not shown:
 * they are not on screen, so the user cannot match them to cells.
 */
export function cellPrompt(executionCount: unknown): string {
  return typeof executionCount === 'number' && Number.isInteger(executionCount) && executionCount > 0
    ? `[${executionCount}]`
    : '[ ]';
}

/** Each request cell's execution count, by cell id. */
function executionCounts(request: ISubmitRequest): Map<string, unknown> {
  const counts = new Map<string, unknown>();
  for (const cell of Array.isArray(request.cells) ? request.cells : []) {
    const id = (cell as { id?: unknown }).id;
    if (typeof id === 'string') {
      counts.set(id, (cell as { execution_count?: unknown }).execution_count);
    }
  }
  return counts;
}

/** Fields of the form: name, label, placeholder, tooltip. */
const FIELDS: ReadonlyArray<[keyof IOffloadForm, string, string, string]> = [
  ['gpus', 'GPUs', 'backend default', 'Whole number of GPUs; empty for the backend\'s default'],
  ['cpus', 'CPUs', 'backend default', 'CPU cores; empty for the backend\'s default'],
  ['memory_gib', 'Memory (GiB)', 'backend default', 'Memory in GiB; empty for the backend\'s default'],
  ['time_limit_seconds', 'Time limit (s)', 'none', 'Stop the job after this many seconds; empty for none'],
  ['retries', 'Retries', '0', 'Attempts after the first one fails (0 to 10)'],
  [
    'send',
    'Send variables',
    'e.g. df, model',
    'Variables of the notebook\'s kernel to send to the job by value (comma-separated)'
  ]
];

/** "The job runs 3 cells: 1 selected and 2 cells before it that it needs." */
export function sliceSummary(total: number, selected: number): string {
  const earlier = total - selected;
  const cells = (n: number): string => `${n} ${n === 1 ? 'cell' : 'cells'}`;
  if (earlier <= 0) {
    return `The job runs the ${selected === 1 ? 'selected cell' : `${selected} selected cells`} alone.`;
  }
  return `The job runs ${cells(total)}: ${selected} selected and ${cells(earlier)} before ${
    selected === 1 ? 'it' : 'them'
  } that ${selected === 1 ? 'it needs' : 'they need'}.`;
}

export namespace OffloadDialogBody {
  export interface IOptions {
    /** The kernel's values by name: estimated bytes, null when not sendable. */
    sizes?: ReadonlyMap<string, number | null> | null;
    /** The largest pickle of sent variables the server accepts. */
    maxSendBytes?: number | null;
    /** What the job will bring back (the preview's; null: not said). */
    bringBack?: IBringBack | null;
    /** The preview again, with `send` sent by value instead of re-run. */
    reslice?: (send: string[]) => Promise<ISlicePreview>;
    /** What the job will cost (asked for the form's resources as they change). */
    estimate?: EstimateModel | null;
  }
}

/** Seconds as the dialog says them ("12 s", "3 min 20 s"). */
function took(seconds: number): string {
  if (seconds < 1) {
    return `${seconds.toFixed(1)} s`;
  }
  if (seconds < 3600 && seconds >= 60) {
    const s = Math.floor(seconds % 60);
    return `${Math.floor(seconds / 60)} min${s ? ` ${s} s` : ''}`;
  }
  return formatDuration(seconds);
}

/** "a, b and c". */
function names(list: ReadonlyArray<string>): string {
  return list.length > 1 ? `${list.slice(0, -1).join(', ')} and ${list[list.length - 1]}` : list[0] ?? '';
}

/** What the dialog says comes back from the job, and what stays in it. */
export interface IBringBackText {
  back: string;
  backNames: string[];
  /** null when every name the selected cells define comes back. */
  stays: string | null;
  stayNames: string[];
}

/**
 * What comes back (`bringBack`: the server's choice, the one the submit
 * makes) and what the selected cells define that stays in the job.
 */
export function bringBackText(defines: ReadonlyArray<string>, bringBack: IBringBack | null): IBringBackText {
  if (!bringBack) {
    // A server that does not say: it brings back what later cells read, or all when none follows.
    return {
      back: defines.length
        ? `Brings back those of ${names(defines)} that later cells read.`
        : 'Brings back nothing: the selected cells define no variables.',
      backNames: [],
      stays: null,
      stayNames: []
    };
  }
  const back = bringBack.names;
  const stayNames = defines.filter(n => !back.includes(n));
  const them = (list: ReadonlyArray<string>): string => (list.length === 1 ? 'it' : 'them');
  let text: string;
  if (!back.length) {
    text = defines.length
      ? 'Brings back nothing: no later cell reads what the selected cells define.'
      : 'Brings back nothing: the selected cells define no variables.';
  } else if (bringBack.from === 'later_cells') {
    text = `Brings back ${names(back)}: later cells read ${them(back)}.`;
  } else if (bringBack.from === 'selected_cells') {
    text = `Brings back all the selected cells define, ${names(back)}: no code cell follows them to say which names matter.`;
  } else {
    text = `Brings back ${names(back)}, as asked.`;
  }
  let stays: string | null = null;
  if (stayNames.length && back.length) {
    stays =
      bringBack.from === 'later_cells'
        ? `Stays in the job: ${names(stayNames)} (no later cell reads ${them(stayNames)}).`
        : `Stays in the job: ${names(stayNames)}.`;
  } else if (stayNames.length) {
    stays = `Stays in the job: ${names(stayNames)}.`;
  }
  return { back: text, backNames: [...back], stays, stayNames };
}

/** "Brings back …" and "Stays in the job: …", each naming its names in `data-names`. */
function bringBackNotes(slice: ISlice, bringBack: IBringBack | null): HTMLElement[] {
  const defines = Array.isArray(slice.defines) ? slice.defines : [];
  const text = bringBackText(defines, bringBack);
  const back = el('p', 'jp-costguard-slice-brings-back', text.back);
  back.dataset.names = text.backNames.join(',');
  back.title =
    'Pickled back when the job ends: Load results (or %costguard fetch) puts them in your kernel';
  const notes = [back];
  if (text.stays) {
    const stays = el('p', 'jp-costguard-slice-stays', text.stays);
    stays.dataset.names = text.stayNames.join(',');
    stays.title = 'Names the selected cells define that the job does not bring back';
    notes.push(stays);
  }
  return notes;
}

/** What the slicer could not decide, what no cell defines, what the job brings back. */
function sliceNotes(slice: ISlice, bringBack: IBringBack | null): HTMLElement[] {
  const notes: HTMLElement[] = [];
  const warnings = Array.isArray(slice.warnings) ? slice.warnings : [];
  if (warnings.length) {
    const box = el('div', 'jp-costguard-slice-warnings');
    box.appendChild(el('p', '', 'The slicer could not decide everything; check these before submitting:'));
    const ul = el('ul');
    for (const warning of warnings) {
      ul.appendChild(el('li', '', warning));
    }
    box.appendChild(ul);
    notes.push(box);
  }
  const unresolved = Array.isArray(slice.unresolved) ? slice.unresolved : [];
  if (unresolved.length) {
    notes.push(
      el(
        'p',
        'jp-costguard-slice-unresolved',
        `No cell defines ${unresolved.join(', ')}: send ${
          unresolved.length === 1 ? 'it' : 'them'
        } from the kernel below, or the job may fail.`
      )
    );
  }
  notes.push(...bringBackNotes(slice, bringBack));
  return notes;
}

/** The dialog body. */
export class OffloadDialogBody extends Widget {
  constructor(slice: ISlice, request: ISubmitRequest, options: OffloadDialogBody.IOptions = {}) {
    super();
    this.addClass('jp-costguard-offload-dialog');
    this._request = request;
    this._options = options;
    this._slice = slice;
    this._bringBack = options.bringBack ?? null;
    this._sliceNode = el('div', 'jp-costguard-slice-view');
    this.node.appendChild(this._sliceNode);
    this._renderSlice();
    this._estimateNode = el('div', 'jp-costguard-offload-estimate');
    this._estimateNode.dataset.state = 'idle';
    this._estimateNode.hidden = !options.estimate;
    this.node.appendChild(this._estimateNode);
    this._buildForm(request);
    const model = options.estimate;
    if (model) {
      model.changed.connect(this._renderEstimate, this);
      this._form.addEventListener('input', () => this._askEstimate(false));
      this._askEstimate(true);
    }
  }

  dispose(): void {
    this._options.estimate?.changed.disconnect(this._renderEstimate, this);
    super.dispose();
  }

  /** Ask for the estimate of the form as typed (a form with an error keeps the last one). */
  private _askEstimate(now: boolean): void {
    const applied = applyForm(this._request, { ...this.getValue(), send: '' });
    if ('request' in applied) {
      this._options.estimate?.request(estimateRequest(applied.request), now);
    }
  }

  /** What the job will cost, or that it is being asked, or why it could not be. */
  private _renderEstimate(model: EstimateModel): void {
    const node = this._estimateNode;
    node.dataset.state = model.state;
    node.textContent = '';
    const line = (field: string, text: string, className = ''): void => {
      const p = el('p', className, text);
      p.dataset.field = field;
      node.appendChild(p);
    };
    if (model.state === 'loading') {
      line('price', 'Estimating what the job will cost…');
    } else if (model.state === 'error') {
      line('error', `Could not estimate the cost: ${model.error ?? 'no answer'}`);
    }
    const estimate = model.estimate;
    if (model.state !== 'ok' || !estimate) {
      return;
    }
    const text = estimateText(estimate);
    line('price', text.price, 'jp-costguard-offload-estimate-price');
    if (text.most) {
      line('most', text.most);
    }
    line('source', text.source, 'jp-costguard-offload-estimate-source');
    if (text.cap) {
      line('cap', text.cap);
      node.dataset.aboveCap = estimate.above_cap ? 'true' : 'false';
    }
    for (const note of text.notes) {
      line('note', note);
    }
  }

  /** The slice shown (after any "send instead"). */
  get slice(): ISlice {
    return this._slice;
  }

  /** The names sent instead of re-run, in the order ticked. */
  get sent(): ReadonlyArray<string> {
    return this._sent;
  }

  /** The form as typed. */
  getValue(): IOffloadForm {
    const value = {} as IOffloadForm;
    for (const [name] of FIELDS) {
      value[name] = this._inputs.get(name)?.value ?? '';
    }
    return value;
  }

  /** Send `names` by value (or stop sending them) and show the slice that leaves. */
  async setSent(names: ReadonlyArray<string>): Promise<void> {
    const reslice = this._options.reslice;
    if (!reslice) {
      return;
    }
    const next = names.filter((n, i) => names.indexOf(n) === i);
    const ticket = ++this._ticket;
    this._sliceNode.dataset.state = 'loading';
    try {
      const preview = await reslice(next);
      if (ticket !== this._ticket || this.isDisposed) {
        return;
      }
      this._syncSendField(this._sent, next);
      this._sent = next;
      this._slice = preview.slice;
      this._bringBack = bringBackOf(preview) ?? this._bringBack;
      this._renderSlice();
    } catch (reason) {
      if (ticket === this._ticket && !this.isDisposed) {
        this._sliceNode.dataset.state = 'error';
        this._error.hidden = false;
        setText(this._error, `Could not slice again: ${String((reason as Error)?.message ?? reason)}`);
      }
    }
  }

  private _sizeOf(names: ReadonlyArray<string>): number {
    const sizes = this._options.sizes;
    return names.reduce((sum, n) => sum + (sizes?.get(n) ?? 0), 0);
  }

  private _renderSlice(): void {
    const node = this._sliceNode;
    node.textContent = '';
    node.dataset.state = 'ok';
    const slice = this._slice;
    const cells = Array.isArray(slice.cells) ? slice.cells : [];
    const selected = cells.filter(c => c.selected).length;
    node.appendChild(
      el('p', 'jp-costguard-slice-summary', sliceSummary(cells.length, selected))
    );
    const counts = executionCounts(this._request);
    const times = lastRunTimes(slice, Array.isArray(this._request.cells) ? this._request.cells : []);
    const sizes = this._options.sizes;
    const offers = new Map(
      sizes
        ? sendOffers(slice, sizes, this._options.maxSendBytes ?? null, this._sizeOf(this._sent)).map(
            o => [o.cellId, o]
          )
        : []
    );
    const list = el('ol', 'jp-costguard-slice');
    let earlierSeconds = 0;
    let earlierTimed = 0;
    for (const cell of cells) {
      const seconds = times.get(cell.cell_id);
      list.appendChild(this._sliceItem(cell, counts.get(cell.cell_id), seconds, offers.get(cell.cell_id)));
      if (seconds !== undefined && !cell.selected) {
        earlierSeconds += seconds;
        earlierTimed++;
      }
    }
    node.appendChild(list);

    if (earlierTimed > 0) {
      node.appendChild(
        el(
          'p',
          'jp-costguard-slice-cost',
          `Re-running the earlier cells took ${took(earlierSeconds)} when they last ran` +
            (earlierTimed < cells.filter(c => !c.selected).length ? ' (those with a recorded time).' : '.')
        )
      );
    }
    if (this._sent.length) {
      node.appendChild(this._sentList());
    }
    for (const note of sliceNotes(slice, this._bringBack)) {
      node.appendChild(note);
    }
    this._error = el('p', 'jp-costguard-slice-error');
    this._error.hidden = true;
    node.appendChild(this._error);
  }

  /** One cell of the slice: prompt, first line, why, how long it took, the offer to send. */
  private _sliceItem(
    cell: ISliceCell,
    count: unknown,
    seconds: number | undefined,
    offer: ISendOffer | undefined
  ): HTMLLIElement {
    const item = el('li', 'jp-costguard-slice-cell');
    item.dataset.cellId = cell.cell_id;
    item.dataset.selected = cell.selected ? 'true' : 'false';
    const prompt = el('span', 'jp-costguard-slice-prompt', cellPrompt(count));
    prompt.dataset.field = 'prompt';
    prompt.title =
      cellPrompt(count) === '[ ]'
        ? `Not run yet in this kernel (cell ${cell.index + 1} of the notebook)`
        : `Last run as ${cellPrompt(count)} (cell ${cell.index + 1} of the notebook)`;
    item.appendChild(prompt);
    const source = el('code', 'jp-costguard-slice-source', firstLine(cell.source));
    source.dataset.field = 'source';
    source.title = cell.source;
    item.appendChild(source);
    if (cell.selected) {
      item.appendChild(el('span', 'jp-costguard-slice-selected', 'selected'));
    }
    // A selected cell's reason is "selected": the badge says it already.
    const reason = el(
      'span',
      'jp-costguard-slice-reason',
      cell.selected && cell.reason === 'selected' ? '' : cell.reason
    );
    reason.dataset.field = 'reason';
    reason.title = cell.reason;
    item.appendChild(reason);
    if (seconds !== undefined) {
      const last = el('span', 'jp-costguard-slice-last-run', `took ${took(seconds)}`);
      last.dataset.field = 'last-run';
      last.title = 'How long the cell took when it last ran (JupyterLab\'s recorded timing)';
      item.appendChild(last);
    }
    if (offer) {
      item.appendChild(this._sendOffer(offer));
    }
    return item;
  }

  /** "send x (1 MiB) from the kernel instead of re-running", a checkbox. */
  private _sendOffer(offer: ISendOffer): HTMLLabelElement {
    const label = el('label', 'jp-costguard-slice-send-offer');
    const box = el('input', 'jp-costguard-slice-send');
    box.type = 'checkbox';
    box.dataset.names = offer.names.join(',');
    box.addEventListener('change', () => {
      if (box.checked) {
        void this.setSent([...this._sent, ...offer.names]);
      }
    });
    label.appendChild(box);
    label.appendChild(
      document.createTextNode(
        ` send ${offer.names.join(', ')} (${formatBytes(offer.bytes)}) from the kernel instead of re-running`
      )
    );
    label.title =
      'Pickle the value from your kernel into the job, so this cell (and what only it needed) does not run again';
    return label;
  }

  /** The names sent from the kernel, each with "re-run instead". */
  private _sentList(): HTMLElement {
    const sent = el('div', 'jp-costguard-slice-sent');
    sent.appendChild(
      el('span', 'jp-costguard-slice-sent-label', `Sent from the kernel (${formatBytes(this._sizeOf(this._sent))}):`)
    );
    const ul = el('ul');
    for (const name of this._sent) {
      const li = el('li');
      li.dataset.name = name;
      li.appendChild(el('code', '', name));
      const undo = el('button', 'jp-costguard-button jp-costguard-slice-unsend', 're-run instead');
      undo.type = 'button';
      undo.addEventListener('click', () => {
        void this.setSent(this._sent.filter(n => n !== name));
      });
      li.appendChild(undo);
      ul.appendChild(li);
    }
    sent.appendChild(ul);
    return sent;
  }

  /** Keep the form's "Send variables" in step with what was ticked. */
  private _syncSendField(before: ReadonlyArray<string>, after: ReadonlyArray<string>): void {
    const input = this._inputs.get('send');
    if (!input) {
      return;
    }
    const typed = input.value
      .split(',')
      .map(n => n.trim())
      .filter(n => n && !before.includes(n));
    const names = [...typed, ...after.filter(n => !typed.includes(n))];
    input.value = names.join(', ');
  }

  private _buildForm(request: ISubmitRequest): void {
    const form = (this._form = el('div', 'jp-costguard-offload-form'));
    const values = formFromRequest(request);
    for (const [name, label, placeholder, caption] of FIELDS) {
      const field = el('label', 'jp-costguard-offload-field');
      field.title = caption;
      field.appendChild(el('span', 'jp-costguard-offload-field-label', label));
      const input = el('input', 'jp-mod-styled');
      input.name = name;
      input.type = 'text';
      input.value = values[name];
      input.placeholder = placeholder;
      if (name === 'send' && !request.kernel_id) {
        input.disabled = true;
        input.placeholder = 'needs a running kernel';
      }
      if (name !== 'send') {
        input.inputMode = 'decimal';
      }
      this._inputs.set(name, input);
      field.appendChild(input);
      form.appendChild(field);
    }
    this.node.appendChild(form);
  }

  private _bringBack: IBringBack | null;
  private _error!: HTMLElement;
  private _estimateNode: HTMLElement;
  private _form!: HTMLElement;
  private _inputs = new Map<keyof IOffloadForm, HTMLInputElement>();
  private _options: OffloadDialogBody.IOptions;
  private _request: ISubmitRequest;
  private _sent: string[] = [];
  private _slice: ISlice;
  private _sliceNode: HTMLElement;
  private _ticket = 0;
}
