/**
 * @jest-environment jsdom
 *
 * AlertToastText: costguard's notifications show their whole text where
 * JupyterLab rendered them cut at 140 characters, and only they are marked.
 * The DOM below is what JupyterLab 4.6 renders (apputils-extension's
 * `createContent`: one text node per line, `<br>` between, the cut line
 * ending in `…`).
 */
import type { Notification } from '@jupyterlab/apputils';
import { Signal } from '@lumino/signaling';

import {
  AlertToastText,
  JUPYTERLAB_MAX_MESSAGE_LENGTH,
  MESSAGE_MARK,
  TOAST_MARK,
  shownMessage
} from '../alerttoasttext';

class FakeList {
  changed = new Signal<this, Notification.IChange>(this);
  notifications: Notification.INotification[] = [];

  add(id: string, message: string, data?: unknown): Notification.INotification {
    const n = {
      id,
      message,
      type: 'warning',
      options: { data },
      createdAt: 0,
      modifiedAt: 0
    } as unknown as Notification.INotification;
    this.notifications.unshift(n);
    this.changed.emit({ type: 'added', notification: n });
    return n;
  }

  update(id: string, message: string): void {
    const n = this.notifications.find(x => x.id === id)!;
    const next = { ...n, message } as Notification.INotification;
    this.notifications = this.notifications.map(x => (x.id === id ? next : x));
    this.changed.emit({ type: 'updated', notification: next });
  }

  remove(id: string): void {
    const n = this.notifications.find(x => x.id === id)!;
    this.notifications = this.notifications.filter(x => x.id !== id);
    this.changed.emit({ type: 'removed', notification: n });
  }
}

/** JupyterLab's rendering of a message, inside a toast. */
function renderToast(host: HTMLElement, message: string): HTMLElement {
  const toast = document.createElement('div');
  toast.className = 'Toastify__toast jp-Notification-Toast-warning';
  const body = document.createElement('div');
  body.className = 'Toastify__toast-body';
  const inner = document.createElement('div');
  const text = document.createElement('div');
  text.className = 'jp-toast-message';
  setMessage(text, message);
  inner.appendChild(text);
  const bar = document.createElement('div');
  bar.className = 'jp-toast-buttonBar';
  inner.appendChild(bar);
  body.appendChild(inner);
  toast.appendChild(body);
  host.appendChild(toast);
  return text;
}

function setMessage(node: HTMLElement, message: string): void {
  node.textContent = '';
  shownMessage(message)
    .split('\n')
    .forEach((part, i) => {
      if (i > 0) {
        node.appendChild(document.createElement('br'));
      }
      node.appendChild(document.createTextNode(part));
    });
}

const flush = () => new Promise(resolve => setTimeout(resolve, 0));

const LONG =
  'explore.ipynb holds 6 GiB on GPU 0 of this p4de.24xlarge and the GPU has been below ' +
  '3% for the last 45 minutes, which wastes about USD 38.40 per hour; save your work ' +
  'and shut the kernel down.';

let made: AlertToastText[] = [];

function setup() {
  const root = document.createElement('div');
  document.body.appendChild(root);
  const list = new FakeList();
  const fixer = new AlertToastText({ manager: list, root });
  made.push(fixer);
  return { root, list, fixer };
}

afterEach(() => {
  made.forEach(f => f.dispose());
  made = [];
  document.body.textContent = '';
});

describe('shownMessage', () => {
  it('cuts like JupyterLab does', () => {
    expect(JUPYTERLAB_MAX_MESSAGE_LENGTH).toBe(140);
    expect(shownMessage('short')).toBe('short');
    const cut = shownMessage('x'.repeat(200));
    expect(cut).toHaveLength(141);
    expect(cut.endsWith('…')).toBe(true);
  });
});

