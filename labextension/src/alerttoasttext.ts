/**
 * The whole text of costguard's notifications, in the toast and in the
 * notification centre.
 *
 * JupyterLab 4 cuts every notification's message at 140 characters and adds
 * `…` when it renders it (`MAX_MESSAGE_LENGTH` in apputils-extension's
 * notification plugin, in JavaScript, not CSS), and nothing of a
 * notification's `data` reaches the DOM, so no CSS can tell costguard's
 * toasts from others. AlertToastText knows the full message of each
 * costguard notification (those whose `options.data.costguardAlertId` is
 * set, from the NotificationManager), finds where JupyterLab rendered it
 * (a `.jp-toast-message` whose text is that message as JupyterLab cuts it),
 * puts the rest of the text back into the last text node React rendered
 * (React only rewrites a text node when its own text changes, and then this
 * runs again), and marks what it found:
 *
 * - `.jp-toast-message[data-costguard-alert-id]`: the message, whole;
 * - `.Toastify__toast[data-costguard-alert]`: the toast (or the centre's
 *   item), which `style/alerts.css` uses to let costguard's buttons wrap as
 *   whole buttons, one line each, without touching anyone else's toasts.
 *
 * Lines of the message after the cut are joined with spaces (costguard's
 * messages are "title\nmessage"). It watches only the body's own children
 * (cheap) and, inside, the toast container and the notification centre.
 */
import type { Notification } from '@jupyterlab/apputils';
import type { ISignal } from '@lumino/signaling';

import { Disposable } from './disposable';

/** Where JupyterLab cuts a notification's message. */
export const JUPYTERLAB_MAX_MESSAGE_LENGTH = 140;

/** Attribute on a costguard toast (value: the alert id). */
export const TOAST_MARK = 'data-costguard-alert';

/** Attribute on a costguard message element (value: the alert id). */
export const MESSAGE_MARK = 'data-costguard-alert-id';

/** The message as JupyterLab shows it. */
export function shownMessage(message: string): string {
  return message.length > JUPYTERLAB_MAX_MESSAGE_LENGTH
    ? message.slice(0, JUPYTERLAB_MAX_MESSAGE_LENGTH) + '…'
    : message;
}

/** What the manager offers that this needs. */
export interface INotificationList {
  readonly changed: ISignal<any, Notification.IChange>;
  readonly notifications: ReadonlyArray<Notification.INotification>;
}

interface IEntry {
  id: string;
  alertId: string;
  message: string;
  /** How many lines JupyterLab renders (its last one cut). */
  shownLines: number;
  truncated: boolean;
}

/** Whether a node is where notifications render (toasts, the centre). */
function isHost(node: Node): node is HTMLElement {
  if (node.nodeType !== 1) {
    return false;
  }
  const element = node as HTMLElement;
  return (
    element.id === 'react-toastify-container' ||
    element.classList.contains('jp-Notification-Center') ||
    element.querySelector('.jp-Notification-Center, .Toastify') !== null
  );
}

export namespace AlertToastText {
  export interface IOptions {
    /** Usually `Notification.manager`. */
    manager: INotificationList;
    /** Where JupyterLab attaches toasts and popups (default `document.body`). */
    root?: HTMLElement;
  }
}

/** Shows costguard notifications' whole text (see the file's header). */
export class AlertToastText extends Disposable {
  constructor(options: AlertToastText.IOptions) {
    super();
    this._manager = options.manager;
    this._root = options.root ?? document.body;
    for (const n of this._manager.notifications) {
      this._register(n);
    }
    this._manager.changed.connect(this._onChanged, this);
    this._rootObserver = new MutationObserver(records => {
      for (const record of records) {
        record.addedNodes.forEach(node => this._watch(node));
      }
    });
    this._rootObserver.observe(this._root, { childList: true });
    this._hostObserver = new MutationObserver(records => {
      const hosts = new Set<HTMLElement>();
      for (const record of records) {
        const target =
          record.target.nodeType === 1
            ? (record.target as HTMLElement)
            : record.target.parentElement;
        const message = target?.closest<HTMLElement>('.jp-toast-message');
        if (message) {
          this._fix(message);
        } else if (target) {
          hosts.add(target);
        }
      }
      hosts.forEach(host => this.fixAll(host));
    });
    this._root.childNodes.forEach(node => this._watch(node));
  }

