/**
 * Hibernation without the DOM: the words of the hibernate and restore toasts,
 * the alert's button and the banner, and `SnapshotBannerModel`, the snapshot
 * a notebook's banner offers to restore (`GET snapshots?notebook=`), with its
 * Restore and Discard. The banner widget (`hibernatebanner.ts`) renders it;
 * the plugin (`hibernateplugin.ts`) says when to look again and supplies the
 * kernel to restore into.
 */
import type { ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { JUPYTERLAB_MAX_MESSAGE_LENGTH } from './alerttoasttext';
import { isNotFound } from './api';
import { formatBytes, formatClock, formatMoney, isNumber } from './format';
import {
  deleteSnapshot,
  IHibernateResult,
  IRestoreResult,
  ISkippedName,
  ISnapshot,
  listSnapshots,
  restoreSnapshot
} from './hibernateapi';
import { errorMessage } from './jobsapi';
import { samePath } from './notebooks';

/** The question asked before hibernating. */
export const HIBERNATE_QUESTION =
  'Hibernate this kernel? Its variables are saved, the kernel shuts down and its GPUs ' +
  'are freed; the next cell you run in this notebook brings them back.';

/** How many skipped names a toast spells out before "and N more". */
const SKIPPED_SHOWN = 2;

/**
 * The longest toast text is where JupyterLab cuts a notification's message
 * (`JUPYTERLAB_MAX_MESSAGE_LENGTH`); what is said last (the GPUs freed)
 * matters most, so the skipped names give way first.
 */
const TOAST_MAX = JUPYTERLAB_MAX_MESSAGE_LENGTH;

/** A reason in a few words: its first clause ("a generator"), at most 28 characters. */
export function shortReason(reason: string): string {
  const clause = reason.split(/[:;(]/)[0].trim() || reason.trim();
  return clause.length > 28 ? `${clause.slice(0, 27).replace(/\s+$/, '')}…` : clause;
}

/** `1 variable`, `42 variables`. */
export function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? '' : 's'}`;
}

/** "gen: a generator; f: an open file; and 3 more" (empty for none). */
export function skippedPhrase(skipped: ReadonlyArray<ISkippedName>, shown = SKIPPED_SHOWN): string {
  const named = skipped.slice(0, shown).map(s => `${s.name}: ${shortReason(s.reason)}`);
  if (skipped.length > shown) {
    named.push(`and ${skipped.length - shown} more`);
  }
  return named.join('; ');
}

/** ", 2 skipped (gen: a generator; …)", or "" when nothing was skipped. */
function skippedPart(skipped: ReadonlyArray<ISkippedName>, shown: number): string {
  if (!skipped.length) {
    return '';
  }
  return shown > 0
    ? `, ${skipped.length} skipped (${skippedPhrase(skipped, shown)})`
    : `, ${skipped.length} skipped`;
}

/** `text(shown)` with the most skipped names spelled out that fits a toast. */
function fitToast(text: (shown: number) => string): string {
  for (let shown = SKIPPED_SHOWN; shown > 0; shown--) {
    const candidate = text(shown);
    if (candidate.length <= TOAST_MAX) {
      return candidate;
    }
  }
  return text(0);
}

/** "Hibernated: 42 variables saved, 2 skipped (gen: a generator) · 3.2 GiB · 4 GPUs freed". */
export function hibernatedText(result: IHibernateResult): string {
  const saved = `${plural(result.saved.length, 'variable')} saved`;
  const tail = [formatBytes(result.bytes)];
  if (isNumber(result.gpus_freed) && result.gpus_freed > 0) {
    tail.push(`${plural(result.gpus_freed, 'GPU')} freed`);
  }
  return fitToast(shown =>
    [`Hibernated: ${saved}${skippedPart(result.skipped, shown)}`, ...tail].join(' · ')
  );
}

/**
 * "Restored: 42 variables, 1 skipped (model: needs module torch) · replaced
 * the kernel's x, y · w: on the CPU, its GPU is not here".
 */
export function restoredText(result: IRestoreResult): string {
  const count = plural(result.restored.length, 'variable');
  const notes = Array.isArray(result.notes) ? result.notes : [];
  const replaced = Array.isArray(result.replaced) ? result.replaced : [];
  return fitToast(shown =>
    [
      `Restored: ${count}${skippedPart(result.skipped, shown)}`,
      ...(replaced.length ? [`replaced the kernel's ${namesPhrase(replaced, shown)}`] : []),
      ...notes.slice(0, shown).map(n => `${n.name}: ${shortReason(n.note)}`)
    ].join(' · ')
  );
}

