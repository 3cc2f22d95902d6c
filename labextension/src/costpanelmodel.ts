/**
 * State of the cost panel: the shared `status`/`notebooks` documents (from
 * CostStatusModel), plus `kernels` and `gpus`, which only the panel needs and
 * which are polled only while the panel is visible. Sorting lives here, so the
 * panel widget only renders rows in the order this model gives.
 */
import type { ServerConnection } from '@jupyterlab/services';

import {
  ICostStatus,
  IGpuList,
  IHubBudget,
  IKernelDoc,
  IKernelList,
  INotebookDoc,
  IOwnerFields,
  requestAPI
} from './api';
import { hubBudgetsOf } from './budgets';
import { formatOwner, ownerOf } from './format';
import { PolledModel } from './polledmodel';
import { clampInterval, DEFAULT_REFRESH_SECONDS } from './settings';
import { ISortState, SortDirection, sortRows, toggleSort } from './sort';
import type { CostStatusModel } from './statusmodel';

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
}

function num(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
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
    value: n => num(n.spend),
    defaultDirection: 'descending',
    numeric: true,
    caption: 'Spent so far, over every kernel that served the notebook'
  },
  {
    key: 'waste',
    label: 'Waste',
    value: n => num(n.waste),
    defaultDirection: 'descending',
    numeric: true,
    caption: 'Spent while holding an idle GPU'
  },
  {
    key: 'spend_rate_per_hour',
    label: 'Rate',
    value: n => num(n.spend_rate_per_hour),
    defaultDirection: 'descending',
    numeric: true,
    caption: 'Current spend rate, per hour'
  },
  {
    key: 'gpu_utilization_percent',
    label: 'GPU',
    value: n => num(n.gpu_utilization_percent),
    defaultDirection: 'descending',
    numeric: true,
    caption: 'GPU utilisation of its kernels'
  },
  {
    key: 'gpu_memory_bytes',
    label: 'GPU mem',
    value: n => num(n.gpu_memory_bytes),
    defaultDirection: 'descending',
    numeric: true,
    caption: 'GPU memory held by its kernels'
  },
  {
    key: 'idle_seconds',
    label: 'Idle',
    value: n => num(n.idle_seconds),
    defaultDirection: 'descending',
    numeric: true,
    caption: 'Time since its kernels were last busy'
  }
];

