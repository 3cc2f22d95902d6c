/**
 * The cost panel's Alerts section: one row per alert (severity, title, the
 * whole message wrapping, notebook, age), its actions as buttons that run
 * exactly what the notification's buttons run (`runAlertAction`), and a
 * "Show dismissed" checkbox that lists dismissed, snoozed and resolved alerts
 * too, greyed, with their state. Renders an AlertsModel, only while the panel
 * is shown (the panel calls `setShown`). Fits the ~300 px sidebar: rows are
 * blocks, buttons wrap as whole buttons.
 *
 * Stable DOM hooks: `.jp-costguard-alerts-section` (`data-state`
 * `loading`/`ok`/`unavailable`/`offline`), its title
 * `.jp-costguard-alerts-title` (`Alerts (N)`, N active), the checkbox
 * `input.jp-costguard-alerts-show-dismissed`, the list
 * `.jp-costguard-alerts-list` of `.jp-costguard-alert-row[data-alert-id]
 * [data-state][data-severity]` (`data-state` `active`/`dismissed`/`snoozed`/
 * `resolved`; class `jp-mod-inactive` unless active) with parts
 * `.jp-costguard-alert-severity`, `-title`, `-message`, `-notebook`,
 * `-age`, `-state` and `.jp-costguard-alert-actions` holding
 * `button[data-alert-action]` (the action id); the empty state
 * `.jp-costguard-alerts-empty` ("No active alerts").
 */
import { Disposable } from './disposable';
import {
  actionCaption,
  actionDisplayType,
  actionLabel,
  ICommandRunner,
  IAlertActionContext,
  offeredActions,
  runAlertAction,
  safeUrl
} from './alertactions';
import { AlertsModel, alertRowState } from './alertsmodel';
import type { IAlert, IAlertAction } from './api';
import { el, setAttr, setText, syncRows } from './dom';
import { formatDuration, formatTime } from './format';
import { DEFAULT_SNOOZE_SECONDS, clampSnooze } from './settings';
import type { ICostguard } from './tokens';

/** Text of the empty list. */
export const NO_ALERTS_TEXT = 'No active alerts';

/** Text of the empty list with "Show dismissed" on. */
export const NO_ALERTS_AT_ALL_TEXT = 'No alerts';

/** What the section needs to tell the user something (Notification.manager). */
export interface INotifier {
  notify(message: string, type: 'error' | 'info', options: { autoClose?: number }): unknown;
}

export namespace AlertsSection {
  export interface IOptions {
    model: AlertsModel;
    commands: ICommandRunner;
    /** Failures and notes (default: `console.warn`). */
    notifier?: INotifier;
    /** Seconds a snooze lasts (default 3600). */
    snoozeSeconds?: number;
    /** Open an http(s) URL (default: a new tab). */
    openUrl?: (url: string) => void;
    /** Now, epoch seconds (tests). */
    now?: () => number;
  }
}

/** The Alerts section (see the file's header). */
export class AlertsSection extends Disposable {
  /**
   * The section as the cost panel plugin makes it: reads the shared alerts,
   * follows the snooze setting, reports through `notifier`.
   */
  static create(
    costguard: ICostguard,
    commands: ICommandRunner,
    notifier?: INotifier
  ): AlertsSection {
    const section = new AlertsSection({
      model: new AlertsModel({ feed: costguard.model }),
      commands,
      notifier,
      snoozeSeconds: costguard.settings.snoozeSeconds
    });
    costguard.settingsChanged.connect((_, settings) => {
      section.snoozeSeconds = settings.snoozeSeconds;
    });
    return section;
  }

  constructor(options: AlertsSection.IOptions) {
    super();
    this.model = options.model;
    this._commands = options.commands;
    this._notifier = options.notifier;
    this._snoozeSeconds = clampSnooze(options.snoozeSeconds ?? DEFAULT_SNOOZE_SECONDS);
    this._openUrl =
      options.openUrl ??
      ((url: string) => {
        window.open(url, '_blank', 'noopener,noreferrer');
      });
    this._now = options.now ?? (() => Date.now() / 1000);
    this.node = this._build();
    this.node.addEventListener('click', this);
    this.node.addEventListener('change', this);
    this.model.changed.connect(this._onChanged, this);
    // Every shared poll: the ages move on.
    this.model.feed.changed.connect(this._onChanged, this);
    this.render();
  }

  readonly model: AlertsModel;
  readonly node: HTMLElement;

