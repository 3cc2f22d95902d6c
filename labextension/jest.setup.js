// jsdom lacks a few DOM classes that lumino touches at import time.
if (typeof window !== 'undefined') {
  if (typeof window.DragEvent === 'undefined') {
    window.DragEvent = class DragEvent extends window.MouseEvent {};
  }
  if (typeof window.PointerEvent === 'undefined') {
    window.PointerEvent = class PointerEvent extends window.MouseEvent {};
  }
}
