/**
 * How every costguard model polls the server: one lumino `Poll` (or a few
 * sharing one interval, see `addPoll`) that
 *
 * - stands by while the tab is hidden (and while `standby()` says so),
 * - catches up at once when the tab is shown again,
 * - backs off on errors (lumino's exponential back-off) up to MAX_BACKOFF_MS,
 *   or up to the interval when that is longer.
 *
 * A model says what one refresh fetches (`fetch`) and what it does with the
 * answer (`apply`); `refresh` runs both and, on a failure, records the state
 * (`offline` by default) and the error, then rethrows so that the poll backs off.
 */
import { IPoll, Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { Disposable } from './disposable';

/** Longest wait between two polls after errors, in milliseconds (lumino's default too). */
export const MAX_BACKOFF_MS = 30 * 1000;

/** The frequency of every costguard poll, `seconds` apart while all is well. */
export function pollFrequency(seconds: number): IPoll.Frequency {
  const interval = seconds * 1000;
  return { interval, backoff: true, max: Math.max(MAX_BACKOFF_MS, interval) };
}

/**
 * Connection state of a polled model: `idle` until started (models that
 * start on demand), `loading` until the first answer, then `ok` or `offline`
 * (or a state of the model's own, such as `unavailable`).
 */
export type PollState = 'idle' | 'loading' | 'ok' | 'offline' | 'unavailable';

/** A poll of a PolledModel. */
export type ModelPoll = Poll<void, Error, 'standby'>;

export namespace PolledModel {
  export interface IOptions<S extends PollState> {
    /** Name of the poll (shows in lumino's debugging). */
    name: string;
    /** Seconds between two polls. */
    interval: number;
    /** State before the first answer (default `loading`). */
    state?: S;
    /** Start polling right after construction (default false: call `start`). */
    auto?: boolean;
    /** Stand by also while this answers true (besides while the tab is hidden). */
    standby?: () => boolean;
  }
}

/** Base of the polled models: the poll, the state and the `changed` signal. */
export abstract class PolledModel<T, S extends PollState = PollState> extends Disposable {
  constructor(options: PolledModel.IOptions<S>) {
    super();
    this._state = options.state ?? ('loading' as S);
    this._interval = options.interval;
    const extra = options.standby;
    this._standby = extra ? () => extra() || 'when-hidden' : 'when-hidden';
    this._poll = this.addPoll(options.name, () => this.refresh());
    if (typeof document !== 'undefined') {
      document.addEventListener('visibilitychange', this._onVisibility);
    }
    if (options.auto) {
      // After the subclass's constructor has run.
      setTimeout(() => this.start());
    }
  }

  /** Emitted whenever anything the model shows changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Connection state (see PollState). */
  get state(): S {
    return this._state;
  }

  /** The error of the last failed refresh, if any. */
  get error(): Error | null {
    return this._error;
  }

  /** The model's main poll (runs `refresh`). */
  get poll(): ModelPoll {
    return this._poll;
  }

  /** Seconds between two polls while all is well. */
  get interval(): number {
    return this._interval;
  }

  /** Whether `start` was called (and `stop` not since). */
  get isRunning(): boolean {
    return this._running;
  }

  /** Start polling (no-op when running): `idle` becomes `loading`. */
  start(): void {
    if (this._running || this.isDisposed) {
      return;
    }
    this._running = true;
    if (this._state === 'idle') {
      this._state = 'loading' as S;
      this._changed.emit();
    }
    for (const poll of this._polls) {
      void poll.start();
    }
  }

  /** Stop polling until the next `start`. */
  stop(): void {
    if (!this._running || this.isDisposed) {
      return;
    }
    this._running = false;
    for (const poll of this._polls) {
      void poll.stop();
    }
  }

  /** Poll now: every poll of the model ticks at once. */
  async pollNow(): Promise<void> {
    await Promise.all(this._polls.map(poll => poll.refresh()));
  }

  /**
   * Fetch once and apply the answer. A failure sets the state (`failed`)
   * and is rethrown so that the poll backs off.
   */
  async refresh(): Promise<void> {
    let data: T;
    try {
      data = await this.fetch();
    } catch (reason) {
      if (!this.isDisposed) {
        this.failed(reason);
      }
      throw reason;
    }
    if (this.isDisposed) {
      return;
    }
    this._state = 'ok' as S;
    this._error = null;
    this.apply(data);
  }

  protected onDispose(): void {
    if (typeof document !== 'undefined') {
      document.removeEventListener('visibilitychange', this._onVisibility);
    }
    for (const poll of this._polls) {
      poll.dispose();
    }
    Signal.clearData(this);
  }

  /** The requests of one refresh. */
  protected abstract fetch(): Promise<T>;

  /** Take one answer (the state is `ok` already); emit `changed` when done. */
  protected abstract apply(data: T): void;

  /** Record a failed refresh: `state` (default `offline`) and the error. */
  protected failed(reason: unknown, state: S = 'offline' as S): void {
    this._state = state;
    this._error = reason instanceof Error ? reason : new Error(String(reason));
    this._changed.emit();
  }

  protected emitChanged(): void {
    this._changed.emit();
  }

  /** Change the interval of every poll of the model. */
  protected setInterval(seconds: number): void {
    if (seconds === this._interval || this.isDisposed) {
      return;
    }
    this._interval = seconds;
    for (const poll of this._polls) {
      poll.frequency = pollFrequency(seconds);
    }
  }

  /** Another poll with the same interval, standby and life as the main one. */
  protected addPoll(name: string, factory: () => Promise<void>): ModelPoll {
    const poll: ModelPoll = new Poll<void, Error, 'standby'>({
      auto: false,
      factory,
      frequency: pollFrequency(this._interval),
      name,
      standby: this._standby
    });
    this._polls.push(poll);
    return poll;
  }

  /** Catch up at once when the tab becomes visible again. */
  private _onVisibility = (): void => {
    if (this.isDisposed || !this._running || document.hidden) {
      return;
    }
    void this.pollNow();
  };

  private _changed = new Signal<this, void>(this);
  private _error: Error | null = null;
  private _interval: number;
  private _poll: ModelPoll;
  private _polls: ModelPoll[] = [];
  private _running = false;
  private _standby: Poll.Standby | (() => boolean | Poll.Standby);
  private _state: S;
}