  /** Seconds a snooze lasts (the buttons say it). */
  get snoozeSeconds(): number {
    return this._snoozeSeconds;
  }
  set snoozeSeconds(value: number) {
    const next = clampSnooze(value);
    if (next === this._snoozeSeconds) {
      return;
    }
    this._snoozeSeconds = next;
    this._actionKeys.clear();
    this.render();
  }

  /** The panel was shown or hidden: poll and render only while shown. */
  setShown(shown: boolean): void {
    this._shown = shown;
    this.model.shown = shown;
    if (shown) {
      this.render();
    }
  }

  protected onDispose(): void {
    this.node.removeEventListener('click', this);
    this.node.removeEventListener('change', this);
    this.model.changed.disconnect(this._onChanged, this);
    this.model.feed.changed.disconnect(this._onChanged, this);
    this.model.dispose();
    this.node.remove();
  }

  handleEvent(event: Event): void {
    const target = event.target as HTMLElement | null;
    if (!target) {
      return;
    }
    if (event.type === 'change' && target === this._toggle) {
      this.model.showDismissed = this._toggle.checked;
      return;
    }
    if (event.type !== 'click') {
      return;
    }
    const button = target.closest<HTMLButtonElement>('button[data-alert-action]');
    if (!button || !this.node.contains(button) || button.disabled) {
      return;
    }
    const row = button.closest<HTMLElement>('.jp-costguard-alert-row');
    const alert = this.model.alerts.find(a => a.id === row?.dataset.alertId);
    const index = Number(button.dataset.actionIndex);
    const action = alert ? offeredActions(alert)[index] : undefined;
    if (!alert || !action || action.id !== button.dataset.alertAction) {
      return;
    }
    this.runAction(alert, action);
  }

  /** Run an action as the notification's button would. */
  runAction(alert: IAlert, action: IAlertAction): void {
    const context: IAlertActionContext = {
      target: {
        dismissAlert: id => this.model.dismiss(id),
        snoozeAlert: (id, seconds) => this.model.snooze(id, seconds)
      },
      commands: this._commands,
      snoozeSeconds: this._snoozeSeconds,
      openUrl: this._openUrl,
      notify: (message, type) => {
        if (this._notifier) {
          this._notifier.notify(message, type, {
            autoClose: type === 'error' ? 8000 : 5000
          });
        } else {
          console.warn(message);
        }
      }
    };
    runAlertAction(alert, action, context);
  }

  /** Draw the model (rows keyed by alert id, updated in place). */
  render(): void {
    if (this.isDisposed) {
      return;
    }
    const model = this.model;
    const rows = model.alerts;
    const state = model.listState;
    setAttr(this.node, 'data-state', state);
    setText(this._title, `Alerts (${model.activeCount})`);
    this._title.title = model.showDismissed
      ? `${model.activeCount} active of ${rows.length} listed`
      : `${model.activeCount} active`;
    if (this._toggle.checked !== model.showDismissed) {
      this._toggle.checked = model.showDismissed;
    }
    for (const id of this._rows.keys()) {
      if (!rows.some(a => a.id === id)) {
        this._actionKeys.delete(id);
      }
    }
    this._rows = syncRows<IAlert, HTMLElement>(
      this._list,
      this._rows,
      rows,
      a => a.id,
      () => this._createRow(),
      (row, alert) => this._updateRow(row, alert)
    );
    const empty = rows.length === 0;
    this._empty.hidden = !empty;
    this._list.hidden = empty;
    if (empty) {
      setText(
        this._empty,
        state === 'ok'
          ? model.showDismissed
            ? NO_ALERTS_AT_ALL_TEXT
            : NO_ALERTS_TEXT
          : state === 'unavailable'
            ? 'This server raises no alerts.'
            : state === 'offline'
              ? 'costguard: offline'
              : 'Loading…'
      );
    }
  }

  private _onChanged(): void {
    if (this._shown) {
      this.render();
    }
  }

  private _build(): HTMLElement {
    const node = el('section', 'jp-costguard-section jp-costguard-alerts-section');
    const header = el('div', 'jp-costguard-alerts-header');
    this._title = el(
      'h3',
      'jp-costguard-section-title jp-costguard-alerts-title',
      'Alerts (0)'
    );
    header.appendChild(this._title);
    const label = el('label', 'jp-costguard-alerts-toggle');
    label.title = 'List dismissed, snoozed and resolved alerts too';
    this._toggle = el('input', 'jp-costguard-alerts-show-dismissed');
    this._toggle.type = 'checkbox';
    label.appendChild(this._toggle);
    label.appendChild(document.createTextNode('Show dismissed'));
    header.appendChild(label);
    node.appendChild(header);
    this._list = el('ul', 'jp-costguard-alerts-list');
    node.appendChild(this._list);
    this._empty = el('p', 'jp-costguard-alerts-empty', 'Loading…');
    node.appendChild(this._empty);
    return node;
  }