/** "x, y and 3 more": the first `shown` names. */
function namesPhrase(names: ReadonlyArray<string>, shown: number): string {
  const named = names.slice(0, Math.max(1, shown));
  const more = names.length - named.length;
  return more > 0 ? `${named.join(', ')} and ${more} more` : named.join(', ');
}

/** An alert's Hibernate button: "Hibernate: free 4 GPUs, keep your variables". */
export function hibernateActionLabel(gpus: number | null): string {
  const what = isNumber(gpus) && gpus > 0 ? plural(gpus, 'GPU') : 'its GPUs';
  return `Hibernate: free ${what}, keep your variables`;
}

/** "14:02", or "5 Dec 14:02" when it was not today. */
function whenText(created: number, now: Date): string {
  const at = new Date(created * 1000);
  const clock = formatClock(created);
  if (at.toDateString() === now.toDateString()) {
    return `at ${clock}`;
  }
  const day = at.toLocaleDateString(undefined, { day: 'numeric', month: 'short' });
  return `on ${day} ${clock}`;
}

/** What a snapshot is now: waiting, being restored (by the server), or restored. */
export type SnapshotState = 'hibernated' | 'restoring' | 'restored';

/** The snapshot's state, from the server's doc. */
export function snapshotState(snapshot: ISnapshot): SnapshotState {
  if (snapshot.restoring) {
    return 'restoring';
  }
  return isNumber(snapshot.restored) ? 'restored' : 'hibernated';
}

/**
 * The banner's line: "Hibernated at 14:02 · 3.2 GiB · 42 variables";
 * "Restoring 42 variables (3.2 GiB)…" while the server loads it into the
 * notebook's new kernel; "Restored at 14:30 · 3.2 GiB · 42 variables ·
 * snapshot kept" after; and "· storage USD 0.07/month" where its store has a
 * price (with `currency`).
 */
export function bannerText(
  snapshot: ISnapshot,
  now: Date = new Date(),
  currency?: string | null
): string {
  const state = snapshotState(snapshot);
  const count = plural(snapshot.saved.length, 'variable');
  if (state === 'restoring') {
    return `Restoring ${count} (${formatBytes(snapshot.bytes)})…`;
  }
  const parts =
    state === 'restored'
      ? [
          `Restored ${whenText(snapshot.restored as number, now)}`,
          formatBytes(snapshot.bytes),
          count,
          'snapshot kept'
        ]
      : [`Hibernated ${whenText(snapshot.created, now)}`, formatBytes(snapshot.bytes), count];
  const monthly = snapshot.storage_cost_per_month;
  if (isNumber(monthly) && currency) {
    parts.push(`storage ${formatMoney(monthly, currency)}/month`);
  }
  return parts.join(' · ');
}

/**
 * Where the snapshot is kept and what that costs: "Stored in s3://b/p/id:
 * USD 0.01 so far, USD 0.07 a month", or "no price" where the store has none
 * (null from the server; an older server that does not say gives no line).
 */
export function storageText(snapshot: ISnapshot, currency?: string | null): string | null {
  const where = snapshot.store && snapshot.store !== 'local' ? `in ${snapshot.store}` : 'locally';
  const soFar = snapshot.storage_cost;
  const monthly = snapshot.storage_cost_per_month;
  if (isNumber(soFar) && isNumber(monthly) && currency) {
    return (
      `Stored ${where}: ${formatMoney(soFar, currency)} so far, ` +
      `${formatMoney(monthly, currency)} a month`
    );
  }
  if (soFar === null || monthly === null) {
    return `Stored ${where}: no price for its store`;
  }
  return null;
}

