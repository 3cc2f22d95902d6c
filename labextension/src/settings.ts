/**
 * The extension's settings (`schema/status.json`, settings id
 * `jupyter-costguard:status`): pure parsing with defaults and clamping, and
 * `followSettings`, which feeds a plugin's settings to it as they change.
 */
import type { ISettingRegistry } from '@jupyterlab/settingregistry';

import { DEFAULT_SUMMARY_OPTIONS, ISummaryOptions } from './statussummary';

/** Settings id of the extension's one settings page. */
export const SETTINGS_ID = 'jupyter-costguard:status';

/** Default refresh interval, in seconds (mirrors schema/status.json). */
export const DEFAULT_REFRESH_SECONDS = 2;

/** Shortest allowed refresh interval, in seconds (schema minimum). */
export const MIN_REFRESH_SECONDS = 1;

/** Default snooze, in seconds (mirrors schema/status.json). */
export const DEFAULT_SNOOZE_SECONDS = 3600;

/** Shortest allowed snooze, in seconds (schema minimum). */
export const MIN_SNOOZE_SECONDS = 60;

/** Longest allowed snooze, in seconds (schema maximum: a week). */
export const MAX_SNOOZE_SECONDS = 7 * 24 * 3600;

/** Everything the settings page controls. */
export interface ICostguardSettings {
  /** Seconds between two polls of the server. */
  refreshInterval: number;
  /** What the status-bar item shows. */
  statusBar: ISummaryOptions;
  /** Whether active alerts pop up as notifications. */
  notifications: boolean;
  /** Seconds an alert's "snooze" action silences it for. */
  snoozeSeconds: number;
}

export const DEFAULT_SETTINGS: ICostguardSettings = {
  refreshInterval: DEFAULT_REFRESH_SECONDS,
  statusBar: { ...DEFAULT_SUMMARY_OPTIONS },
  notifications: true,
  snoozeSeconds: DEFAULT_SNOOZE_SECONDS
};

/** Clamp a refresh interval (seconds) to a sane value. */
export function clampInterval(seconds: unknown): number {
  if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds <= 0) {
    return DEFAULT_REFRESH_SECONDS;
  }
  return Math.max(MIN_REFRESH_SECONDS, seconds);
}

/** Clamp a snooze duration (seconds) to the schema's range. */
export function clampSnooze(seconds: unknown): number {
  if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds <= 0) {
    return DEFAULT_SNOOZE_SECONDS;
  }
  return Math.round(
    Math.min(MAX_SNOOZE_SECONDS, Math.max(MIN_SNOOZE_SECONDS, seconds))
  );
}

function bool(value: unknown, fallback: boolean): boolean {
  return typeof value === 'boolean' ? value : fallback;
}

/** Read the composite settings object, filling defaults for anything odd. */
export function parseSettings(
  composite: { [key: string]: unknown } | null | undefined
): ICostguardSettings {
  const raw = composite ?? {};
  const bar = (
    raw.statusBar && typeof raw.statusBar === 'object' ? raw.statusBar : {}
  ) as { [key: string]: unknown };
  return {
    refreshInterval: clampInterval(raw.refreshInterval),
    statusBar: {
      showRate: bool(bar.showRate, DEFAULT_SUMMARY_OPTIONS.showRate),
      showNotebookSpend: bool(
        bar.showNotebookSpend,
        DEFAULT_SUMMARY_OPTIONS.showNotebookSpend
      ),
      showServerTotal: bool(
        bar.showServerTotal,
        DEFAULT_SUMMARY_OPTIONS.showServerTotal
      )
    },
    notifications: bool(raw.notifications, DEFAULT_SETTINGS.notifications),
    snoozeSeconds: clampSnooze(raw.snoozeSeconds)
  };
}

/**
 * Load the settings `id` once `ready` has resolved, and hand their composite
 * to `apply` then and on every change. A failure is logged and the defaults
 * stay. The promise resolves when either is done.
 */
export function followSettings(
  registry: Pick<ISettingRegistry, 'load'>,
  id: string,
  apply: (composite: { [key: string]: unknown }) => void,
  ready: Promise<unknown> = Promise.resolve()
): Promise<void> {
  return Promise.all([registry.load(id), ready])
    .then(([settings]) => {
      const update = (): void => {
        apply(settings.composite as { [key: string]: unknown });
      };
      update();
      settings.changed.connect(update);
    })
    .catch(reason => {
      console.error(`${id}: failed to load settings, using defaults`, reason);
    });
}
