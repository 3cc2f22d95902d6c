/**
 * The in-notebook cost widget: an ipywidgets 8 model and view.
 *
 * Mechanism: frontend polling. The Python side (`jupyter_costguard.widget`)
 * only creates the model with a few synced traits (`kernel_id`,
 * `refresh_seconds`, `notebook`). Each view polls the costguard REST API
 * itself, from the page, through `ServerConnection.makeRequest` on a lumino
 * `Poll`:
 *
 * - it keeps updating while a long cell runs, because nothing goes through
 *   the kernel (a busy kernel cannot answer comm messages, but the server
 *   keeps answering HTTP);
 * - it never sends a kernel message, so it never resets idle timers (culling,
 *   costguard's own idle detection);
 * - no thread in the kernel prints or writes to an Output widget.
 *
 * Per tick: `GET kernels` → this kernel (the `kernel_id` trait, else the
 * widget manager's kernel) → its notebook path (or the `notebook` override)
 * → `GET notebooks/<path>` and `GET alerts?notebook=<path>`; `GET status`
 * (instance and rate) every 15 s. The poll stands by while the page is
 * hidden or the view is detached, backs off on errors, and is disposed when
 * the view is removed.
 */
import { DOMWidgetModel, DOMWidgetView } from '@jupyter-widgets/base';
import { ServerConnection } from '@jupyterlab/services';
import { IPoll, Poll } from '@lumino/polling';

import { ICostStatus, requestAPI } from './api';
import {
  ALERTS_RECHECK_MS,
  DEFAULT_WIDGET_REFRESH_SECONDS,
  ICostAlertList,
  ICostKernelList,
  ICostNotebook,
  ICostWidgetSummary,
  MODULE_NAME,
  MODULE_VERSION,
  STATUS_MAX_AGE_MS,
  WIDGET_LOADING_TEXT,
  WIDGET_SEPARATOR,
  alertsEndpoint,
  clampWidgetRefresh,
  errorStatus,
  notebookEndpoint,
  notebookPathFor,
  offlineMessage,
  pickKernel,
  summarizeWidget
} from './costwidget-model';

/** CSS classes of the widget; stable for browser tests. */
export namespace CostWidgetClasses {
  export const root = 'jp-costguard-widget';
  export const line = 'jp-costguard-widget-line';
  export const icon = 'jp-costguard-widget-icon';
  export const part = 'jp-costguard-widget-part';
  export const separator = 'jp-costguard-widget-separator';
  export const simulated = 'jp-costguard-widget-simulated';
  export const alert = 'jp-costguard-widget-alert';
  export const offline = 'jp-costguard-widget-offline';
  export const waiting = 'jp-costguard-widget-waiting';
  export const loading = 'jp-costguard-widget-loading';
  /** Per-part classes: -spend, -waste, -gpu, -idle, -rate. */
  export function forPart(kind: string): string {
    return `jp-costguard-widget-${kind}`;
  }
}

/** Longest back-off after errors, ms. */
const MAX_BACKOFF_MS = 30 * 1000;

/** Server settings used by the views (set by the plugin; page default). */
let serverSettings: ServerConnection.ISettings | null = null;

/** Use these server settings for every cost widget view. */
export function setCostWidgetServerSettings(
  settings: ServerConnection.ISettings | null
): void {
  serverSettings = settings;
}

/**
 * Model of the cost widget; traits mirror `jupyter_costguard.widget.CostWidget`.
 */
export class CostWidgetModel extends DOMWidgetModel {
  defaults(): any {
    return {
      ...super.defaults(),
      _model_name: CostWidgetModel.model_name,
      _model_module: CostWidgetModel.model_module,
      _model_module_version: CostWidgetModel.model_module_version,
      _view_name: CostWidgetModel.view_name,
      _view_module: CostWidgetModel.view_module,
      _view_module_version: CostWidgetModel.view_module_version,
      kernel_id: '',
      refresh_seconds: DEFAULT_WIDGET_REFRESH_SECONDS,
      notebook: null
    };
  }

  static serializers = { ...DOMWidgetModel.serializers };