describe('AlertToastText', () => {
  it('puts the whole text back into a costguard toast, and marks it', async () => {
    const { root, list } = setup();
    const message = `GPU idle\n${LONG}`;
    list.add('n1', message, { costguardAlertId: 'a1' });
    const container = document.createElement('div');
    container.id = 'react-toastify-container';
    root.appendChild(container);
    const text = renderToast(container, message);
    expect(text.textContent!.endsWith('…')).toBe(true);
    await flush();
    expect(text.textContent).toBe(`GPU idle${LONG}`);
    expect(text.querySelectorAll('br')).toHaveLength(1);
    expect(text.getAttribute(MESSAGE_MARK)).toBe('a1');
    expect(text.closest('.Toastify__toast')!.getAttribute(TOAST_MARK)).toBe('a1');
  });

  it('marks short costguard messages without changing them', async () => {
    const { root, list } = setup();
    const container = document.createElement('div');
    container.id = 'react-toastify-container';
    root.appendChild(container);
    list.add('n1', 'GPU idle\nshort', { costguardAlertId: 'a1' });
    const text = renderToast(container, 'GPU idle\nshort');
    await flush();
    expect(text.textContent).toBe('GPU idleshort');
    expect(text.closest('.Toastify__toast')!.getAttribute(TOAST_MARK)).toBe('a1');
  });

  it('leaves other notifications alone, even long ones', async () => {
    const { root, list } = setup();
    const container = document.createElement('div');
    container.id = 'react-toastify-container';
    root.appendChild(container);
    list.add('n1', LONG + ' (not ours)', { other: true });
    list.add('n2', 'unrelated');
    const text = renderToast(container, LONG + ' (not ours)');
    await flush();
    expect(text.textContent!.endsWith('…')).toBe(true);
    expect(text.closest('.Toastify__toast')!.hasAttribute(TOAST_MARK)).toBe(false);
  });

  it('works in the notification centre, and again when JupyterLab re-renders', async () => {
    const { root, list } = setup();
    list.add('n1', `GPU idle\n${LONG}`, { costguardAlertId: 'a1' });
    const popup = document.createElement('div');
    const centre = document.createElement('div');
    centre.className = 'jp-Notification-Center';
    popup.appendChild(centre);
    root.appendChild(popup);
    await flush();
    const text = renderToast(centre, `GPU idle\n${LONG}`);
    await flush();
    expect(text.textContent).toBe(`GPU idle${LONG}`);
    // Escalated: JupyterLab renders the new (cut) text into the same nodes.
    const next = `GPU idle for 2 h\n${LONG} Now critical.`;
    list.update('n1', next);
    setMessage(text, next);
    await flush();
    expect(text.textContent).toBe(`GPU idle for 2 h${LONG} Now critical.`);
  });

  it('forgets removed notifications and stops when disposed', async () => {
    const { root, list, fixer } = setup();
    const container = document.createElement('div');
    container.id = 'react-toastify-container';
    root.appendChild(container);
    list.add('n1', `A\n${LONG}`, { costguardAlertId: 'a1' });
    list.remove('n1');
    const text = renderToast(container, `A\n${LONG}`);
    await flush();
    expect(text.textContent!.endsWith('…')).toBe(true);
    fixer.dispose();
    list.add('n2', `B\n${LONG}`, { costguardAlertId: 'a2' });
    const other = renderToast(container, `B\n${LONG}`);
    await flush();
    expect(other.textContent!.endsWith('…')).toBe(true);
  });

  it('keeps a toast marked for its own alert when another has the same text', async () => {
    const { root, list } = setup();
    const container = document.createElement('div');
    container.id = 'react-toastify-container';
    root.appendChild(container);
    list.add('n1', `Training-sized\n${LONG}`, { costguardAlertId: 'a1' });
    const first = renderToast(container, `Training-sized\n${LONG}`);
    await flush();
    // the first is closed (its toast still fading out) as a second alert, same text, comes
    list.remove('n1');
    list.add('n2', `Training-sized\n${LONG}`, { costguardAlertId: 'a2' });
    const second = renderToast(container, `Training-sized\n${LONG}`);
    await flush();
    expect(first.getAttribute(MESSAGE_MARK)).toBe('a1');
    expect(first.closest('.Toastify__toast')!.getAttribute(TOAST_MARK)).toBe('a1');
    expect(second.getAttribute(MESSAGE_MARK)).toBe('a2');
    expect(second.textContent).toBe(`Training-sized${LONG}`);
    expect(container.querySelectorAll(`[${TOAST_MARK}="a2"]`)).toHaveLength(1);
  });

  it('knows the notifications already there when it starts', async () => {
    const root = document.createElement('div');
    document.body.appendChild(root);
    const list = new FakeList();
    list.add('n1', `A\n${LONG}`, { costguardAlertId: 'a1' });
    const container = document.createElement('div');
    container.id = 'react-toastify-container';
    root.appendChild(container);
    const text = renderToast(container, `A\n${LONG}`);
    made.push(new AlertToastText({ manager: list, root }));
    expect(text.textContent).toBe(`A${LONG}`);
  });
});