/**
 * The banner's tooltip: the names saved and those skipped with why, what
 * hibernating has not spent so far (`waste_avoided`, in `currency`), and
 * where it is stored at what cost (`storageText`).
 */
export function bannerTitle(snapshot: ISnapshot, currency?: string | null): string {
  const lines = [`Saved: ${snapshot.saved.join(', ') || 'nothing'}`];
  if (snapshot.restore_error) {
    lines.push(`Not restored into the notebook's new kernel: ${snapshot.restore_error}`);
  }
  for (const s of snapshot.skipped) {
    lines.push(`Not saved: ${s.name} (${s.reason})`);
  }
  const avoided = snapshot.waste_avoided;
  if (isNumber(avoided) && avoided > 0 && currency) {
    lines.push(`Not spent while hibernated: ${formatMoney(avoided, currency)}`);
  }
  const storage = storageText(snapshot, currency);
  if (storage) {
    lines.push(storage);
  }
  return lines.join('\n');
}

/**
 * The newest snapshot of `notebook` among `snapshots`, leaving out `ignore`d
 * ids: hibernated (offered for Restore), being restored, or restored (the
 * snapshot is kept: the banner stays, for discarding it).
 */
export function newestSnapshot(
  snapshots: ReadonlyArray<ISnapshot>,
  notebook: string,
  ignore: ReadonlySet<string> = new Set()
): ISnapshot | null {
  let newest: ISnapshot | null = null;
  for (const s of snapshots) {
    if (ignore.has(s.id) || !s.notebook || !samePath(s.notebook, notebook)) {
      continue;
    }
    if (!newest || s.created > newest.created) {
      newest = s;
    }
  }
  return newest;
}

/** What the banner is doing: nothing, restoring or discarding. */
export type BannerBusy = 'restore' | 'discard' | null;

export namespace SnapshotBannerModel {
  export interface IOptions {
    /** The notebook's server-relative path (null: not known yet). */
    notebook: string | null;
    serverSettings?: ServerConnection.ISettings;
  }
}

/** How often the banner asks again while the server restores a snapshot (ms). */
export const RESTORING_POLL_MS = 1000;

/**
 * The snapshot a notebook's banner shows: the newest of the notebook's that
 * this page has not discarded, hibernated (Restore, Discard), being restored
 * by the server into the notebook's new kernel (resume on use: asked again
 * every `RESTORING_POLL_MS` until done) or restored (kept on the server:
 * Discard). `changed` after each answer and each step of a restore or discard.
 */
