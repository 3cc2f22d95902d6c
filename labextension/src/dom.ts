/**
 * Small DOM helpers for the widgets that render models by hand.
 */

/** Create an element with a class name and text. */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** Set an element's text only when it differs (keeps selection and layout). */
export function setText(node: Element, text: string): void {
  if (node.textContent !== text) {
    node.textContent = text;
  }
}

/** Set or remove (null) an attribute only when it differs. */
export function setAttr(node: Element, name: string, value: string | null): void {
  if (value === null) {
    if (node.hasAttribute(name)) {
      node.removeAttribute(name);
    }
  } else if (node.getAttribute(name) !== value) {
    node.setAttribute(name, value);
  }
}

/**
 * Put `rows` into `body` in order, reusing the row element of each key.
 * Returns the row elements by key (the new cache).
 */
export function syncRows<T, E extends Element = HTMLTableRowElement>(
  body: Element,
  cache: Map<string, E>,
  rows: ReadonlyArray<T>,
  keyOf: (row: T) => string,
  create: (row: T) => E,
  update: (tr: E, row: T) => void
): Map<string, E> {
  const next = new Map<string, E>();
  rows.forEach((row, index) => {
    const key = keyOf(row);
    if (next.has(key)) {
      return;
    }
    let tr = cache.get(key);
    if (!tr) {
      tr = create(row);
    }
    update(tr, row);
    next.set(key, tr);
    const current = body.children[index];
    if (current !== tr) {
      body.insertBefore(tr, current ?? null);
    }
  });
  for (const [key, tr] of cache) {
    if (!next.has(key)) {
      tr.remove();
    }
  }
  // Anything else left over (e.g. an empty-state row).
  while (body.children.length > next.size) {
    body.lastElementChild?.remove();
  }
  return next;
}