/** Columns of the kernels table (the actions column is not sortable). */
export const KERNEL_COLUMNS: ReadonlyArray<IColumn<IKernelDoc>> = [
  {
    key: 'name',
    label: 'Kernel',
    value: k => k.name,
    defaultDirection: 'ascending',
    numeric: false
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
    numeric: false
  },
  {
    key: 'spend',
    label: 'Spend',
    value: k => num(k.spend),
    defaultDirection: 'descending',
    numeric: true
  },
  {
    key: 'waste',
    label: 'Waste',
    value: k => num(k.waste),
    defaultDirection: 'descending',
    numeric: true
  },
  {
    key: 'spend_rate_per_hour',
    label: 'Rate',
    value: k => num(k.spend_rate_per_hour),
    defaultDirection: 'descending',
    numeric: true
  },
  {
    key: 'gpu_utilization_percent',
    label: 'GPU',
    value: k => num(k.gpu_utilization_percent),
    defaultDirection: 'descending',
    numeric: true
  },
  {
    key: 'gpu_memory_bytes',
    label: 'GPU mem',
    value: k => num(k.gpu_memory_bytes),
    defaultDirection: 'descending',
    numeric: true
  },
  {
    key: 'idle_seconds',
    label: 'Idle',
    value: k => num(k.idle_seconds),
    defaultDirection: 'descending',
    numeric: true
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

/** Connection state of the panel's own poll. */
export type PanelState = 'idle' | 'loading' | 'ok' | 'offline';

export namespace CostPanelModel {
  export interface IOptions {
    /** The shared model (status, notebooks). */
    data: CostStatusModel;
    /** Server connection settings (defaults to the shared model's). */
    serverSettings?: ServerConnection.ISettings;
    /** Refresh interval in seconds (defaults to the shared model's). */
    refreshInterval?: number;
  }
}

/** `kernels` and `gpus`, as one refresh fetches them. */
interface IPanelAnswer {
  kernels: IKernelList;
  gpus: IGpuList;
}

/**
 * The panel's model. `active` (set by the panel while it is visible) starts
 * and stops the `kernels` + `gpus` poll.
 */
export class CostPanelModel extends PolledModel<IPanelAnswer, PanelState> {
  constructor(options: CostPanelModel.IOptions) {
    super({
      name: 'jupyter-costguard:panel',
      interval: clampInterval(
        options.refreshInterval ??
          options.data.refreshInterval ??
          DEFAULT_REFRESH_SECONDS
      ),
      state: 'idle'
    });
    this._data = options.data;
    this._serverSettings =
      options.serverSettings ?? options.data.serverSettings;
    this._data.changed.connect(this.emitChanged, this);
  }

  /** The shared model. */
  get data(): CostStatusModel {
    return this._data;
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
      this._kernelsSimulated ||
      this._gpus?.simulated === true
    );
  }

  /**
   * Whose server this is under JupyterHub (`alice`, `alice · gpu-large`),
   * from the first document that says; null when not under a hub (or an
   * older server without the fields).
   */
  get owner(): string | null {
    const owner = ownerOf([this._data.status, this._kernelsOwner, this._gpus]);
    return owner ? formatOwner(owner.user, owner.server) : null;
  }

  /**
   * The JupyterHub budgets of this server, in display order (the user's own,
   * then the groups' by name); `[]` outside a hub or from an older server.
   */
  get hubBudgets(): IHubBudget[] {
    return hubBudgetsOf(this._data.status);
  }

  /** Running kernels (from the panel's poll). */
  get kernels(): ReadonlyArray<IKernelDoc> {
    return this._kernels;
  }

  /** GPUs (from the panel's poll), or null before the first response. */
  get gpus(): IGpuList | null {
    return this._gpus;
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
    this.emitChanged();
  }

  /** Notebooks in display order. */
  get notebookRows(): INotebookDoc[] {
    return sortNotebooks(this._data.notebooks, this._notebookSort);
  }

  /** Kernels in display order. */
  get kernelRows(): IKernelDoc[] {
    return sortKernels(this._kernels, this._kernelSort);
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
    this.emitChanged();
  }

  /** Whether the panel is visible: polls `kernels` and `gpus` only then. */
  get active(): boolean {
    return this.isRunning;
  }
  set active(value: boolean) {
    if (value) {
      this.start();
    } else {
      this.stop();
    }
  }

  /** Refresh interval in seconds. */
  get refreshInterval(): number {
    return this.interval;
  }
  set refreshInterval(seconds: number) {
    this.setInterval(clampInterval(seconds));
  }

  dispose(): void {
    if (!this.isDisposed) {
      this._data.changed.disconnect(this.emitChanged, this);
    }
    super.dispose();
  }

  /** `GET kernels` and `GET gpus`, together. */
  protected async fetch(): Promise<IPanelAnswer> {
    const [kernels, gpus] = await Promise.all([
      requestAPI<IKernelList>('kernels', { method: 'GET' }, this._serverSettings),
      requestAPI<IGpuList>('gpus', { method: 'GET' }, this._serverSettings)
    ]);
    return { kernels, gpus };
  }

  protected apply({ kernels, gpus }: IPanelAnswer): void {
    this._kernels = Array.isArray(kernels?.kernels) ? kernels.kernels : [];
    this._kernelsSimulated = kernels?.simulated === true;
    this._kernelsOwner = kernels
      ? { user: kernels.user ?? null, server: kernels.server ?? null }
      : null;
    this._gpus = gpus && Array.isArray(gpus.gpus) ? gpus : null;
    this.emitChanged();
  }

  private _data: CostStatusModel;
  private _gpus: IGpuList | null = null;
  private _highlight: string | null = null;
  private _kernels: IKernelDoc[] = [];
  private _kernelsOwner: IOwnerFields | null = null;
  private _kernelsSimulated = false;
  private _kernelSort: ISortState = { ...DEFAULT_SORT };
  private _notebookSort: ISortState = { ...DEFAULT_SORT };
  private _serverSettings: ServerConnection.ISettings;
}
