import { Signal } from '@lumino/signaling';

import {
  baseName,
  followCurrentNotebook,
  normalizePath,
  samePath,
  selectNotebook,
  withoutDrive
} from '../notebooks';
import { notebook } from './fixtures';

describe('paths', () => {
  it('normalises slashes', () => {
    expect(normalizePath('/work/a.ipynb/')).toBe('work/a.ipynb');
    expect(normalizePath(null)).toBe('');
  });

  it('strips a drive prefix only from the first component', () => {
    expect(withoutDrive('RTC:work/a.ipynb')).toBe('work/a.ipynb');
    expect(withoutDrive('work/a:b.ipynb')).toBeNull();
    expect(withoutDrive('a.ipynb')).toBeNull();
    expect(withoutDrive(':a.ipynb')).toBeNull();
  });

  it('compares server paths with document paths', () => {
    expect(samePath('work/a.ipynb', 'RTC:work/a.ipynb')).toBe(true);
    expect(samePath('work/a.ipynb', '/work/a.ipynb')).toBe(true);
    expect(samePath('work/a.ipynb', 'a.ipynb')).toBe(false);
    expect(samePath('', '')).toBe(false);
  });

  it('names the file', () => {
    expect(baseName('work/deep/a.ipynb')).toBe('a.ipynb');
    expect(baseName('a.ipynb')).toBe('a.ipynb');
  });
});

describe('selectNotebook', () => {
  const list = [
    notebook('train.ipynb', 5),
    notebook('work/explore.ipynb', 1),
    notebook('odd:name.ipynb', 2)
  ];

  it('finds the active notebook by path', () => {
    expect(selectNotebook(list, 'work/explore.ipynb')?.spend).toBe(1);
    expect(selectNotebook(list, '/work/explore.ipynb')?.spend).toBe(1);
    expect(selectNotebook(list, 'RTC:work/explore.ipynb')?.spend).toBe(1);
  });

  it('prefers an exact match over a drive-stripped one', () => {
    expect(selectNotebook(list, 'odd:name.ipynb')?.spend).toBe(2);
  });

  it('returns null when nothing is active or nothing was spent', () => {
    expect(selectNotebook(list, null)).toBeNull();
    expect(selectNotebook(list, '')).toBeNull();
    expect(selectNotebook(list, 'new.ipynb')).toBeNull();
    expect(selectNotebook([], 'train.ipynb')).toBeNull();
  });

  it('does not match a file of the same name in another folder', () => {
    expect(selectNotebook(list, 'other/explore.ipynb')).toBeNull();
  });
});

describe('followCurrentNotebook', () => {
  const panel = (path: string) => ({
    context: { path, pathChanged: new Signal<object, string>({}) }
  });

  it('follows the current notebook and its renames', () => {
    const a = panel('RTC:work/a.ipynb');
    const b = panel('b.ipynb');
    const tracker = {
      currentWidget: a as ReturnType<typeof panel> | null,
      currentChanged: new Signal<object, ReturnType<typeof panel> | null>({})
    };
    const seen: (string | null)[] = [];
    followCurrentNotebook(tracker, p => p.replace(/^RTC:/, ''), p => seen.push(p));
    expect(seen).toEqual(['work/a.ipynb']);
    a.context.path = 'RTC:work/renamed.ipynb';
    a.context.pathChanged.emit(a.context.path);
    tracker.currentWidget = b;
    tracker.currentChanged.emit(b);
    // No longer current: its renames are not followed.
    a.context.pathChanged.emit(a.context.path);
    tracker.currentWidget = null;
    tracker.currentChanged.emit(null);
    expect(seen).toEqual(['work/a.ipynb', 'work/renamed.ipynb', 'b.ipynb', null]);
  });
});
