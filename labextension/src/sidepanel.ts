/**
 * Base of the side panels (cost panel, Jobs panel): a widget that renders a
 * model only while it is visible, tells the model when it is shown or hidden
 * (the model polls more, or at all, only then), and listens to DOM events on
 * its node while attached.
 */
import type { ISignal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

/** What a side panel needs of its model. */
export interface IPanelModel {
  readonly changed: ISignal<any, void>;
}

export abstract class SidePanel<M extends IPanelModel> extends Widget {
  /**
   * @param model what the panel renders
   * @param events DOM events handled by `handleEvent` while attached
   */
  constructor(model: M, events: ReadonlyArray<string>) {
    super();
    this._model = model;
    this._events = events;
    model.changed.connect(this._onChanged, this);
  }

  get model(): M {
    return this._model;
  }

  abstract handleEvent(event: Event): void;

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._model.changed.disconnect(this._onChanged, this);
    this.setShown(false);
    super.dispose();
  }

  /** Render the model. */
  protected abstract render(): void;

  /** Tell the model whether the panel is shown. */
  protected abstract setShown(shown: boolean): void;

  protected onAfterAttach(): void {
    for (const type of this._events) {
      this.node.addEventListener(type, this);
    }
    if (this.isVisible) {
      this.setShown(true);
      this.render();
    }
  }

  protected onBeforeDetach(): void {
    for (const type of this._events) {
      this.node.removeEventListener(type, this);
    }
    this.setShown(false);
  }

  protected onAfterShow(): void {
    this.setShown(true);
    this.render();
  }

  protected onAfterHide(): void {
    this.setShown(false);
  }

  private _onChanged(): void {
    // Hidden panels render when shown again (onAfterShow).
    if (this.isVisible) {
      this.render();
    }
  }

  private _events: ReadonlyArray<string>;
  private _model: M;
}
