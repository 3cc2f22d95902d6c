/**
 * The service the `jupyter-costguard:status` plugin provides to the other
 * costguard plugins: the shared model and the extension's settings.
 */
import { ServerConnection } from '@jupyterlab/services';
import { Token } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

import type { JobsModel } from './jobsmodel';
import type { CostStatusModel } from './statusmodel';
import { DEFAULT_SETTINGS, ICostguardSettings } from './settings';

/** Shared costguard state. */
export interface ICostguard {
  /** `status` + `notebooks` and `alerts`, polled; the active notebook. */
  readonly model: CostStatusModel;
  /** Current settings (`jupyter-costguard:status`), defaults until loaded. */
  readonly settings: ICostguardSettings;
  /** Emitted when the settings change (also once when first loaded). */
  readonly settingsChanged: ISignal<ICostguard, ICostguardSettings>;
  /** Server connection settings for every request. */
  readonly serverSettings: ServerConnection.ISettings;
}

/** Token of the shared costguard service. */
export const ICostguard = new Token<ICostguard>(
  'jupyter-costguard:ICostguard',
  'Shared costguard state: the polled spend documents, alerts and settings.'
);

/** Implementation of ICostguard, made by `jupyter-costguard:status`. */
export class Costguard implements ICostguard {
  constructor(model: CostStatusModel) {
    this.model = model;
  }

  readonly model: CostStatusModel;

  get serverSettings(): ServerConnection.ISettings {
    return this.model.serverSettings;
  }

  get settings(): ICostguardSettings {
    return this._settings;
  }

  get settingsChanged(): ISignal<ICostguard, ICostguardSettings> {
    return this._settingsChanged;
  }

  /** Apply new settings to the model and tell the other plugins. */
  updateSettings(settings: ICostguardSettings): void {
    this._settings = settings;
    this.model.refreshInterval = settings.refreshInterval;
    this.model.summaryOptions = settings.statusBar;
    this._settingsChanged.emit(settings);
  }

  private _settings: ICostguardSettings = {
    ...DEFAULT_SETTINGS,
    statusBar: { ...DEFAULT_SETTINGS.statusBar }
  };
  private _settingsChanged = new Signal<ICostguard, ICostguardSettings>(this);
}

/** The batch jobs the Jobs panel lists (provided by `jupyter-costguard:jobs`). */
export interface ICostguardJobs {
  /** Every job of the server, polled; `jobEnded` when a watched one ends. */
  readonly model: JobsModel;
  /** Reveal the Jobs panel, expanding a job when given. */
  open(jobId?: number | null): void;
}

/** Token of the jobs service. */
export const ICostguardJobs = new Token<ICostguardJobs>(
  'jupyter-costguard:ICostguardJobs',
  'Costguard batch jobs: the polled list, and opening the Jobs panel.'
);
