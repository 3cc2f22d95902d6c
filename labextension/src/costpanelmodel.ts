/**
 * State of the cost panel: the shared model's documents (CostStatusModel),
 * `status` and `notebooks` always and `kernels` and `gpus`, which only the
 * panel needs, asked for while the panel is visible. They all come from one
 * poll, of one sample, so the panel's tables always agree with each other
 * (and with the status bar). Sorting lives here, so the panel widget only
 * renders rows in the order this model gives.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { Disposable } from './disposable';
import type {
  ICostStatus,
  IGpuList,
  IHubBudget,
  IKernelDoc,
  INotebookDoc
} from './api';
import { hubBudgetsOf } from './budgets';
import { formatOwner, ownerOf } from './format';
import { ISortState, SortDirection, sortRows, toggleSort } from './sort';
import type { CostStatusModel } from './statusmodel';
import { finiteOrNull } from './values';

/** A sortable column of one of the panel's tables. */
export interface IColumn<T> {
  /** Stable key (`data-key` of the header and of the cells). */
  key: string;
  label: string;
  /** Value sorted on (numbers numerically, strings naturally, null last). */
  value: (row: T) => string | number | null | undefined;
  /** Direction of a first click on the header. */
  defaultDirection: SortDirection;
  /** Right-align numbers. */
  numeric: boolean;
  /** Header tooltip. */
  caption?: string;
  /**
   * Hidden when the panel is narrow (JupyterLab's default sidebar width):
   * its figure moves to the row's detail line (`rowDetail`).
   */
  secondary?: boolean;
}

/**
 * The detail line of a row in a narrow panel: the secondary columns' texts,
 * numbers after their column's label ("Waste USD 0.01"), words alone ("idle").
 */
export function rowDetail<T>(
  columns: ReadonlyArray<IColumn<T>>,
  text: (key: string) => string
): string {
  return columns
    .filter(c => c.secondary)
    .map(c => {
      const value = text(c.key);
      return c.numeric ? `${c.label} ${value}` : value;
    })
    .filter(part => part.trim() !== '')
    .join(' · ');
}

/** Columns of the notebooks table (the sparkline column is not sortable). */
export const NOTEBOOK_COLUMNS: ReadonlyArray<IColumn<INotebookDoc>> = [
  {
    key: 'path',
    label: 'Notebook',
    value: n => n.path,
    defaultDirection: 'ascending',
    numeric: false
  },
  {
    key: 'spend',
    label: 'Spend',
    value: n => finiteOrNull(n.spend),
    defaultDirection: 'descending',
    numeric: true,
    caption: 'Spent so far, over every kernel that served the notebook'
  },
  {
    key: 'waste',
    label: 'Waste',
    value: n => finiteOrNull(n.waste),
    defaultDirection: 'descending',
    numeric: true,
    caption: 'Spent while holding an idle GPU',
    secondary: true
  },
  {
    key: 'spend_rate_per_hour',
    label: 'Rate',
    value: n => finiteOrNull(n.spend_rate_per_hour),
    defaultDirection: 'descending',
    numeric: true,
    caption: 'Current spend rate, per hour'
  },
  {
    key: 'gpu_utilization_percent',
    label: 'GPU',
    value: n => finiteOrNull(n.gpu_utilization_percent),
    defaultDirection: 'descending',
    numeric: true,
    caption: 'GPU utilisation of its kernels',
    secondary: true
  },
  {
    key: 'gpu_memory_bytes',
    label: 'GPU mem',
    value: n => finiteOrNull(n.gpu_memory_bytes),
    defaultDirection: 'descending',
    numeric: true,
    caption: 'GPU memory held by its kernels',
    secondary: true
  },
  {
    key: 'idle_seconds',
    label: 'Idle',
    value: n => finiteOrNull(n.idle_seconds),
    defaultDirection: 'descending',
    numeric: true,
    caption: 'Time since its kernels were last busy',
    secondary: true
  }
];