  private _createRow(): HTMLElement {
    const row = el('li', 'jp-costguard-alert-row');
    const head = el('div', 'jp-costguard-alert-head');
    head.appendChild(el('span', 'jp-costguard-alert-severity'));
    head.appendChild(el('span', 'jp-costguard-alert-title'));
    row.appendChild(head);
    row.appendChild(el('div', 'jp-costguard-alert-message'));
    const meta = el('div', 'jp-costguard-alert-meta');
    meta.appendChild(el('span', 'jp-costguard-alert-notebook'));
    meta.appendChild(el('span', 'jp-costguard-alert-age'));
    meta.appendChild(el('span', 'jp-costguard-alert-state'));
    row.appendChild(meta);
    row.appendChild(el('div', 'jp-costguard-alert-actions'));
    return row;
  }

  private _updateRow(row: HTMLElement, alert: IAlert): void {
    const state = alertRowState(alert);
    row.dataset.alertId = alert.id;
    setAttr(row, 'data-state', state);
    setAttr(row, 'data-severity', alert.severity);
    row.classList.toggle('jp-mod-inactive', state !== 'active');
    const q = (part: string) =>
      row.querySelector<HTMLElement>(`.jp-costguard-alert-${part}`)!;
    setText(q('severity'), alert.severity);
    const simulated = this.model.simulated ? ' (simulated)' : '';
    setText(q('title'), `${alert.title || alert.kind}${simulated}`);
    const message = q('message');
    setText(message, alert.message ?? '');
    message.hidden = !alert.message;
    const notebook = q('notebook');
    setText(notebook, alert.notebook ?? '');
    notebook.hidden = !alert.notebook;
    notebook.title = alert.notebook ? `Notebook ${alert.notebook}` : '';
    const age = q('age');
    const created = typeof alert.created === 'number' ? alert.created : null;
    setText(
      age,
      created === null ? '' : `${formatDuration(this._now() - created)} ago`
    );
    age.title = created === null ? '' : `Raised ${formatTime(created)}`;
    const stateNode = q('state');
    setText(stateNode, this._stateText(alert, state));
    stateNode.hidden = state === 'active';
    this._updateActions(q('actions'), alert, state);
  }

  private _stateText(alert: IAlert, state: string): string {
    if (state === 'snoozed' && typeof alert.snoozed_until === 'number') {
      const until = new Date(alert.snoozed_until * 1000);
      const hh = String(until.getHours()).padStart(2, '0');
      const mm = String(until.getMinutes()).padStart(2, '0');
      return `snoozed until ${hh}:${mm}`;
    }
    return state;
  }

  /** Buttons of an active alert (inactive ones offer none). */
  private _updateActions(box: HTMLElement, alert: IAlert, state: string): void {
    const actions = state === 'active' ? offeredActions(alert) : [];
    const key = JSON.stringify([
      actions.map(a => [a.id, a.label, safeUrl(a.args?.url) ?? '']),
      this._snoozeSeconds
    ]);
    if (this._actionKeys.get(alert.id) === key) {
      return;
    }
    this._actionKeys.set(alert.id, key);
    box.textContent = '';
    box.hidden = actions.length === 0;
    actions.forEach((action, index) => {
      const type = actionDisplayType(action);
      const button = el(
        'button',
        `jp-costguard-button jp-costguard-alert-action${
          type === 'default' ? '' : ` jp-mod-${type}`
        }`,
        actionLabel(action, this._snoozeSeconds)
      );
      button.type = 'button';
      button.dataset.alertAction = String(action.id);
      button.dataset.actionIndex = String(index);
      button.title = actionCaption(action, this._snoozeSeconds);
      box.appendChild(button);
    });
  }

  private _actionKeys = new Map<string, string>();
  private _commands: ICommandRunner;
  private _empty!: HTMLElement;
  private _list!: HTMLElement;
  private _notifier?: INotifier;
  private _now: () => number;
  private _openUrl: (url: string) => void;
  private _rows = new Map<string, HTMLElement>();
  private _shown = false;
  private _snoozeSeconds: number;
  private _title!: HTMLElement;
  private _toggle!: HTMLInputElement;
}
