/**
 * Helpers that map the document a user is looking at to costguard's
 * notebook documents, and follow which notebook that is. No DOM, no
 * JupyterLab imports.
 */
import type { ISignal } from '@lumino/signaling';

import type { INotebookDoc } from './api';

/** A path without leading or trailing slashes (`/work/a.ipynb` → `work/a.ipynb`). */
export function normalizePath(path: string | null | undefined): string {
  return (path ?? '').replace(/^\/+/, '').replace(/\/+$/, '');
}

/**
 * The path without a drive prefix (`RTC:work/a.ipynb` → `work/a.ipynb`, as
 * JupyterLab names documents of additional drives such as real-time
 * collaboration), or null when it has none.
 */
export function withoutDrive(path: string): string | null {
  const local = normalizePath(path);
  const colon = local.indexOf(':');
  const slash = local.indexOf('/');
  if (colon <= 0 || (slash >= 0 && slash < colon)) {
    return null;
  }
  return normalizePath(local.slice(colon + 1));
}

/** Server-relative paths a document path may stand for, most likely first. */
function candidates(path: string | null | undefined): string[] {
  const local = normalizePath(path);
  if (!local) {
    return [];
  }
  const stripped = withoutDrive(local);
  return stripped ? [local, stripped] : [local];
}

/** Whether a server path (from the API) names the document at `path`. */
export function samePath(serverPath: string, path: string): boolean {
  const server = normalizePath(serverPath);
  return server !== '' && candidates(path).includes(server);
}

/**
 * The notebook document for the active path, or null when there is no active
 * notebook or it has not spent anything yet (the server lists only notebooks
 * with spend).
 */
export function selectNotebook(
  notebooks: ReadonlyArray<INotebookDoc>,
  path: string | null | undefined
): INotebookDoc | null {
  for (const wanted of candidates(path)) {
    const found = notebooks.find(n => normalizePath(n.path) === wanted);
    if (found) {
      return found;
    }
  }
  return null;
}

/** The file name of a path (`work/explore.ipynb` → `explore.ipynb`). */
export function baseName(path: string): string {
  const local = normalizePath(path);
  const slash = local.lastIndexOf('/');
  return slash < 0 ? local : local.slice(slash + 1);
}

/** A notebook panel, as far as following the current one goes. */
export interface INotebookPanelLike {
  readonly context: { readonly path: string; readonly pathChanged: ISignal<any, string> };
}

/** A notebook tracker (INotebookTracker), as far as following the current one goes. */
export interface INotebookTrackerLike<P extends INotebookPanelLike> {
  readonly currentWidget: P | null;
  readonly currentChanged: ISignal<any, P | null>;
}

/**
 * Call `changed` with the server path of the current notebook (null: none)
 * now, whenever another one becomes current, and when the current one is
 * renamed. `localPath` drops the drive (`contents.localPath`).
 */
export function followCurrentNotebook<P extends INotebookPanelLike>(
  tracker: INotebookTrackerLike<P>,
  localPath: (path: string) => string,
  changed: (path: string | null) => void
): void {
  let watched: P | null = null;
  const update = (): void => {
    const panel = tracker.currentWidget;
    if (panel !== watched) {
      watched?.context.pathChanged.disconnect(update);
      panel?.context.pathChanged.connect(update);
      watched = panel;
    }
    changed(panel ? localPath(panel.context.path) : null);
  };
  tracker.currentChanged.connect(update);
  update();
}
