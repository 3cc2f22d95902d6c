/**
 * Hibernation's words and the banner's model, against a stand-in server
 * (`fakeserver.ts`): which snapshot a notebook's banner offers, Restore
 * (into the kernel the plugin gives), Discard, and what failures leave.
 */
import {
  bannerText,
  bannerTitle,
  storageText,
  hibernateActionLabel,
  hibernatedText,
  newestSnapshot,
  restoredText,
  skippedPhrase,
  snapshotState,
  SnapshotBannerModel
} from '../hibernatemodel';
import type { ISnapshot } from '../hibernateapi';
import { hibernateEndpoint, snapshotsEndpoint } from '../hibernateapi';
import { FakeServer } from './fakeserver';

/** 2026-12-06 14:02 local time, in epoch seconds. */
const AT_1402 = new Date(2026, 11, 6, 14, 2, 0).getTime() / 1000;

function snapshot(id: string, extra: Partial<ISnapshot> = {}): ISnapshot {
  return {
    id,
    notebook: 'work/train.ipynb',
    created: AT_1402,
    bytes: 3.2 * 1024 ** 3,
    saved: Array.from({ length: 42 }, (_, i) => `v${i}`),
    skipped: [{ name: 'gen', reason: 'a generator' }],
    store: 'local',
    kernel_name: 'python3',
    ...extra
  };
}

const gen = { name: 'gen', reason: 'a generator' };
const file = { name: 'f', reason: 'an open file' };
const lock = { name: 'lock', reason: 'a lock' };

