/**
 * @jest-environment jsdom
 *
 * The restore banner: hidden until the notebook has a snapshot, then its
 * line and two buttons; disabled while a step runs; the reason when one fails.
 */
import { Widget } from '@lumino/widgets';

import { BannerAction, HibernateBanner } from '../hibernatebanner';
import { deleteSnapshot, ISnapshot, listSnapshots, restoreSnapshot } from '../hibernateapi';
import { RESTORING_POLL_MS, SnapshotBannerModel } from '../hibernatemodel';

// jsdom has no fetch: answer the API calls here.
jest.mock('../hibernateapi', () => ({
  ...jest.requireActual('../hibernateapi'),
  listSnapshots: jest.fn(),
  restoreSnapshot: jest.fn(),
  deleteSnapshot: jest.fn()
}));

const list = listSnapshots as jest.MockedFunction<typeof listSnapshots>;
const restore = restoreSnapshot as jest.MockedFunction<typeof restoreSnapshot>;
const remove = deleteSnapshot as jest.MockedFunction<typeof deleteSnapshot>;

const created = new Date().setHours(14, 2, 0, 0) / 1000;

const snapshot: ISnapshot = {
  id: 's1',
  notebook: 'train.ipynb',
  created,
  bytes: 3.2 * 1024 ** 3,
  saved: ['df', 'model', 'f'],
  skipped: [{ name: 'gen', reason: 'a generator' }],
  store: 'local',
  kernel_name: 'python3'
};

function setup() {
  const model = new SnapshotBannerModel({ notebook: 'train.ipynb' });
  const actions: BannerAction[] = [];
  const banner = new HibernateBanner({ model, onAction: a => actions.push(a) });
  Widget.attach(banner, document.body);
  const q = <T extends HTMLElement>(sel: string) => banner.node.querySelector<T>(sel)!;
  return {
    model,
    banner,
    actions,
    text: () => q('.jp-costguard-hibernate-text').textContent,
    restoreButton: () => q<HTMLButtonElement>('.jp-costguard-hibernate-restore'),
    discardButton: () => q<HTMLButtonElement>('.jp-costguard-hibernate-discard'),
    error: () => q('.jp-costguard-hibernate-error')
  };
}

describe('HibernateBanner', () => {
  beforeEach(() => {
    list.mockResolvedValue({ snapshots: [snapshot] });
  });
  afterEach(() => {
    document.body.innerHTML = '';
  });

  it('is hidden until the notebook has a snapshot, then says when, how big and how many', async () => {
    const b = setup();
    expect(b.banner.isHidden).toBe(true);
    await b.model.refresh();
    expect(b.banner.isHidden).toBe(false);
    expect(b.banner.node.dataset.snapshotId).toBe('s1');
    expect(b.text()).toBe('Hibernated at 14:02 · 3.2 GiB · 3 variables');
    expect(b.banner.node.querySelector<HTMLElement>('.jp-costguard-hibernate-text')!.title).toBe(
      'Saved: df, model, f\nNot saved: gen (a generator)'
    );
    expect(b.error().hidden).toBe(true);
    b.banner.dispose();
  });

  it('routes Restore and Discard to the plugin', async () => {
    const b = setup();
    await b.model.refresh();
    b.restoreButton().click();
    b.discardButton().click();
    expect(b.actions).toEqual(['restore', 'discard']);
    b.banner.dispose();
  });

  it('disables its buttons while restoring, then says restored and keeps Discard', async () => {
    const b = setup();
    await b.model.refresh();
    let answer: (value: { restored: string[]; skipped: [] }) => void = () => undefined;
    restore.mockReturnValue(new Promise(resolve => (answer = resolve)));
    const done = b.model.restore(async () => 'k1');
    expect(b.restoreButton().disabled).toBe(true);
    expect(b.restoreButton().textContent).toBe('Restoring…');
    expect(b.banner.node.dataset.busy).toBe('restore');
    b.restoreButton().click();
    expect(b.actions).toEqual([]); // a disabled button does nothing
    await Promise.resolve();
    list.mockResolvedValue({ snapshots: [{ ...snapshot, restored: created + 60 }] });
    answer({ restored: ['df', 'model', 'f'], skipped: [] });
    await done;
    expect(restore).toHaveBeenCalledWith('s1', 'k1', undefined);
    expect(b.banner.isHidden).toBe(false);
    expect(b.text()).toMatch(/^Restored at \d\d:\d\d · 3\.2 GiB · 3 variables · snapshot kept$/);
    expect(b.banner.node.dataset.state).toBe('restored');
    expect(b.restoreButton().hidden).toBe(true);
    expect(b.discardButton().hidden).toBe(false);
    expect(b.discardButton().disabled).toBe(false);
    b.banner.dispose();
  });

  it("shows the server's restore into a new kernel as it happens (resume on use)", async () => {
    jest.useFakeTimers();
    try {
      const b = setup();
      const restoring = { kernel_id: 'k2', since: created, variables: 3, bytes: snapshot.bytes };
      list.mockResolvedValue({ snapshots: [{ ...snapshot, restoring }] });
      await b.model.refresh();
      expect(b.text()).toBe('Restoring 3 variables (3.2 GiB)…');
      expect(b.banner.node.dataset.state).toBe('restoring');
      expect(b.restoreButton().hidden).toBe(true);
      expect(b.discardButton().disabled).toBe(true);
      // asked again shortly, until the server says it is done
      list.mockResolvedValue({ snapshots: [{ ...snapshot, restoring: null, restored: created + 60 }] });
      jest.advanceTimersByTime(RESTORING_POLL_MS);
      for (let i = 0; i < 5; i++) {
        await Promise.resolve();
      }
      expect(b.text()).toMatch(/^Restored at 14:03 · 3\.2 GiB · 3 variables · snapshot kept$/);
      expect(b.discardButton().disabled).toBe(false);
      b.banner.dispose();
    } finally {
      jest.useRealTimers();
    }
  });

  it("says why the server's restore into a new kernel failed, and offers Restore", async () => {
    const b = setup();
    list.mockResolvedValue({ snapshots: [{ ...snapshot, restore_error: 'its MAC does not match' }] });
    await b.model.refresh();
    expect(b.text()).toBe('Hibernated at 14:02 · 3.2 GiB · 3 variables');
    expect(b.error().hidden).toBe(false);
    expect(b.error().textContent).toBe(
      "Costguard: not restored into the notebook's new kernel: its MAC does not match"
    );
    expect(b.restoreButton().hidden).toBe(false);
    b.banner.dispose();
  });

  it('shows why a discard failed, with its buttons back', async () => {
    const b = setup();
    await b.model.refresh();
    remove.mockRejectedValue(new Error('permission denied'));
    expect(await b.model.discard()).toBe(false);
    expect(b.banner.isHidden).toBe(false);
    expect(b.error().hidden).toBe(false);
    expect(b.error().textContent).toBe('Costguard: permission denied');
    expect(b.discardButton().disabled).toBe(false);
    b.banner.dispose();
  });

  it('stops following its model once disposed', async () => {
    const b = setup();
    b.banner.dispose();
    await b.model.refresh();
    expect(b.banner.isDisposed).toBe(true);
    expect(b.text()).toBe('');
  });
});
