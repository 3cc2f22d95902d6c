/**
 * The status-bar item: renders a CostStatusModel, nothing else. A click asks
 * the plugin (through `clicked`) to open the cost panel.
 */
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { el } from './dom';
import { ICON, SEPARATOR } from './format';
import { LOADING_TEXT, OFFLINE_TEXT, summarizeStatus } from './statussummary';
import type { CostStatusModel } from './statusmodel';

/** DOM id of the status-bar item (one per page). */
export const STATUS_ID = 'jp-costguard-status';

/** DOM id of the status item's "simulated" pill. */
export const SIMULATED_ID = 'jp-costguard-simulated';

/** CSS classes used by the status item; stable for browser tests. */
export namespace CostStatusClasses {
  export const root = 'jp-costguard-status';
  export const icon = 'jp-costguard-icon';
  export const part = 'jp-costguard-part';
  export const separator = 'jp-costguard-separator';
  export const simulated = 'jp-costguard-simulated';
  export const offline = 'jp-costguard-offline';
  export const loading = 'jp-costguard-loading';
  /** Present while an alert is active for the active notebook. */
  export const alert = 'jp-costguard-alert';
  /** Present while the server says the price is out of date (`price.stale`). */
  export const priceStale = 'jp-costguard-price-stale';
  /**
   * Present while a JupyterHub budget of this server is spent (`hub_budgets`):
   * the hub starts no GPU server until it resets.
   */
  export const budgetSpent = 'jp-costguard-budget-spent';
  /**
   * Per-part classes: jp-costguard-instance, -rate, -unpriced, -notebook,
   * -spend, -budget.
   */
  export function forPart(kind: string): string {
    return `jp-costguard-${kind}`;
  }
}

/**
 * Status-bar widget showing e.g.
 * `⚡ p4d.24xlarge · USD 32.77/h · notebook USD 1.23 [simulated]`.
 *
 * Data attributes on the root: `data-costguard-state` (`loading`, `ok`,
 * `offline`), `data-costguard-notebook` (active notebook path, when any),
 * `data-costguard-severity` (`info`, `warning`, `critical`, while an alert is
 * active for that notebook), `data-costguard-simulated="true"`. The class
 * `jp-costguard-price-stale` marks a price the server says is out of date,
 * `jp-costguard-budget-spent` a spent JupyterHub budget (with a `budget spent`
 * part, and the tooltip's budget lines saying until when).
 */
export class CostStatusWidget extends Widget {
  constructor(model: CostStatusModel) {
    super();
    this._model = model;
    this.id = STATUS_ID;
    this.addClass(CostStatusClasses.root);
    this.addClass('jp-StatusBar-TextItem');
    this.node.setAttribute('role', 'button');
    this.node.tabIndex = 0;
    model.changed.connect(this._render, this);
    this._render();
  }

  get model(): CostStatusModel {
    return this._model;
  }

  /** Emitted when the user clicks the item (or presses Enter/Space on it). */
  get clicked(): ISignal<this, void> {
    return this._clicked;
  }

  handleEvent(event: Event): void {
    switch (event.type) {
      case 'click':
        this._clicked.emit();
        break;
      case 'keydown': {
        const key = (event as KeyboardEvent).key;
        if (key === 'Enter' || key === ' ') {
          event.preventDefault();
          this._clicked.emit();
        }
        break;
      }
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._model.changed.disconnect(this._render, this);
    Signal.clearData(this);
    super.dispose();
  }

  protected onAfterAttach(): void {
    this.node.addEventListener('click', this);
    this.node.addEventListener('keydown', this);
  }

  protected onBeforeDetach(): void {
    this.node.removeEventListener('click', this);
    this.node.removeEventListener('keydown', this);
  }

  private _render(): void {
    const node = this.node;
    const model = this._model;
    const state = model.state;
    node.dataset.costguardState = state;
    node.classList.toggle(CostStatusClasses.offline, state === 'offline');
    node.classList.toggle(CostStatusClasses.loading, state === 'loading');
    node.textContent = '';
    const active = model.activeNotebook;
    if (active) {
      node.dataset.costguardNotebook = active.path;
    } else {
      delete node.dataset.costguardNotebook;
    }

    const status = model.status;
    // The sample these figures come from (epoch seconds): browser tests measure the
    // server-sample-to-pixels latency against it.
    if (status?.time) {
      node.dataset.costguardSampleTime = String(status.time);
    }
    if (state !== 'ok' || !status) {
      const text = state === 'offline' ? OFFLINE_TEXT : LOADING_TEXT;
      node.appendChild(el('span', CostStatusClasses.part, text));
      node.title =
        state === 'offline'
          ? `Costguard server extension unreachable${
              model.error?.message ? `: ${model.error.message}` : ''
            }`
          : 'Costguard: waiting for the first status';
      delete node.dataset.costguardSimulated;
      node.classList.remove(CostStatusClasses.priceStale);
      node.classList.remove(CostStatusClasses.budgetSpent);
      this._setSeverity(null);
      return;
    }

    const summary = summarizeStatus(status, model.summaryOptions, {
      notebook: active,
      alerts: model.activeAlerts
    });
    node.appendChild(el('span', CostStatusClasses.icon, ICON));
    summary.parts.forEach((part, index) => {
      node.appendChild(
        el('span', CostStatusClasses.separator, index === 0 ? ' ' : SEPARATOR)
      );
      node.appendChild(
        el(
          'span',
          `${CostStatusClasses.part} ${CostStatusClasses.forPart(part.kind)}`,
          part.text
        )
      );
    });
    const simulated = summary.simulated || model.notebooksSimulated;
    if (simulated) {
      const badge = el('span', CostStatusClasses.simulated, 'simulated');
      badge.id = SIMULATED_ID;
      badge.title = 'Numbers come from a replayed trace, not this machine';
      node.appendChild(badge);
      node.dataset.costguardSimulated = 'true';
    } else {
      delete node.dataset.costguardSimulated;
    }
    // The list can lag the notebook document's own summary: take the highest.
    this._setSeverity(model.activeSeverity ?? summary.severity);
    node.classList.toggle(CostStatusClasses.priceStale, summary.stale);
    node.classList.toggle(CostStatusClasses.budgetSpent, summary.budgetSpent);
    node.title = summary.tooltip;
  }

  private _setSeverity(severity: string | null): void {
    const node = this.node;
    node.classList.toggle(CostStatusClasses.alert, !!severity);
    if (severity) {
      node.dataset.costguardSeverity = severity;
    } else {
      delete node.dataset.costguardSeverity;
    }
  }

  private _clicked = new Signal<this, void>(this);
  private _model: CostStatusModel;
}
