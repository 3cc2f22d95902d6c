/**
 * The in-notebook cost widget: an ipywidgets 8 model and view.
 *
 * The Python side (`jupyter_costguard.widget`) only creates the model with a
 * few synced traits (`kernel_id`, `refresh_seconds`, `notebook`). Each view
 * owns a CostWidgetFeed (`costwidgetfeed.ts`), which polls the costguard REST
 * API from the page, and renders what it finds: it keeps updating while a
 * long cell runs, never sends a kernel message, and no thread in the kernel
 * prints or writes to an Output widget. The feed stands by while the page is
 * hidden or the view is detached, and is disposed when the view is removed.
 *
 * Expanded view: the `▸ chart` toggle (`.jp-costguard-widget-expand`,
 * `aria-expanded`; only for a kernel with a notebook) opens
 * `.jp-costguard-widget-chart` below the line, holding the spend chart of the
 * notebook (`spendchartsection.ts`, without the notebook selector); the root
 * has `data-expanded` `true`/`false`. The chart polls `GET history` once a
 * minute only while expanded and attached; it is kept (not re-created) across
 * refreshes of the line.
 */
import { DOMWidgetModel, DOMWidgetView } from '@jupyter-widgets/base';
import { ServerConnection } from '@jupyterlab/services';

import {
  canExpand,
  CHART_TOGGLE_TEXT,
  CHART_TOGGLE_TITLE,
  DEFAULT_WIDGET_REFRESH_SECONDS,
  ICostWidgetSummary,
  MODULE_NAME,
  MODULE_VERSION,
  WIDGET_CHART_LAYOUT,
  WIDGET_LOADING_TEXT
} from './costwidgetsummary';
import { CostWidgetFeed } from './costwidgetfeed';
import { el } from './dom';
import { ICON, SEPARATOR } from './format';
import type { ModelPoll } from './polledmodel';
import { SpendChartModel } from './spendchartmodel';
import { SpendChartSection } from './spendchartsection';

/** CSS classes of the widget; stable for browser tests. */
export namespace CostWidgetClasses {
  export const root = 'jp-costguard-widget';
  export const line = 'jp-costguard-widget-line';
  export const icon = 'jp-costguard-widget-icon';
  export const part = 'jp-costguard-widget-part';
  export const separator = 'jp-costguard-widget-separator';
  export const simulated = 'jp-costguard-widget-simulated';
  /** Whose server this is, under JupyterHub (`alice · `). */
  export const owner = 'jp-costguard-widget-owner';
  export const alert = 'jp-costguard-widget-alert';
  export const offline = 'jp-costguard-widget-offline';
  export const waiting = 'jp-costguard-widget-waiting';
  export const loading = 'jp-costguard-widget-loading';
  /** The toggle of the expanded view (`aria-expanded`). */
  export const expand = 'jp-costguard-widget-expand';
  /** The expanded view: the notebook's spend chart. */
  export const chart = 'jp-costguard-widget-chart';
  /** Per-part classes: -spend, -waste, -gpu, -idle, -rate. */
  export function forPart(kind: string): string {
    return `jp-costguard-widget-${kind}`;
  }
}

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

/**
 * View of the cost widget: renders its feed in one or two lines.
 *
 * Root attributes: `data-state` (`loading`, `waiting`, `ok`, `offline`),
 * `data-updated` (changes on every successful refresh), `data-kernel-id`,
 * `data-notebook`.
 */
export class CostWidgetView extends DOMWidgetView {
  render(): void {
    this.el.classList.add(CostWidgetClasses.root);
    this.el.dataset.state = 'loading';
    this.el.dataset.expanded = 'false';
    this._renderMessage(CostWidgetClasses.loading, WIDGET_LOADING_TEXT, '');

    const feed = new CostWidgetFeed({
      serverSettings: serverSettings ?? ServerConnection.makeSettings(),
      kernelIds: () => [
        this.model.get('kernel_id') as string | null,
        managerKernelId(this.model)
      ],
      notebook: () => this.model.get('notebook') as string | null,
      refreshSeconds: this.model.get('refresh_seconds'),
      // Stand by also while the view is not in the document (closed tab,
      // windowed-out cell); it resumes on the next tick.
      standby: () => !this.el.isConnected
    });
    this._feed = feed;
    feed.changed.connect(this._onChanged, this);
    this.listenTo(this.model, 'change:refresh_seconds', () => {
      feed.refreshSeconds = this.model.get('refresh_seconds');
    });
    this.listenTo(this.model, 'change:kernel_id change:notebook', () => {
      void this._feed?.poll.refresh();
    });
    feed.start();
    // The first tick may have found the view detached: refresh once shown.
    void this.displayed.then(() => this._feed?.poll.refresh());
  }

  remove(): any {
    this._feed?.dispose();
    this._feed = null;
    this._chart?.dispose();
    this._chart?.model.dispose();
    this._chart = null;
    return super.remove();
  }

  /** Whether the expanded view (the chart) is open. */
  get expanded(): boolean {
    return this._expanded;
  }
  set expanded(open: boolean) {
    if (open === this._expanded) {
      return;
    }
    this._expanded = open;
    this.el.dataset.expanded = open ? 'true' : 'false';
    const summary = this._feed?.summary ?? null;
    if (summary) {
      this._render(summary);
    }
  }