describe('hibernation words', () => {
  it('says what was saved, skipped, its size and the GPUs freed', () => {
    const saved = Array.from({ length: 42 }, (_, i) => `v${i}`);
    const result = {
      id: 's1',
      notebook: 'train.ipynb',
      created: AT_1402,
      bytes: 3.2 * 1024 ** 3,
      saved,
      skipped: [gen, file],
      gpus_freed: 4
    };
    expect(hibernatedText(result)).toBe(
      'Hibernated: 42 variables saved, 2 skipped (gen: a generator; f: an open file) · 3.2 GiB · 4 GPUs freed'
    );
    expect(hibernatedText({ ...result, saved: ['x'], skipped: [], gpus_freed: 0, bytes: 512 })).toBe(
      'Hibernated: 1 variable saved · 512 B'
    );
  });

  it('fits a toast (JupyterLab cuts at 140 characters): reasons short, then fewer names', () => {
    const long = {
      name: 'gen',
      reason: 'a generator: its paused frame cannot be saved; recreate it after restoring'
    };
    const result = {
      id: 's1',
      notebook: 'train.ipynb',
      created: AT_1402,
      bytes: 370688,
      saved: ['a', 'b', 'c', 'd', 'e'],
      skipped: [long],
      gpus_freed: 4
    };
    expect(hibernatedText(result)).toBe(
      'Hibernated: 5 variables saved, 1 skipped (gen: a generator) · 362 KiB · 4 GPUs freed'
    );
    const many = Array.from({ length: 9 }, (_, i) => ({
      name: `a_rather_long_variable_name_${i}`,
      reason: 'an open socket to a database server that went away'
    }));
    const text = hibernatedText({ ...result, skipped: many });
    expect(text.length).toBeLessThanOrEqual(140);
    expect(text).toMatch(/, 9 skipped .* · 4 GPUs freed$/);
  });

  it('names the first skipped ones and counts the rest', () => {
    expect(skippedPhrase([gen, file, lock, lock])).toBe(
      'gen: a generator; f: an open file; and 2 more'
    );
    expect(skippedPhrase([])).toBe('');
  });

  it('says what a restore brought back', () => {
    expect(restoredText({ restored: ['a', 'b'], skipped: [] })).toBe('Restored: 2 variables');
    expect(restoredText({ restored: ['a'], skipped: [{ name: 'm', reason: 'needs module torch' }] })).toBe(
      'Restored: 1 variable, 1 skipped (m: needs module torch)'
    );
    const notes = [{ name: 'w', note: 'on the CPU (cuda:3 is not here)' }];
    expect(restoredText({ restored: ['w'], skipped: [], notes })).toBe(
      'Restored: 1 variable · w: on the CPU'
    );
    // a value the kernel already held under a restored name is said to be replaced
    expect(restoredText({ restored: ['x', 'y'], skipped: [], replaced: ['x'] })).toBe(
      "Restored: 2 variables · replaced the kernel's x"
    );
  });

  it("words the alert's button and the banner", () => {
    expect(hibernateActionLabel(4)).toBe('Hibernate: free 4 GPUs, keep your variables');
    expect(hibernateActionLabel(1)).toBe('Hibernate: free 1 GPU, keep your variables');
    expect(hibernateActionLabel(null)).toBe('Hibernate: free its GPUs, keep your variables');
    const today = new Date(2026, 11, 6, 18, 0, 0);
    expect(bannerText(snapshot('s1'), today)).toBe('Hibernated at 14:02 · 3.2 GiB · 42 variables');
    const later = new Date(2026, 11, 9, 9, 0, 0);
    expect(bannerText(snapshot('s1'), later)).toMatch(/^Hibernated on .*6.* 14:02 · /);
    expect(bannerTitle(snapshot('s1', { saved: ['a', 'b'] }))).toBe(
      'Saved: a, b\nNot saved: gen (a generator)'
    );
    expect(bannerTitle(snapshot('s1', { saved: ['a'], skipped: [], waste_avoided: 12.4 }), 'USD')).toBe(
      'Saved: a\nNot spent while hibernated: USD 12.40'
    );
    const priced = snapshot('s1', {
      store: 's3://team/ann/s1',
      storage_cost: 0.012,
      storage_cost_per_month: 0.0736
    });
    expect(bannerText(priced, today, 'USD')).toBe(
      'Hibernated at 14:02 · 3.2 GiB · 42 variables · storage USD 0.074/month'
    );
    expect(storageText(priced, 'USD')).toBe(
      'Stored in s3://team/ann/s1: USD 0.012 so far, USD 0.074 a month'
    );
    const unpriced = snapshot('s1', { storage_cost: null, storage_cost_per_month: null });
    expect(bannerText(unpriced, today, 'USD')).toBe('Hibernated at 14:02 · 3.2 GiB · 42 variables');
    expect(storageText(unpriced, 'USD')).toBe('Stored locally: no price for its store');
    expect(bannerTitle(unpriced, 'USD')).toContain('no price');
    expect(storageText(snapshot('s1'), 'USD')).toBeNull(); // an older server says nothing
  });

  it("offers the notebook's newest snapshot that is not left out", () => {
    const list = [
      snapshot('old', { created: AT_1402 - 60 }),
      snapshot('new'),
      snapshot('other', { notebook: 'other.ipynb', created: AT_1402 + 60 })
    ];
    expect(newestSnapshot(list, 'work/train.ipynb')?.id).toBe('new');
    expect(newestSnapshot(list, 'RTC:work/train.ipynb')?.id).toBe('new');
    expect(newestSnapshot(list, 'work/train.ipynb', new Set(['new']))?.id).toBe('old');
    expect(newestSnapshot(list, 'nothing.ipynb')).toBeNull();
    // Restored, the newest is still the one shown (kept on the server, for Discard): an
    // older one is not offered in its place.
    const restored = [snapshot('new', { restored: AT_1402 + 120 }), snapshot('old', { restored: null })];
    expect(newestSnapshot(restored, 'work/train.ipynb')?.id).toBe('new');
    expect(snapshotState(restored[0])).toBe('restored');
    expect(snapshotState(restored[1])).toBe('hibernated');
    const restoring = { kernel_id: 'k', since: AT_1402, variables: 42, bytes: 1 };
    expect(snapshotState(snapshot('s', { restoring }))).toBe('restoring');
  });

  it('says what the server is doing with it: restoring, restored, or why that failed', () => {
    const now = new Date(AT_1402 * 1000 + 3600_000);
    const restoring = { kernel_id: 'k', since: AT_1402, variables: 42, bytes: 1 };
    expect(bannerText(snapshot('s', { restoring }), now)).toBe('Restoring 42 variables (3.2 GiB)…');
    expect(bannerText(snapshot('s', { restored: AT_1402 + 1800 }), now)).toBe(
      'Restored at 14:32 · 3.2 GiB · 42 variables · snapshot kept'
    );
    const failed = snapshot('s', { restore_error: 'its MAC does not match' });
    expect(bannerText(failed, now)).toBe('Hibernated at 14:02 · 3.2 GiB · 42 variables');
    expect(bannerTitle(failed)).toContain(
      "Not restored into the notebook's new kernel: its MAC does not match"
    );
  });

  it('builds the endpoints, encoding ids and paths', () => {
    expect(hibernateEndpoint('k 1')).toBe('kernels/k%201/hibernate');
    expect(snapshotsEndpoint('work/a b.ipynb')).toBe('snapshots?notebook=work%2Fa%20b.ipynb');
    expect(snapshotsEndpoint(null)).toBe('snapshots');
  });
});