/** Columns of the kernels table (the actions column is not sortable). */
export const KERNEL_COLUMNS: ReadonlyArray<IColumn<IKernelDoc>> = [
  {
    key: 'name',
    label: 'Kernel',
    value: k => k.name,
    defaultDirection: 'ascending',
    numeric: false,
    secondary: true
  },
  {
    key: 'notebook',
    label: 'Notebook',
    value: k => k.notebook,
    defaultDirection: 'ascending',
    numeric: false
  },
  {
    key: 'execution_state',
    label: 'State',
    value: k => k.execution_state,
    defaultDirection: 'ascending',
    numeric: false,
    secondary: true
  },
  {
    key: 'spend',
    label: 'Spend',
    value: k => finiteOrNull(k.spend),
    defaultDirection: 'descending',
    numeric: true
  },
  {
    key: 'waste',
    label: 'Waste',
    value: k => finiteOrNull(k.waste),
    defaultDirection: 'descending',
    numeric: true,
    secondary: true
  },
  {
    key: 'spend_rate_per_hour',
    label: 'Rate',
    value: k => finiteOrNull(k.spend_rate_per_hour),
    defaultDirection: 'descending',
    numeric: true,
    secondary: true
  },
  {
    key: 'gpu_utilization_percent',
    label: 'GPU',
    value: k => finiteOrNull(k.gpu_utilization_percent),
    defaultDirection: 'descending',
    numeric: true,
    secondary: true
  },
  {
    key: 'gpu_memory_bytes',
    label: 'GPU mem',
    value: k => finiteOrNull(k.gpu_memory_bytes),
    defaultDirection: 'descending',
    numeric: true,
    secondary: true
  },
  {
    key: 'idle_seconds',
    label: 'Idle',
    value: k => finiteOrNull(k.idle_seconds),
    defaultDirection: 'descending',
    numeric: true,
    secondary: true
  }
];

/** The two sortable tables. */
export type PanelTable = 'notebooks' | 'kernels';

/** Default sort of both tables: most expensive first. */
export const DEFAULT_SORT: ISortState = { key: 'spend', direction: 'descending' };

/**
 * Rows sorted on the column of `state.key` (the spend column when there is
 * none such), ties broken by `id`.
 */
function sortTable<T>(
  rows: ReadonlyArray<T>,
  state: ISortState,
  columns: ReadonlyArray<IColumn<T>>,
  id: (row: T) => string
): T[] {
  const column =
    columns.find(c => c.key === state.key) ??
    columns.find(c => c.key === DEFAULT_SORT.key)!;
  return sortRows(
    rows,
    { key: column.key, direction: state.direction },
    row => column.value(row),
    id
  );
}

/** Sort notebooks by a column key (ties by path). */
export function sortNotebooks(
  notebooks: ReadonlyArray<INotebookDoc>,
  state: ISortState
): INotebookDoc[] {
  return sortTable(notebooks, state, NOTEBOOK_COLUMNS, n => n.path);
}

/** Sort kernels by a column key (ties by kernel id). */
export function sortKernels(
  kernels: ReadonlyArray<IKernelDoc>,
  state: ISortState
): IKernelDoc[] {
  return sortTable(kernels, state, KERNEL_COLUMNS, k => k.kernel_id);
}

/** What the panel shows: `idle` while hidden, then the shared poll's state. */
export type PanelState = 'idle' | 'loading' | 'ok' | 'offline';

export namespace CostPanelModel {
  export interface IOptions {
    /** The shared model (status, notebooks, and kernels + gpus when asked for). */
    data: CostStatusModel;
  }
}

/**
 * The panel's model. `active` (set by the panel while it is visible) asks
 * the shared model for `kernels` and `gpus` with each of its refreshes.
 */
export class CostPanelModel extends Disposable {
  constructor(options: CostPanelModel.IOptions) {
    super();
    this._data = options.data;
    this._data.changed.connect(this._emit, this);
  }

  /** Emitted whenever anything the panel shows changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /**
   * `idle` while hidden; `loading` until the first `kernels` answer; then the
   * shared poll's state.
   */
  get state(): PanelState {
    if (!this._active) {
      return 'idle';
    }
    const state = this._data.state;
    if (state === 'offline') {
      return 'offline';
    }
    return this._data.kernelList === null ? 'loading' : state;
  }

  /** The shared model. */
  get data(): CostStatusModel {
    return this._data;
  }

