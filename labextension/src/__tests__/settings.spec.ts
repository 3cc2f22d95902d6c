import { Signal } from '@lumino/signaling';

import * as schema from '../../schema/status.json';
import {
  clampInterval,
  clampSnooze,
  DEFAULT_SETTINGS,
  followSettings,
  parseSettings
} from '../settings';

describe('parseSettings', () => {
  it('fills defaults', () => {
    expect(parseSettings(undefined)).toEqual(DEFAULT_SETTINGS);
    expect(parseSettings({})).toEqual(DEFAULT_SETTINGS);
  });

  it('reads every field', () => {
    expect(
      parseSettings({
        refreshInterval: 5,
        statusBar: { showRate: false, showNotebookSpend: false, showServerTotal: true },
        notifications: false,
        snoozeSeconds: 600
      })
    ).toEqual({
      refreshInterval: 5,
      statusBar: { showRate: false, showNotebookSpend: false, showServerTotal: true },
      notifications: false,
      snoozeSeconds: 600
    });
  });

  it('clamps and ignores odd values', () => {
    expect(clampInterval(0.2)).toBe(1);
    expect(clampInterval(-1)).toBe(2);
    expect(clampInterval('3')).toBe(2);
    expect(clampSnooze(5)).toBe(60);
    expect(clampSnooze(1e9)).toBe(604800);
    expect(clampSnooze(null)).toBe(3600);
    const s = parseSettings({ statusBar: { showRate: 'yes' }, notifications: 1 });
    expect(s.statusBar.showRate).toBe(true);
    expect(s.notifications).toBe(true);
  });

  it('matches the schema defaults', () => {
    const props = (schema as any).properties;
    expect(props.refreshInterval.default).toBe(DEFAULT_SETTINGS.refreshInterval);
    expect(props.refreshInterval.minimum).toBe(1);
    expect(props.statusBar.default).toEqual(DEFAULT_SETTINGS.statusBar);
    for (const [key, value] of Object.entries(DEFAULT_SETTINGS.statusBar)) {
      expect(props.statusBar.properties[key].default).toBe(value);
    }
    expect(props.notifications.default).toBe(DEFAULT_SETTINGS.notifications);
    expect(props.snoozeSeconds.default).toBe(DEFAULT_SETTINGS.snoozeSeconds);
  });
});

describe('followSettings', () => {
  function registry(composite: { [key: string]: unknown }, fail = false) {
    const settings = { composite, changed: new Signal<object, void>({}) };
    return {
      settings,
      load: jest.fn(async () => {
        if (fail) {
          throw new Error('no such schema');
        }
        return settings;
      })
    };
  }

  it('applies the settings once ready and on every change', async () => {
    const r = registry({ refreshInterval: 5 });
    const seen: unknown[] = [];
    let ready!: () => void;
    const done = followSettings(
      r as any,
      'jupyter-costguard:status',
      c => seen.push(c.refreshInterval),
      new Promise<void>(resolve => (ready = resolve))
    );
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(seen).toEqual([]);
    ready();
    await done;
    expect(r.load).toHaveBeenCalledWith('jupyter-costguard:status');
    expect(seen).toEqual([5]);
    r.settings.composite = { refreshInterval: 7 };
    r.settings.changed.emit();
    expect(seen).toEqual([5, 7]);
  });

  it('keeps the defaults when the settings cannot be loaded', async () => {
    const error = jest.spyOn(console, 'error').mockImplementation(() => undefined);
    const seen: unknown[] = [];
    await followSettings(registry({}, true) as any, 'x:y', c => seen.push(c));
    expect(seen).toEqual([]);
    expect(error).toHaveBeenCalledWith('x:y: failed to load settings, using defaults', expect.any(Error));
    error.mockRestore();
  });
});