  /** The expanded view's chart, once it was opened (for tests). */
  get chart(): SpendChartSection | null {
    return this._chart;
  }

  /** The feed's poll (for tests). */
  get poll(): ModelPoll | null {
    return this._feed?.poll ?? null;
  }

  private _onChanged(feed: CostWidgetFeed): void {
    if (feed.state === 'offline') {
      this._renderMessage(
        CostWidgetClasses.offline,
        feed.offlineText,
        feed.error?.message ?? ''
      );
      this.el.dataset.state = 'offline';
    } else if (feed.summary) {
      this._render(feed.summary);
    }
  }

  /**
   * Empty the root but for the chart: re-rendering the line every refresh
   * must not detach the chart (its hover readout and polling carry on).
   */
  private _clear(): void {
    const keep = this._chart?.node ?? null;
    for (const child of Array.from(this.el.childNodes)) {
      if (child !== keep) {
        this.el.removeChild(child);
      }
    }
  }

  /** Add a node of the line's part: before the chart, when it is shown. */
  private _add(node: HTMLElement): void {
    const chart = this._chart?.node;
    this.el.insertBefore(node, chart && chart.parentNode === this.el ? chart : null);
  }

  /** The toggle at the end of the line. */
  private _toggle(): HTMLButtonElement {
    const open = this._expanded;
    const button = el(
      'button',
      CostWidgetClasses.expand,
      open ? CHART_TOGGLE_TEXT.expanded : CHART_TOGGLE_TEXT.collapsed
    );
    button.type = 'button';
    button.title = open ? CHART_TOGGLE_TITLE.expanded : CHART_TOGGLE_TITLE.collapsed;
    button.setAttribute('aria-expanded', open ? 'true' : 'false');
    button.addEventListener('click', event => {
      event.stopPropagation();
      this.expanded = !this._expanded;
    });
    return button;
  }

  /** The chart of `notebook`, made on first use; polls only while shown. */
  private _chartFor(notebook: string): SpendChartSection {
    let chart = this._chart;
    if (!chart) {
      const model = new SpendChartModel({
        serverSettings: serverSettings ?? ServerConnection.makeSettings(),
        notebook,
        standby: () => !this.el.isConnected
      });
      chart = this._chart = new SpendChartSection({
        model,
        notebookChoice: false,
        layout: WIDGET_CHART_LAYOUT,
        className: CostWidgetClasses.chart
      });
    }
    chart.model.notebook = notebook;
    return chart;
  }

  private _markUpdated(): void {
    const now = Math.max(Date.now(), this._updated + 1);
    this._updated = now;
    this.el.dataset.updated = String(now);
  }

  private _renderMessage(className: string, text: string, title: string): void {
    const root = this.el;
    this._clear();
    this._chart?.setShown(false);
    this._chart?.node.remove();
    root.appendChild(el('span', `${CostWidgetClasses.part} ${className}`, text));
    root.title = title;
  }

  private _render(summary: ICostWidgetSummary): void {
    const root = this.el;
    root.dataset.state = summary.state;
    if (summary.kernelId) {
      root.dataset.kernelId = summary.kernelId;
    } else {
      delete root.dataset.kernelId;
    }
    if (summary.notebook) {
      root.dataset.notebook = summary.notebook;
    } else {
      delete root.dataset.notebook;
    }
    this._clear();
    root.title = summary.title;

    const line = el('div', CostWidgetClasses.line);
    line.appendChild(el('span', CostWidgetClasses.icon, ICON));
    if (summary.owner) {
      const owner = el('span', CostWidgetClasses.owner, summary.owner);
      owner.title = 'JupyterHub user (server)';
      line.appendChild(owner);
      line.appendChild(el('span', CostWidgetClasses.separator, SEPARATOR));
    }
    if (summary.state === 'waiting') {
      line.appendChild(
        el(
          'span',
          `${CostWidgetClasses.part} ${CostWidgetClasses.waiting}`,
          summary.text
        )
      );
    } else {
      summary.parts.forEach((part, index) => {
        if (index > 0) {
          line.appendChild(
            el('span', CostWidgetClasses.separator, SEPARATOR)
          );
        }
        const node = el(
          'span',
          `${CostWidgetClasses.part} ${CostWidgetClasses.forPart(part.kind)}`,
          part.text
        );
        node.title = part.title;
        line.appendChild(node);
      });
    }
    if (summary.simulated) {
      const badge = el('span', CostWidgetClasses.simulated, 'simulated');
      badge.title = 'GPU figures come from a replayed trace, not this machine';
      line.appendChild(badge);
    }
    const expandable = canExpand(summary);
    if (expandable) {
      line.appendChild(this._toggle());
    }
    this._add(line);

    if (summary.alert) {
      const severity = summary.alert.severity;
      const alert = el(
        'div',
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
      this._add(alert);
    }
    const open = expandable && this._expanded;
    if (open) {
      const chart = this._chartFor(summary.notebook as string);
      if (chart.node.parentNode !== root) {
        root.appendChild(chart.node);
      }
      chart.setShown(true);
    } else if (this._chart) {
      this._chart.setShown(false);
      this._chart.node.remove();
    }
    this._markUpdated();
  }

  private _chart: SpendChartSection | null = null;
  private _expanded = false;
  private _feed: CostWidgetFeed | null = null;
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