describe('SnapshotBannerModel', () => {
  function setup(snapshots: ISnapshot[]) {
    const server = new FakeServer();
    server.routes['GET snapshots'] = () => ({ body: { snapshots } });
    const model = new SnapshotBannerModel({
      notebook: 'work/train.ipynb',
      serverSettings: server.settings()
    });
    let changes = 0;
    model.changed.connect(() => changes++);
    return { server, model, changes: () => changes };
  }

  it("asks for the notebook's snapshots and offers the newest", async () => {
    const { server, model, changes } = setup([snapshot('s1'), snapshot('s2', { created: AT_1402 + 1 })]);
    await model.refresh();
    expect(server.requests.map(r => `${r.method} ${r.path}`)).toEqual([
      'GET snapshots?notebook=work%2Ftrain.ipynb'
    ]);
    expect(model.snapshot?.id).toBe('s2');
    expect(changes()).toBe(1);
    await model.refresh();
    expect(changes()).toBe(1); // the same answer changes nothing
  });

  it('stays hidden on a server without snapshots (404) and after an error', async () => {
    const { server, model } = setup([]);
    delete server.routes['GET snapshots'];
    await model.refresh();
    expect(model.snapshot).toBeNull();
    server.routes['GET snapshots'] = () => ({ body: { snapshots: [snapshot('s1')] } });
    await model.refresh();
    expect(model.snapshot?.id).toBe('s1');
    server.routes['GET snapshots'] = () => 'network-error';
    const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    await model.refresh();
    warn.mockRestore();
    expect(model.snapshot?.id).toBe('s1'); // an error is not an answer
  });

  it('restores into the kernel it is given; the banner stays, saying so, for Discard', async () => {
    const { server, model } = setup([snapshot('s1')]);
    server.routes['POST snapshots/s1/restore'] = () => {
      server.routes['GET snapshots'] = () => ({
        body: { snapshots: [snapshot('s1', { restored: AT_1402 + 60 })] }
      });
      return { body: { restored: ['a', 'b'], skipped: [gen] } };
    };
    await model.refresh();
    const busy: (string | null)[] = [];
    model.changed.connect(() => busy.push(model.busy));
    const result = await model.restore(async () => 'k-new');
    expect(result).toEqual({ restored: ['a', 'b'], skipped: [gen] });
    expect(server.requests.find(r => r.method === 'POST')).toEqual({
      method: 'POST',
      path: 'snapshots/s1/restore',
      body: JSON.stringify({ kernel_id: 'k-new' })
    });
    expect(busy[0]).toBe('restore');
    expect(model.busy).toBeNull();
    expect(model.snapshot?.id).toBe('s1');
    expect(model.restorable).toBe(false); // restored: not offered again
    await model.refresh(); // after a reload too: the server says it was restored
    expect(model.snapshot?.restored).toBe(AT_1402 + 60);
    expect(model.restorable).toBe(false);
    expect(await model.restore(async () => 'k-again')).toBeNull();
    expect(server.requests.filter(r => r.method === 'POST').length).toBe(1);
  });

  it('keeps the banner with the reason when a restore fails', async () => {
    const { server, model } = setup([snapshot('s1')]);
    server.routes['POST snapshots/s1/restore'] = () => ({
      status: 409,
      body: { message: 'snapshot s1 is truncated' }
    });
    await model.refresh();
    expect(await model.restore(async () => 'k-new')).toBeNull();
    expect(model.snapshot?.id).toBe('s1');
    expect(model.error).toBe('snapshot s1 is truncated');
    expect(model.busy).toBeNull();
    // No kernel to restore into: said, nothing sent.
    const sent = server.requests.length;
    expect(await model.restore(() => Promise.reject(new Error('no kernel')))).toBeNull();
    expect(model.error).toBe('no kernel');
    expect(server.requests.length).toBe(sent);
  });

  it("asks once: the server waits for a new kernel to become idle, and says if it did not", async () => {
    const { server, model } = setup([snapshot('s1')]);
    await model.refresh();
    server.routes['POST snapshots/s1/restore'] = () => ({
      status: 409,
      body: { message: 'kernel k-new is busy running a cell (waited 10.0 s for it to become idle)' }
    });
    expect(await model.restore(async () => 'k-new')).toBeNull();
    expect(server.count('POST', 'snapshots/s1/restore')).toBe(1);
    expect(model.error).toBe('kernel k-new is busy running a cell (waited 10.0 s for it to become idle)');
  });

  it('discards: deletes on the server and offers the next one', async () => {
    const snapshots = [snapshot('s1', { created: AT_1402 - 60 }), snapshot('s2')];
    const { server, model } = setup(snapshots);
    server.routes['DELETE snapshots/s2'] = () => {
      snapshots.pop();
      return { status: 204 };
    };
    await model.refresh();
    expect(await model.discard()).toBe(true);
    expect(server.count('DELETE', 'snapshots/s2')).toBe(1);
    expect(model.snapshot).toBeNull();
    await model.refresh();
    expect(model.snapshot?.id).toBe('s1');
  });

  it('ignores an answer asked before a rename, and forgets the old snapshot at once', async () => {
    const { server, model } = setup([snapshot('s1')]);
    await model.refresh();
    expect(model.snapshot?.id).toBe('s1');
    const pending = model.refresh(); // answered after the rename below
    model.notebook = 'work/renamed.ipynb';
    expect(model.snapshot).toBeNull();
    await pending;
    expect(model.snapshot).toBeNull();
    expect(server.requests).toHaveLength(2);
  });
});
