/**
 * What a job will cost before it starts, without the DOM: the offload
 * dialog's estimate (`POST jobs/estimate`), asked again (debounced) as the
 * user edits the resources, and its wording. The dialog renders it
 * (`offloaddialog.ts`); the fetch is injected so jest can drive it.
 */
import { ISignal, Signal } from '@lumino/signaling';

import type { Schemas } from './api';
import { formatDuration, formatMoney, formatRate, isNumber } from './format';
import { errorMessage, IEstimate, IEstimateRequest, ISubmitRequest } from './jobsapi';

/** Wait after the last edit before asking again, in milliseconds. */
export const ESTIMATE_DEBOUNCE_MS = 400;

/** What the estimate depends on: the request's backend and resources. */
export function estimateRequest(request: ISubmitRequest): IEstimateRequest {
  return { backend: request.backend ?? null, resources: request.resources ?? null };
}

/** The estimate's lines, as the dialog shows them. */
export interface IEstimateText {
  /** "About USD 21.96/h on local", or "Not priced on slurm". */
  price: string;
  /** The most within the time limit, or that there is no limit (null: not priced). */
  most: string | null;
  /** Where the figure came from (or why there is none), with its currency. */
  source: string;
  /** SkyPilot's price cap: within it, or why the launch would refuse the job. */
  cap: string | null;
  notes: string[];
}

/** The words for an estimate. */
export function estimateText(e: IEstimate): IEstimateText {
  const hourly = e.hourly_price;
  const notes = Array.isArray(e.notes) ? [...e.notes] : [];
  let cap: string | null = null;
  if (e.refusal) {
    cap = `Over the price cap: the launch would refuse it (${e.refusal}).`;
  } else if (isNumber(e.price_cap)) {
    cap = `Within the price cap of ${formatRate(e.price_cap, 'USD')} (skypilot_max_price_per_hour).`;
  }
  if (!e.priced || !isNumber(hourly)) {
    return { price: `Not priced on ${e.backend}`, most: null, source: e.detail, cap, notes };
  }
  const limit = e.time_limit_seconds;
  const most =
    isNumber(limit) && isNumber(e.max_cost)
      ? `At most ${formatMoney(e.max_cost, e.currency)} within the ${formatDuration(limit)} time limit.`
      : 'No time limit: nothing caps what it can cost.';
  return {
    price: `About ${formatRate(hourly, e.currency)} on ${e.backend}`,
    most,
    source: `Price from ${e.detail} (${e.currency}).`,
    cap,
    notes
  };
}

/** What a job record keeps of its estimate (`Job.estimate` in the OpenAPI document). */
export type IKeptEstimate = NonNullable<Schemas['Job']['estimate']>;

/**
 * "about USD 0.10/h on local, at most USD 0.02": the estimate in one phrase,
 * for the toolbar's tooltip and the submitted toast (null: not priced).
 */
export function estimatePhrase(
  e: Pick<IKeptEstimate, 'priced' | 'hourly_price' | 'max_cost' | 'currency'>,
  backend: string
): string | null {
  if (!e.priced || !isNumber(e.hourly_price)) {
    return null;
  }
  const most = isNumber(e.max_cost) ? `, at most ${formatMoney(e.max_cost, e.currency)}` : '';
  return `about ${formatRate(e.hourly_price, e.currency)} on ${backend}${most}`;
}

/**
 * "charged USD 0.075/h · estimated USD 0.10/h": a job's charge beside the
 * estimate it was submitted with (null when it has neither yet).
 */
export function chargeText(job: {
  currency: string;
  charged_per_hour?: number | null;
  estimate?: IKeptEstimate | null;
}): string | null {
  const parts: string[] = [];
  if (isNumber(job.charged_per_hour)) {
    parts.push(`charged ${formatRate(job.charged_per_hour, job.currency)}`);
  }
  const e = job.estimate;
  if (e && e.priced && isNumber(e.hourly_price)) {
    parts.push(`estimated ${formatRate(e.hourly_price, e.currency)}`);
  } else if (e) {
    parts.push('not estimated');
  }
  return parts.length ? parts.join(' · ') : null;
}

/** Where an estimate is: not asked yet, on its way, answered, or failed. */
export type EstimateState = 'idle' | 'loading' | 'ok' | 'error';

export namespace EstimateModel {
  export interface IOptions {
    /** `estimateJob` with the server's settings. */
    fetch: (request: IEstimateRequest) => Promise<IEstimate>;
    /** Debounce of `request`, in milliseconds. */
    delayMs?: number;
  }
}

/**
 * The estimate of the request the dialog shows. `request` asks for it after
 * `delayMs` without another edit; an answer to an older request is dropped;
 * the same backend and resources are not asked twice in a row.
 */
export class EstimateModel {
  constructor(options: EstimateModel.IOptions) {
    this._fetch = options.fetch;
    this._delay = options.delayMs ?? ESTIMATE_DEBOUNCE_MS;
  }

  /** Emitted on every change of state. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get state(): EstimateState {
    return this._state;
  }

  /** The latest answer (null before one). */
  get estimate(): IEstimate | null {
    return this._estimate;
  }

  /** Why the latest ask failed (null when it did not). */
  get error(): string | null {
    return this._error;
  }

  /** Ask for the estimate of `request` (debounced; `now`: at once). */
  request(request: IEstimateRequest, now = false): void {
    const key = JSON.stringify(request);
    if (this._disposed || (key === this._key && this._state !== 'error')) {
      return;
    }
    this._key = key;
    clearTimeout(this._timer);
    this._set('loading');
    if (now) {
      void this._ask(request);
    } else {
      this._timer = setTimeout(() => void this._ask(request), this._delay);
    }
  }

  /** Forget the last request, so that the same one is asked again. */
  forget(): void {
    this._key = null;
  }

  /** Stop asking; answers still on their way are dropped. */
  dispose(): void {
    this._disposed = true;
    clearTimeout(this._timer);
    Signal.clearData(this);
  }

  private async _ask(request: IEstimateRequest): Promise<void> {
    const ticket = ++this._ticket;
    try {
      const answer = await this._fetch(request);
      if (ticket === this._ticket && !this._disposed) {
        this._estimate = answer;
        this._error = null;
        this._set('ok');
      }
    } catch (reason) {
      if (ticket === this._ticket && !this._disposed) {
        this._error = errorMessage(reason);
        this._set('error');
      }
    }
  }

  private _set(state: EstimateState): void {
    this._state = state;
    this._changed.emit();
  }

  private _changed = new Signal<this, void>(this);
  private _delay: number;
  private _disposed = false;
  private _error: string | null = null;
  private _estimate: IEstimate | null = null;
  private _fetch: (request: IEstimateRequest) => Promise<IEstimate>;
  private _key: string | null = null;
  private _state: EstimateState = 'idle';
  private _ticket = 0;
  private _timer: ReturnType<typeof setTimeout> | undefined = undefined;
}
