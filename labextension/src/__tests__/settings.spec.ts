import * as schema from '../../schema/status.json';
import {
  clampInterval,
  clampSnooze,
  DEFAULT_SETTINGS,
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
