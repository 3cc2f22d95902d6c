/**
 * The status-bar item: renders a CostStatusModel, nothing else.
 */
import { Widget } from '@lumino/widgets';

import { CostStatusModel } from './model';
import {
  ICON,
  LOADING_TEXT,
  OFFLINE_TEXT,
  SEPARATOR,
  summarizeStatus
} from './format';

/** DOM id of the status-bar item (one per page). */
export const STATUS_ID = 'jp-costguard-status';

/** CSS classes used by the status item; stable for browser tests. */
export namespace CostStatusClasses {
  export const root = 'jp-costguard-status';
  export const icon = 'jp-costguard-icon';
  export const part = 'jp-costguard-part';
  export const separator = 'jp-costguard-separator';
  export const simulated = 'jp-costguard-simulated';
  export const offline = 'jp-costguard-offline';
  export const loading = 'jp-costguard-loading';
  /** Per-part classes: jp-costguard-instance, -rate, -unpriced, -spend. */
  export function forPart(kind: string): string {
    return `jp-costguard-${kind}`;
  }
}

/**
 * Status-bar widget showing e.g.
 * `⚡ p4d.24xlarge · USD 32.77/h · spent USD 1.23 [simulated]`.
 *
 * `data-costguard-state` on the root is `loading`, `ok` or `offline`.
 */
export class CostStatusWidget extends Widget {
  constructor(model: CostStatusModel) {
    super();
    this._model = model;
    this.id = STATUS_ID;
    this.addClass(CostStatusClasses.root);
    this.addClass('jp-StatusBar-TextItem');
    model.changed.connect(this._render, this);
    this._render();
  }

  get model(): CostStatusModel {
    return this._model;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._model.changed.disconnect(this._render, this);
    super.dispose();
  }

  private _render(): void {
    const node = this.node;
    const model = this._model;
    const state = model.state;
    node.dataset.costguardState = state;
    node.classList.toggle(CostStatusClasses.offline, state === 'offline');
    node.classList.toggle(CostStatusClasses.loading, state === 'loading');
    node.textContent = '';

    const status = model.status;
    if (state !== 'ok' || !status) {
      const text = state === 'offline' ? OFFLINE_TEXT : LOADING_TEXT;
      node.appendChild(span(CostStatusClasses.part, text));
      node.title =
        state === 'offline'
          ? `Costguard server extension unreachable${
              model.error?.message ? `: ${model.error.message}` : ''
            }`
          : 'Costguard: waiting for the first status';
      delete node.dataset.costguardSimulated;
      return;
    }

    const summary = summarizeStatus(status, model.summaryOptions);
    node.appendChild(span(CostStatusClasses.icon, ICON));
    summary.parts.forEach((part, index) => {
      node.appendChild(
        span(CostStatusClasses.separator, index === 0 ? ' ' : SEPARATOR)
      );
      node.appendChild(
        span(
          `${CostStatusClasses.part} ${CostStatusClasses.forPart(part.kind)}`,
          part.text
        )
      );
    });
    if (summary.simulated) {
      const badge = span(CostStatusClasses.simulated, 'simulated');
      badge.id = CostStatusClasses.simulated;
      badge.title = 'Numbers come from a replayed trace, not this machine';
      node.appendChild(badge);
      node.dataset.costguardSimulated = 'true';
    } else {
      delete node.dataset.costguardSimulated;
    }
    node.title = summary.tooltip;
  }

  private _model: CostStatusModel;
}

function span(className: string, text: string): HTMLSpanElement {
  const el = document.createElement('span');
  el.className = className;
  el.textContent = text;
  return el;
}
