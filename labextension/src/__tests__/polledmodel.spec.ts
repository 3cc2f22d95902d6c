/**
 * @jest-environment jsdom
 *
 * The one polling policy: every model's polls stand by while the tab is
 * hidden, catch up when it is shown, and back off on errors up to 30 s.
 */
import { Poll } from '@lumino/polling';

import { CostWidgetFeed } from '../costwidgetfeed';
import { JobsModel } from '../jobsmodel';
import {
  MAX_BACKOFF_MS,
  ModelPoll,
  PolledModel,
  pollFrequency,
  PollState
} from '../polledmodel';
import { CostStatusModel } from '../statusmodel';

/** Answers from a list; an Error in it is thrown. */
class Counter extends PolledModel<number> {
  constructor(options: Partial<PolledModel.IOptions<PollState>> = {}) {
    super({ name: 'test', interval: 2, ...options });
    this.extra = this.addPoll('test:extra', async () => undefined);
  }

  answers: (number | Error)[] = [];
  value: number | null = null;
  readonly extra: ModelPoll;

  set seconds(value: number) {
    this.setInterval(value);
  }

  protected async fetch(): Promise<number> {
    const next = this.answers.shift();
    if (next instanceof Error || next === undefined) {
      throw next ?? new Error('no answer');
    }
    return next;
  }

  protected apply(value: number): void {
    this.value = value;
    this.emitChanged();
  }
}

function setHidden(hidden: boolean): void {
  Object.defineProperty(document, 'hidden', { value: hidden, configurable: true });
  document.dispatchEvent(new Event('visibilitychange'));
}

const made: { dispose(): void }[] = [];
function keep<T extends { dispose(): void }>(model: T): T {
  made.push(model);
  return model;
}

afterEach(() => {
  made.splice(0).forEach(m => m.dispose());
  setHidden(false);
});

describe('pollFrequency', () => {
  it('backs off up to 30 s, or up to the interval when that is longer', () => {
    expect(MAX_BACKOFF_MS).toBe(30000);
    expect(pollFrequency(2)).toEqual({ interval: 2000, backoff: true, max: 30000 });
    expect(pollFrequency(0.5)).toEqual({ interval: 500, backoff: true, max: 30000 });
    expect(pollFrequency(60)).toEqual({ interval: 60000, backoff: true, max: 60000 });
  });
});

describe('PolledModel', () => {
  it('applies answers, and records failures before rethrowing them', async () => {
    const m = keep(new Counter());
    let changes = 0;
    m.changed.connect(() => changes++);
    m.answers = [7, new Error('boom')];
    expect(m.state).toBe('loading');
    await m.refresh();
    expect([m.state, m.value, m.error, changes]).toEqual(['ok', 7, null, 1]);
    await expect(m.refresh()).rejects.toThrow('boom');
    expect(m.state).toBe('offline');
    expect(m.error?.message).toBe('boom');
    expect(m.value).toBe(7);
    expect(changes).toBe(2);
  });

  it('starts from idle as loading, once, and stops', async () => {
    const m = keep(new Counter({ state: 'idle' }));
    let changes = 0;
    m.changed.connect(() => changes++);
    m.answers = [1, 2, 3];
    m.start();
    m.start();
    expect([m.state, m.isRunning, changes]).toEqual(['loading', true, 1]);
    await new Promise(resolve => setTimeout(resolve, 30));
    expect(m.value).toBe(1);
    m.stop();
    expect(m.isRunning).toBe(false);
    expect(m.poll.state.phase).toBe('stopped');
    expect(m.extra.state.phase).toBe('stopped');
  });

  it('gives every poll the same frequency and standby', () => {
    const m = keep(new Counter());
    expect(m.poll.standby).toBe('when-hidden');
    expect(m.extra.standby).toBe('when-hidden');
    m.seconds = 5;
    expect(m.interval).toBe(5);
    for (const poll of [m.poll, m.extra]) {
      expect(poll.frequency).toEqual({ interval: 5000, backoff: true, max: 30000 });
    }
  });

  it('stands by also while its own condition holds', () => {
    let detached = false;
    const m = keep(new Counter({ standby: () => detached }));
    const standby = m.poll.standby as () => boolean | Poll.Standby;
    expect(standby()).toBe('when-hidden');
    detached = true;
    expect(standby()).toBe(true);
  });

  it('catches up when the tab is shown again, only while running', () => {
    const m = keep(new Counter());
    const now = jest.spyOn(m, 'pollNow').mockResolvedValue(undefined);
    setHidden(true);
    setHidden(false);
    expect(now).not.toHaveBeenCalled();
    m.start();
    setHidden(true);
    expect(now).not.toHaveBeenCalled();
    setHidden(false);
    expect(now).toHaveBeenCalledTimes(1);
    m.dispose();
    setHidden(false);
    expect(now).toHaveBeenCalledTimes(1);
  });

  it('disposes its polls', () => {
    const m = new Counter();
    m.dispose();
    expect(m.isDisposed).toBe(true);
    expect(m.poll.isDisposed).toBe(true);
    expect(m.extra.isDisposed).toBe(true);
  });
});

describe('every costguard model', () => {
  it('polls with the one policy', () => {
    const data = keep(new CostStatusModel({ serverSettings: {} as any, autoStart: false }));
    const feed = keep(
      new CostWidgetFeed({
        serverSettings: {} as any,
        kernelIds: () => [],
        notebook: () => null,
        refreshSeconds: 2
      })
    );
    const polls: ModelPoll[] = [
      data.poll,
      data.alertsPoll,
      keep(new JobsModel({ serverSettings: {} as any })).poll,
      feed.poll
    ];
    for (const poll of polls) {
      expect(poll.frequency.backoff).toBe(true);
      expect(poll.frequency.max).toBe(Math.max(MAX_BACKOFF_MS, poll.frequency.interval));
      expect(poll.standby).toBe('when-hidden');
    }
  });
});