  protected onDispose(): void {
    this._manager.changed.disconnect(this._onChanged, this);
    this._rootObserver.disconnect();
    this._hostObserver.disconnect();
    this._entries.clear();
  }

  /** Fix every costguard message below `node` (default: the root). */
  fixAll(node: ParentNode = this._root): void {
    node
      .querySelectorAll<HTMLElement>('.jp-toast-message')
      .forEach(message => this._fix(message));
  }

  private _watch(node: Node): void {
    if (!isHost(node) || this._hosts.has(node)) {
      return;
    }
    this._hosts.add(node);
    this._hostObserver.observe(node, {
      childList: true,
      subtree: true,
      characterData: true
    });
    this.fixAll(node);
  }

  private _onChanged(_: unknown, change: Notification.IChange): void {
    if (change.type === 'removed') {
      this._unregister(change.notification.id);
    } else {
      this._register(change.notification);
    }
  }

  private _register(n: Notification.INotification): void {
    const data = n.options?.data as { costguardAlertId?: unknown } | undefined;
    const alertId = data?.costguardAlertId;
    if (typeof alertId !== 'string' || typeof n.message !== 'string') {
      return;
    }
    this._unregister(n.id);
    const shown = shownMessage(n.message);
    const entry: IEntry = {
      id: n.id,
      alertId,
      message: n.message,
      shownLines: shown.split('\n').length,
      truncated: shown !== n.message
    };
    this._entries.set(n.id, entry);
    this._byShown.set(shown.replace(/\n/g, ''), entry);
    this._byFull.set(this._fullText(entry), entry);
  }

  private _unregister(id: string): void {
    const entry = this._entries.get(id);
    if (!entry) {
      return;
    }
    this._entries.delete(id);
    for (const map of [this._byShown, this._byFull]) {
      for (const [key, value] of Array.from(map)) {
        if (value === entry) {
          map.delete(key);
        }
      }
    }
  }

  /** The text content of the message element once fixed. */
  private _fullText(entry: IEntry): string {
    const lines = entry.message.split('\n');
    const kept = lines.slice(0, entry.shownLines - 1).join('');
    return kept + lines.slice(entry.shownLines - 1).join(' ');
  }

  private _fix(message: HTMLElement): void {
    const text = message.textContent ?? '';
    const full = this._byFull.get(text);
    const entry = full ?? this._byShown.get(text);
    if (!entry) {
      return;
    }
    const marked = message.getAttribute(MESSAGE_MARK);
    if (marked !== null && marked !== entry.alertId) {
      // React keys each toast by its notification: an element marked for one
      // alert never shows another's. Two alerts can have the same text, and
      // the first one's toast may still be fading out when the second comes.
      return;
    }
    if (!full && entry.truncated && !this._expand(message, entry)) {
      return;
    }
    if (message.getAttribute(MESSAGE_MARK) !== entry.alertId) {
      message.setAttribute(MESSAGE_MARK, entry.alertId);
    }
    const toast = message.closest('.Toastify__toast');
    if (toast && toast.getAttribute(TOAST_MARK) !== entry.alertId) {
      toast.setAttribute(TOAST_MARK, entry.alertId);
    }
  }

  /** Put the rest of the message into the last (cut) text node. */
  private _expand(message: HTMLElement, entry: IEntry): boolean {
    let last: Text | null = null;
    const nodes = message.childNodes;
    for (let i = nodes.length - 1; i >= 0; i--) {
      if (nodes[i].nodeType === 3) {
        last = nodes[i] as Text;
        break;
      }
    }
    if (!last || !(last.nodeValue ?? '').endsWith('…')) {
      return false;
    }
    const lines = entry.message.split('\n');
    last.nodeValue = lines.slice(entry.shownLines - 1).join(' ');
    return true;
  }

  private _byFull = new Map<string, IEntry>();
  private _byShown = new Map<string, IEntry>();
  private _entries = new Map<string, IEntry>();
  private _hostObserver: MutationObserver;
  private _hosts = new WeakSet<Node>();
  private _manager: INotificationList;
  private _root: HTMLElement;
  private _rootObserver: MutationObserver;
}
