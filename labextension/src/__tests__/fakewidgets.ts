/**
 * Just enough of `@jupyter-widgets/base` for the cost widget's model and
 * view: `jest.mock('@jupyter-widgets/base', () => jest.requireActual('./fakewidgets'))`.
 */

type Handler = () => void;

export class DOMWidgetModel {
  static serializers = {};
  attributes: Record<string, unknown>;
  widget_manager: unknown = { kernel: { id: 'manager-kernel' } };
  private _handlers: Record<string, Handler[]> = {};
  constructor(attributes: Record<string, unknown> = {}) {
    this.attributes = { ...this.defaults(), ...attributes };
  }
  defaults(): Record<string, unknown> {
    return {};
  }
  get(key: string): unknown {
    return this.attributes[key];
  }
  set(key: string, value: unknown): void {
    this.attributes[key] = value;
    (this._handlers[`change:${key}`] ?? []).forEach(h => h());
  }
  on(event: string, handler: Handler): void {
    (this._handlers[event] ??= []).push(handler);
  }
}

export class DOMWidgetView {
  el: HTMLElement = document.createElement('div');
  model: DOMWidgetModel;
  displayed: Promise<unknown> = Promise.resolve();
  constructor(options: { model: DOMWidgetModel }) {
    this.model = options.model;
  }
  listenTo(model: DOMWidgetModel, events: string, handler: Handler): void {
    events.split(' ').forEach(e => model.on(e, handler));
  }
  remove(): unknown {
    this.el.remove();
    return this;
  }
}
