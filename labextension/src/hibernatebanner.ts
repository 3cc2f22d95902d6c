/**
 * The banner at the top of a notebook that has a snapshot: "Hibernated at
 * 14:02 · 3.2 GiB · 42 variables · storage USD 0.07/month · [Restore] [Discard]";
 * "Restoring 42 variables (3.2 GiB)…" while the server loads it into the
 * notebook's new kernel; "Restored at 14:30 · … · snapshot kept · [Discard]"
 * (the storage part where its store has a price; the tooltip says "no price"). It renders a
 * SnapshotBannerModel and routes its two buttons to `onAction` (the plugin
 * asks before discarding and finds the kernel to restore into); hidden while
 * the model offers no snapshot.
 *
 * Stable DOM hooks: `.jp-costguard-hibernate-banner` (`hidden`,
 * `data-snapshot-id`, `data-busy`, `data-state`: hibernated, restoring or
 * restored), `.jp-costguard-hibernate-text`, `.jp-costguard-hibernate-error`
 * (`hidden` unless the last step, or the server's restore into the notebook's
 * new kernel, failed), buttons `.jp-costguard-hibernate-restore` (shown while
 * the snapshot is hibernated) and `.jp-costguard-hibernate-discard`
 * (`data-action`; disabled while a step or the server's restore runs).
 */
import { Widget } from '@lumino/widgets';

import { el, setAttr, setText } from './dom';
import { bannerText, bannerTitle, snapshotState, SnapshotBannerModel } from './hibernatemodel';

/** What the banner's buttons ask for. */
export type BannerAction = 'restore' | 'discard';

export namespace HibernateBanner {
  export interface IOptions {
    model: SnapshotBannerModel;
    onAction?: (action: BannerAction) => void;
  }
}

/** The snapshot banner of one notebook. */
export class HibernateBanner extends Widget {
  constructor(options: HibernateBanner.IOptions) {
    super();
    this.model = options.model;
    this._onAction = options.onAction;
    this.addClass('jp-costguard-hibernate-banner');
    setAttr(this.node, 'role', 'status');
    this._text = el('span', 'jp-costguard-hibernate-text');
    this._restore = this._button('restore', 'Restore', 'jp-mod-accept');
    this._discard = this._button('discard', 'Discard', 'jp-mod-warn');
    this._error = el('span', 'jp-costguard-hibernate-error');
    this.node.append(this._text, this._restore, this._discard, this._error);
    this.node.addEventListener('click', this);
    this.model.changed.connect(this.render, this);
    this.render();
  }

  readonly model: SnapshotBannerModel;

  handleEvent(event: Event): void {
    const target = (event.target as HTMLElement | null)?.closest<HTMLElement>('[data-action]');
    if (event.type === 'click' && target && !(target as HTMLButtonElement).disabled) {
      this._onAction?.(target.dataset.action as BannerAction);
    }
  }

  /** Show the model's snapshot, or hide. */
  render(): void {
    const snapshot = this.model.snapshot;
    const busy = this.model.busy;
    const error = this.model.error;
    this.setHidden(!snapshot && !error);
    setAttr(this.node, 'data-snapshot-id', snapshot?.id ?? null);
    setAttr(this.node, 'data-busy', busy);
    setText(this._text, snapshot ? bannerText(snapshot, new Date(), this.model.currency) : '');
    this._text.title = snapshot ? bannerTitle(snapshot, this.model.currency) : '';
    const state = snapshot ? snapshotState(snapshot) : null;
    setAttr(this.node, 'data-state', state);
    this._discard.disabled = busy !== null || state === 'restoring';
    this._discard.hidden = !snapshot;
    this._restore.disabled = busy !== null;
    this._restore.hidden = !snapshot || !(this.model.restorable || busy === 'restore');
    setText(this._restore, busy === 'restore' ? 'Restoring…' : 'Restore');
    // the page's own step's error, else why the server's restore into the new kernel failed
    const why = error ?? (state === 'hibernated' && snapshot?.restore_error
      ? `not restored into the notebook's new kernel: ${snapshot.restore_error}`
      : null);
    setText(this._error, why ? `Costguard: ${why}` : '');
    this._error.hidden = !why;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.node.removeEventListener('click', this);
    this.model.changed.disconnect(this.render, this);
    super.dispose();
  }

  private _button(action: BannerAction, label: string, mod: string): HTMLButtonElement {
    const b = el('button', `jp-costguard-button ${mod} jp-costguard-hibernate-${action}`, label);
    b.type = 'button';
    b.dataset.action = action;
    b.title =
      action === 'restore'
        ? 'Load the saved variables into this notebook\'s kernel (starts one if needed)'
        : 'Delete this snapshot (asks first)';
    return b;
  }

  private _onAction?: (action: BannerAction) => void;
  private _text: HTMLSpanElement;
  private _restore: HTMLButtonElement;
  private _discard: HTMLButtonElement;
  private _error: HTMLSpanElement;
}