export class SnapshotBannerModel {
  constructor(options: SnapshotBannerModel.IOptions) {
    this._notebook = options.notebook;
    this._serverSettings = options.serverSettings;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The snapshot offered, or null (the banner is hidden). */
  get snapshot(): ISnapshot | null {
    return this._snapshot;
  }

  get busy(): BannerBusy {
    return this._busy;
  }

  /** Why the last restore or discard failed, or null. */
  get error(): string | null {
    return this._error;
  }

  get notebook(): string | null {
    return this._notebook;
  }

  /** The currency of the snapshots' `waste_avoided` (the list's), or null. */
  get currency(): string | null {
    return this._currency;
  }

  /** A renamed notebook: forget its snapshot until `refresh()` answers. */
  set notebook(path: string | null) {
    if (path !== this._notebook) {
      this._notebook = path;
      this._set(null);
    }
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    this._disposed = true;
    if (this._poll !== null) {
      clearTimeout(this._poll);
      this._poll = null;
    }
    Signal.clearData(this);
  }

  /**
   * Ask the server for the notebook's snapshots. A server without the route
   * (404) or an error leaves the banner as it was: it is an offer, not a figure.
   */
  async refresh(): Promise<void> {
    const notebook = this._notebook;
    if (!notebook || this._busy) {
      return;
    }
    const asked = ++this._asked;
    let snapshots: ISnapshot[];
    try {
      const list = await listSnapshots(notebook, this._serverSettings);
      snapshots = Array.isArray(list?.snapshots) ? list.snapshots : [];
      this._currency = typeof list?.currency === 'string' ? list.currency : null;
    } catch (error) {
      if (!isNotFound(error)) {
        console.warn('costguard: could not list snapshots', error);
      }
      return;
    }
    if (asked === this._asked && notebook === this._notebook && !this._disposed) {
      this._set(newestSnapshot(snapshots, notebook, this._done));
      this._pollWhileRestoring();
    }
  }

  /** Whether the snapshot shown is one Restore applies to (hibernated, not being restored). */
  get restorable(): boolean {
    return this._snapshot !== null && snapshotState(this._snapshot) === 'hibernated';
  }

  /** While the server restores the snapshot, ask again shortly (once at a time). */
  private _pollWhileRestoring(): void {
    if (this._poll !== null || this._disposed || !this._snapshot?.restoring) {
      return;
    }
    this._poll = setTimeout(() => {
      this._poll = null;
      void this.refresh();
    }, RESTORING_POLL_MS);
  }

  /**
   * Load the snapshot into the kernel `kernel()` gives (the notebook's, ready);
   * the banner goes once it is loaded. Null when there is nothing to restore
   * or it failed (`error` says why).
   */
  async restore(kernel: () => Promise<string>): Promise<IRestoreResult | null> {
    const snapshot = this._snapshot;
    if (!snapshot || this._busy || !this.restorable) {
      return null;
    }
    // A kernel JupyterLab has just started is busy a moment with the page's own requests:
    // the server waits for it to become idle (a while) before it answers 409 "busy".
    return this._step('restore', snapshot, async () =>
      restoreSnapshot(snapshot.id, await kernel(), this._serverSettings)
    );
  }

  /** Delete the snapshot on the server; the banner goes. */
  async discard(): Promise<boolean> {
    const snapshot = this._snapshot;
    if (!snapshot || this._busy) {
      return false;
    }
    const done = await this._step('discard', snapshot, () =>
      deleteSnapshot(snapshot.id, this._serverSettings)
    );
    return done !== null;
  }

  private async _step<T>(
    busy: Exclude<BannerBusy, null>,
    snapshot: ISnapshot,
    run: () => Promise<T>
  ): Promise<T | null> {
    this._busy = busy;
    this._error = null;
    this._asked++; // an answer asked before this step is stale
    this._emit();
    try {
      const result = await run();
      this._busy = null;
      if (busy === 'discard') {
        this._done.add(snapshot.id);
        this._set(null);
      } else {
        // restored: the snapshot is kept on the server; the banner says so, for Discard
        this._set({ ...snapshot, restoring: null, restored: Date.now() / 1000 });
        void this.refresh();
      }
      return result;
    } catch (error) {
      this._busy = null;
      this._error = errorMessage(error);
      this._emit();
      return null;
    }
  }

  private _set(snapshot: ISnapshot | null): void {
    const same =
      snapshot?.id === this._snapshot?.id &&
      snapshot?.bytes === this._snapshot?.bytes &&
      snapshot?.restored === this._snapshot?.restored &&
      !snapshot?.restoring === !this._snapshot?.restoring &&
      snapshot?.restore_error === this._snapshot?.restore_error &&
      snapshot?.waste_avoided === this._snapshot?.waste_avoided &&
      snapshot?.storage_cost === this._snapshot?.storage_cost;
    this._snapshot = snapshot;
    if (!same || (snapshot === null && this._error)) {
      this._error = snapshot === null ? null : this._error;
      this._emit();
    }
  }

  private _emit(): void {
    if (!this._disposed) {
      this._changed.emit();
    }
  }

  private _notebook: string | null;
  private _serverSettings?: ServerConnection.ISettings;
  private _snapshot: ISnapshot | null = null;
  private _busy: BannerBusy = null;
  private _error: string | null = null;
  private _currency: string | null = null;
  private _asked = 0;
  private _done = new Set<string>();
  private _poll: ReturnType<typeof setTimeout> | null = null;
  private _disposed = false;
  private _changed = new Signal<this, void>(this);
}
