/**
 * Whether the "Run as job" toolbar button was Shift-clicked (review the cells
 * and resources first): JupyterLab runs a toolbar command without its event.
 */

/** The bits of a click event the tracker reads. */
export interface IClickLike {
  shiftKey: boolean;
  target: EventTarget | null;
}

/**
 * Remembers whether the last click on a command's toolbar button
 * (`[data-command="<id>"]`, as JupyterLab renders command buttons) had Shift
 * held: the toolbar runs the command without the event.
 */
export class ShiftClickTracker {
  constructor(
    readonly command: string,
    readonly windowMs = 1500,
    private _now: () => number = Date.now
  ) {}

  /** Record a click (a document listener, capture phase). */
  handleEvent(event: IClickLike): void {
    const target = event.target as { closest?: (s: string) => unknown } | null;
    const hit =
      target && typeof target.closest === 'function'
        ? target.closest(`[data-command="${this.command}"]`)
        : null;
    this._last = hit ? { shift: event.shiftKey, time: this._now() } : null;
  }

  /** Whether the command runs from a Shift-click just now (asked once). */
  consume(): boolean {
    const last = this._last;
    this._last = null;
    return !!last && last.shift && this._now() - last.time <= this.windowMs;
  }

  private _last: { shift: boolean; time: number } | null = null;
}
