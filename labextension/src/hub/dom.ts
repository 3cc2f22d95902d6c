/**
 * The pages' DOM helpers: elements from attributes and children (text is
 * always text: nothing is parsed as HTML), and SVG elements for the chart.
 */

export type Child = Node | string | number | null | undefined | false | Child[];
export type Attrs = Record<string, string | number | null | undefined | false>;

/** Append `child` (arrays flattened, null/undefined/false skipped, numbers and strings as text). */
export function add(parent: Node, child: Child): void {
  if (child === null || child === undefined || child === false) {
    return;
  }
  if (Array.isArray(child)) {
    child.forEach(c => add(parent, c));
    return;
  }
  parent.appendChild(
    typeof child === 'string' || typeof child === 'number'
      ? document.createTextNode(String(child))
      : child
  );
}

/** An element: `text` sets its text, `cls` its class, any other attribute as given (null, undefined and false: left out). */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs?: Attrs | null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) {
      continue;
    }
    if (k === 'text') {
      e.textContent = String(v);
    } else if (k === 'cls') {
      e.className = String(v);
    } else {
      e.setAttribute(k, String(v));
    }
  }
  children.forEach(c => add(e, c));
  return e;
}

const SVGNS = 'http://www.w3.org/2000/svg';

/** An SVG element with attributes and, optionally, text. */
export function sv(tag: string, attrs: Record<string, string | number> = {}, text?: string): SVGElement {
  const e = document.createElementNS(SVGNS, tag) as SVGElement;
  for (const [k, v] of Object.entries(attrs)) {
    e.setAttribute(k, String(v));
  }
  if (text !== undefined) {
    e.textContent = text;
  }
  return e;
}

/** The element with `id`; the shell has them all, so a missing one is a bug. */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const e = document.getElementById(id);
  if (!e) {
    throw new Error(`the page has no #${id}`);
  }
  return e as T;
}

/** Mark the button of `container` whose `attr` is `value` as selected. */
export function selectSeg(container: HTMLElement, attr: string, value: string): void {
  container.querySelectorAll('button').forEach(b => {
    b.setAttribute('aria-selected', b.getAttribute(attr) === value ? 'true' : 'false');
  });
}
