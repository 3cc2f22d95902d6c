/**
 * Base of the objects that hold connections (signals, listeners, observers,
 * polls) until they are disposed: `dispose()` marks the object disposed and
 * runs `onDispose()` once; later calls do nothing. Lumino's `IDisposable`.
 */
export abstract class Disposable {
  /** Whether `dispose()` has run. */
  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** Release what the object holds (once; `isDisposed` is true from the start of it). */
  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this.onDispose();
  }

  /** What `dispose()` releases; subclasses that extend it call `super.onDispose()`. */
  protected abstract onDispose(): void;

  private _isDisposed = false;
}
