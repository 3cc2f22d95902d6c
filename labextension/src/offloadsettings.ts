/**
 * The offload settings (`schema/offload.json`): each job's default resources,
 * retries, whether to confirm first, the backend and notifications, read with
 * a default for anything missing or odd, and the limits the server accepts.
 */
import { isNumber } from './format';
import type { IJobResources } from './jobsapi';

/** Settings id of the offload plugin (`schema/offload.json`). */
export const OFFLOAD_SETTINGS_ID = 'jupyter-costguard:offload';

/** Highest `retries` the server accepts. */
export const MAX_RETRIES = 10;

/** Highest GPU count the server accepts. */
export const MAX_GPUS = 64;

/** Highest CPU count the server accepts. */
export const MAX_CPUS = 1024;

/** Longest time limit the server accepts (30 days). */
export const MAX_TIME_LIMIT_SECONDS = 30 * 24 * 3600;

/** Resources (`Resources`) with every field present (null: the backend's default). */
export type IResourceSettings = Required<IJobResources>;

/** What `schema/offload.json` controls. */
export interface IOffloadSettings {
  /** Defaults of each job's resources. */
  resources: IResourceSettings;
  /** Attempts after the first one fails. */
  retries: number;
  /** Show the slice and editable resources before submitting. */
  confirm: boolean;
  /** Backend name; '' for the server's default. */
  backend: string;
  /** Pop up a notification when a job this page saw running ends. */
  notifications: boolean;
}

export const DEFAULT_OFFLOAD_SETTINGS: IOffloadSettings = {
  // No time limit unless asked for (README, "Offloading cells to batch jobs"): with every
  // resource null the request leaves them to the server's defaults (offload_time_limit_seconds).
  resources: { gpus: null, cpus: null, memory_gib: null, time_limit_seconds: null },
  retries: 0,
  confirm: false,
  backend: '',
  notifications: true
};

/** A positive number up to `max`, or null (also for anything odd). */
function positiveOrNull(value: unknown, max: number): number | null {
  return isNumber(value) && value > 0 && value <= max ? value : null;
}

/** Read the offload settings, with defaults for anything missing or odd. */
export function parseOffloadSettings(
  composite: { [key: string]: unknown } | null | undefined
): IOffloadSettings {
  const raw = composite ?? {};
  const d = DEFAULT_OFFLOAD_SETTINGS;
  const gpus =
    isNumber(raw.gpus) && Number.isInteger(raw.gpus) && raw.gpus >= 0 && raw.gpus <= MAX_GPUS
      ? raw.gpus
      : null;
  const retries =
    isNumber(raw.retries) && Number.isInteger(raw.retries)
      ? Math.min(MAX_RETRIES, Math.max(0, raw.retries))
      : d.retries;
  return {
    resources: {
      gpus,
      cpus: positiveOrNull(raw.cpus, MAX_CPUS),
      memory_gib: positiveOrNull(raw.memory_gib, 1 << 16),
      time_limit_seconds:
        raw.time_limit_seconds === undefined
          ? d.resources.time_limit_seconds
          : positiveOrNull(raw.time_limit_seconds, MAX_TIME_LIMIT_SECONDS)
    },
    retries,
    confirm: typeof raw.confirm === 'boolean' ? raw.confirm : d.confirm,
    backend: typeof raw.backend === 'string' ? raw.backend.trim() : d.backend,
    notifications:
      typeof raw.notifications === 'boolean' ? raw.notifications : d.notifications
  };
}

/** Whether every resource is null (the server's defaults then apply). */
export function allNull(resources: IResourceSettings): boolean {
  return Object.values(resources).every(v => v === null);
}