  static model_name = 'CostWidgetModel';
  static model_module = MODULE_NAME;
  static model_module_version = MODULE_VERSION;
  static view_name = 'CostWidgetView';
  static view_module = MODULE_NAME;
  static view_module_version = MODULE_VERSION;
}

/** What one successful refresh produced. */
type RefreshResult = ICostWidgetSummary;

/**
 * View of the cost widget: polls the REST API and renders one or two lines.
 *
 * Root attributes: `data-state` (`loading`, `waiting`, `ok`, `offline`),
 * `data-updated` (changes on every successful refresh), `data-kernel-id`,
 * `data-notebook`.
 */
export class CostWidgetView extends DOMWidgetView {
  render(): void {
    this.el.classList.add(CostWidgetClasses.root);
    this.el.dataset.state = 'loading';
    this._renderMessage(CostWidgetClasses.loading, WIDGET_LOADING_TEXT, '');

    this._poll = new Poll<RefreshResult, Error, 'standby'>({
      factory: () => this._refresh(),
      frequency: this._frequency(),
      name: 'jupyter-costguard:cost-widget',
      // Stand by while the page is hidden, and while the view is not in the
      // document (closed tab, windowed-out cell); resume on the next tick.
      standby: () => (this.el.isConnected ? 'when-hidden' : true)
    });
    this.listenTo(this.model, 'change:refresh_seconds', () => {
      if (this._poll) {
        this._poll.frequency = this._frequency();
      }
    });
    this.listenTo(this.model, 'change:kernel_id change:notebook', () => {
      void this._poll?.refresh();
    });
    // The first tick may have found the view detached: refresh once shown.
    void this.displayed.then(() => this._poll?.refresh());
  }

  remove(): any {
    this._poll?.dispose();
    this._poll = null;
    return super.remove();
  }

  /** The poll (for tests). */
  get poll(): Poll<RefreshResult, Error, 'standby'> | null {
    return this._poll;
  }

  /**
   * Fetch everything once and render it. Errors render the offline line and
   * are rethrown so that the poll backs off.
   */
  private async _refresh(): Promise<RefreshResult> {
    const settings = serverSettings ?? ServerConnection.makeSettings();
    const get = <T>(endpoint: string): Promise<T> =>
      requestAPI<T>(endpoint, { method: 'GET' }, settings);
    try {
      const kernels = await get<ICostKernelList>('kernels');
      const candidates = [
        this.model.get('kernel_id') as string | null,
        managerKernelId(this.model)
      ];
      const kernel = pickKernel(kernels.kernels, candidates);
      const override = this.model.get('notebook') as string | null;
      const path =
        kernel || override ? notebookPathFor(kernel, override) : null;

      const now = Date.now();
      const [notebook, alerts, status] = await Promise.all([
        path ? this._notebook(get, path) : Promise.resolve(null),
        path ? this._alerts(get, path, now) : Promise.resolve(null),
        this._status(get, now)
      ]);
      const summary = summarizeWidget({
        kernels,
        kernel,
        notebookPath: path,
        notebook,
        status,
        alerts
      });
      if (this._poll) {
        this._render(summary);
      }
      return summary;
    } catch (reason) {
      if (this._poll) {
        this._renderMessage(
          CostWidgetClasses.offline,
          offlineMessage(reason),
          reason instanceof Error ? reason.message : String(reason)
        );
        this.el.dataset.state = 'offline';
      }
      throw reason;
    }
  }

  private async _notebook(
    get: <T>(endpoint: string) => Promise<T>,
    path: string
  ): Promise<ICostNotebook | null> {
    try {
      return await get<ICostNotebook>(notebookEndpoint(path));
    } catch (reason) {
      if (errorStatus(reason) === 404) {
        return null; // nothing recorded for it yet
      }
      throw reason;
    }
  }

  private async _alerts(
    get: <T>(endpoint: string) => Promise<T>,
    path: string,
    now: number
  ): Promise<ICostAlertList['alerts'] | null> {
    const missing = this._alertsMissingSince;
    if (missing && now - missing < ALERTS_RECHECK_MS) {
      return null;
    }
    try {
      const list = await get<ICostAlertList>(alertsEndpoint(path));
      this._alertsMissingSince = 0;
      return Array.isArray(list?.alerts) ? list.alerts : [];
    } catch (reason) {
      if (errorStatus(reason) === 404) {
        // A server without alerts support: show none, ask again later.
        this._alertsMissingSince = now;
        return null;
      }
      throw reason;
    }
  }