  /**
   * The waste hibernating removed, over this owner's kept snapshots, as
   * `GET snapshots` says it (`waste_avoided`: the server's one rule), in its
   * currency; null while not known (no hibernation on this server).
   */
  get wasteRemoved(): { value: number; currency: string } | null {
    const list = this._data.snapshotList;
    const value = finiteOrNull(list?.waste_avoided);
    return list && value !== null ? { value, currency: list.currency || this.currency } : null;
  }

  /** The latest `status` (from the shared model). */
  get status(): ICostStatus | null {
    return this._data.status;
  }

  /** Currency of the figures. */
  get currency(): string {
    return this._data.status?.currency || 'USD';
  }

  /** Whether any figure shown comes from a replayed trace. */
  get simulated(): boolean {
    return (
      this._data.status?.simulated === true ||
      this._data.notebooksSimulated ||
      this._data.kernelList?.simulated === true ||
      this._data.gpuList?.simulated === true
    );
  }

  /**
   * Whose server this is under JupyterHub (`alice`, `alice · gpu-large`),
   * from the first document that says; null when not under a hub (or an
   * older server without the fields).
   */
  get owner(): string | null {
    const owner = ownerOf([this._data.status, this._data.kernelList, this._data.gpuList]);
    return owner ? formatOwner(owner.user, owner.server) : null;
  }

  /**
   * The JupyterHub budgets of this server, in display order (the user's own,
   * then the groups' by name); `[]` outside a hub or from an older server.
   */
  get hubBudgets(): IHubBudget[] {
    return hubBudgetsOf(this._data.status);
  }

  /** Running kernels (of the same sample as the notebooks). */
  get kernels(): ReadonlyArray<IKernelDoc> {
    return this._data.kernelList?.kernels ?? [];
  }

  /** GPUs (of the same sample), or null before the first response. */
  get gpus(): IGpuList | null {
    return this._data.gpuList;
  }

  /** Sort state of a table. */
  sortState(table: PanelTable): ISortState {
    return table === 'notebooks' ? this._notebookSort : this._kernelSort;
  }

  /** Click on a header: sort by `key`, flipping direction on the same key. */
  sortBy(table: PanelTable, key: string): void {
    const columns: ReadonlyArray<IColumn<any>> =
      table === 'notebooks' ? NOTEBOOK_COLUMNS : KERNEL_COLUMNS;
    const column = columns.find(c => c.key === key);
    if (!column) {
      return;
    }
    const next = toggleSort(this.sortState(table), key, column.defaultDirection);
    if (table === 'notebooks') {
      this._notebookSort = next;
    } else {
      this._kernelSort = next;
    }
    this._emit();
  }

  /** Notebooks in display order. */
  get notebookRows(): INotebookDoc[] {
    return sortNotebooks(this._data.notebooks, this._notebookSort);
  }

  /** Kernels in display order. */
  get kernelRows(): IKernelDoc[] {
    return sortKernels(this.kernels, this._kernelSort);
  }

  /** A notebook to highlight (e.g. the one an alert was about), or null. */
  get highlightPath(): string | null {
    return this._highlight;
  }
  set highlightPath(path: string | null) {
    if (path === this._highlight) {
      return;
    }
    this._highlight = path;
    this._emit();
  }

  /** Whether the panel is visible: `kernels` and `gpus` are fetched only then. */
  get active(): boolean {
    return this._active;
  }
  set active(value: boolean) {
    if (value === this._active || this.isDisposed) {
      return;
    }
    this._active = value;
    this._data.requestDetail(this, value);
    this._emit();
  }

  protected onDispose(): void {
    this._data.requestDetail(this, false);
    this._data.changed.disconnect(this._emit, this);
    Signal.clearData(this);
  }

  private _emit(): void {
    if (!this.isDisposed) {
      this._changed.emit();
    }
  }

  private _active = false;
  private _changed = new Signal<this, void>(this);
  private _data: CostStatusModel;
  private _highlight: string | null = null;
  private _kernelSort: ISortState = { ...DEFAULT_SORT };
  private _notebookSort: ISortState = { ...DEFAULT_SORT };
}