  private async _status(
    get: <T>(endpoint: string) => Promise<T>,
    now: number
  ): Promise<ICostStatus | null> {
    if (this._status_ && now - this._statusAt < STATUS_MAX_AGE_MS) {
      return this._status_;
    }
    try {
      this._status_ = await get<ICostStatus>('status');
      this._statusAt = now;
    } catch (reason) {
      // The rate is secondary: keep the last one (or none), retry next tick.
      console.debug('jupyter-costguard: status unavailable', reason);
    }
    return this._status_;
  }

  private _frequency(): IPoll.Frequency {
    const interval =
      clampWidgetRefresh(this.model.get('refresh_seconds')) * 1000;
    return {
      interval,
      backoff: true,
      max: Math.max(MAX_BACKOFF_MS, interval)
    };
  }

  private _markUpdated(): void {
    const now = Math.max(Date.now(), this._updated + 1);
    this._updated = now;
    this.el.dataset.updated = String(now);
  }

  private _renderMessage(className: string, text: string, title: string): void {
    const el = this.el;
    el.textContent = '';
    el.appendChild(span(`${CostWidgetClasses.part} ${className}`, text));
    el.title = title;
  }

  private _render(summary: ICostWidgetSummary): void {
    const el = this.el;
    el.dataset.state = summary.state;
    if (summary.kernelId) {
      el.dataset.kernelId = summary.kernelId;
    } else {
      delete el.dataset.kernelId;
    }
    if (summary.notebook) {
      el.dataset.notebook = summary.notebook;
    } else {
      delete el.dataset.notebook;
    }
    el.textContent = '';
    el.title = summary.title;

    const line = div(CostWidgetClasses.line);
    line.appendChild(span(CostWidgetClasses.icon, '⚡'));
    if (summary.state === 'waiting') {
      line.appendChild(
        span(
          `${CostWidgetClasses.part} ${CostWidgetClasses.waiting}`,
          summary.text
        )
      );
    } else {
      summary.parts.forEach((part, index) => {
        if (index > 0) {
          line.appendChild(span(CostWidgetClasses.separator, WIDGET_SEPARATOR));
        }
        const node = span(
          `${CostWidgetClasses.part} ${CostWidgetClasses.forPart(part.kind)}`,
          part.text
        );
        node.title = part.title;
        line.appendChild(node);
      });
    }
    if (summary.simulated) {
      const badge = span(CostWidgetClasses.simulated, 'simulated');
      badge.title = 'GPU figures come from a replayed trace, not this machine';
      line.appendChild(badge);
    }
    el.appendChild(line);

    if (summary.alert) {
      const severity = summary.alert.severity;
      const alert = div(
        [
          CostWidgetClasses.line,
          CostWidgetClasses.alert,
          `${CostWidgetClasses.alert}-${severity}`
        ].join(' ')
      );
      alert.dataset.alertId = summary.alert.id;
      alert.dataset.severity = severity;
      alert.textContent = `⚠ ${summary.alert.text}`;
      alert.title = summary.alert.title;
      el.appendChild(alert);
    }
    this._markUpdated();
  }

  private _alertsMissingSince = 0;
  private _poll: Poll<RefreshResult, Error, 'standby'> | null = null;
  private _status_: ICostStatus | null = null;
  private _statusAt = 0;
  private _updated = 0;
}

/** Id of the kernel the page's widget manager talks to, if it has one. */
function managerKernelId(model: DOMWidgetModel): string | null {
  const manager = model.widget_manager as unknown as {
    kernel?: { id?: unknown } | null;
  };
  const id = manager?.kernel?.id;
  return typeof id === 'string' ? id : null;
}

function span(className: string, text: string): HTMLSpanElement {
  const el = document.createElement('span');
  el.className = className;
  el.textContent = text;
  return el;
}

function div(className: string): HTMLDivElement {
  const el = document.createElement('div');
  el.className = className;
  return el;
}
