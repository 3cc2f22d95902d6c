/**
 * Types and request helpers for hibernation (`{baseUrl}costguard/api/kernels/{id}/hibernate`
 * and `.../snapshots...`): save a kernel's variables and shut it down, list the
 * snapshots of a notebook, load one into a kernel, delete one.
 * Pure REST: nothing here talks to a kernel.
 */
import { ServerConnection } from '@jupyterlab/services';

import { requestAPI } from './api';

/** A variable that was not saved or not restored, and why ("a generator"). */
export interface ISkippedName {
  name: string;
  reason: string;
  /** The module it needs, when that is why. */
  module?: string;
}

/**
 * Response of `POST kernels/{id}/hibernate`: the snapshot written (`created`
 * epoch seconds, `bytes` its size), the names saved and skipped, and how many
 * GPUs shutting the kernel down freed.
 */
export interface IHibernateResult {
  id: string;
  notebook: string | null;
  created: number;
  bytes: number;
  saved: string[];
  skipped: ISkippedName[];
  gpus_freed: number;
}

/** One snapshot of `GET snapshots` (`store`: where it is kept; `kernel_name`: its kernelspec). */
export interface ISnapshot {
  id: string;
  notebook: string | null;
  created: number;
  bytes: number;
  saved: string[];
  skipped: ISkippedName[];
  store?: string;
  kernel_name?: string | null;
}

/** Response of `GET snapshots`. */
export interface ISnapshotList {
  snapshots: ISnapshot[];
}

/** Something to know about a value that came back ("on the CPU: its GPU is not here"). */
export interface IRestoreNote {
  name: string;
  note: string;
}

/** Response of `POST snapshots/{id}/restore`. */
export interface IRestoreResult {
  restored: string[];
  skipped: ISkippedName[];
  notes?: IRestoreNote[];
}

/** `POST kernels/{id}/hibernate` path. */
export function hibernateEndpoint(kernelId: string): string {
  return `kernels/${encodeURIComponent(kernelId)}/hibernate`;
}

/** `GET snapshots` path, optionally of one notebook (server-relative path). */
export function snapshotsEndpoint(notebook?: string | null): string {
  return notebook ? `snapshots?notebook=${encodeURIComponent(notebook)}` : 'snapshots';
}

/** `snapshots/{id}` path, with `/restore` for a restore. */
export function snapshotEndpoint(id: string, restore = false): string {
  return `snapshots/${encodeURIComponent(id)}${restore ? '/restore' : ''}`;
}

/**
 * POST `kernels/{id}/hibernate`: save the kernel's variables, then shut it
 * down. A 409 (saving failed; the kernel keeps running) rejects with the
 * server's `message`.
 */
export function hibernateKernel(
  kernelId: string,
  settings?: ServerConnection.ISettings
): Promise<IHibernateResult> {
  return requestAPI<IHibernateResult>(
    hibernateEndpoint(kernelId),
    { method: 'POST', body: '{}' },
    settings
  );
}

/** GET `snapshots` (of one notebook when given). */
export function listSnapshots(
  notebook?: string | null,
  settings?: ServerConnection.ISettings
): Promise<ISnapshotList> {
  return requestAPI<ISnapshotList>(snapshotsEndpoint(notebook), { method: 'GET' }, settings);
}

/** POST `snapshots/{id}/restore` with `{"kernel_id"}`: load it into that kernel. */
export function restoreSnapshot(
  id: string,
  kernelId: string,
  settings?: ServerConnection.ISettings
): Promise<IRestoreResult> {
  return requestAPI<IRestoreResult>(
    snapshotEndpoint(id, true),
    { method: 'POST', body: JSON.stringify({ kernel_id: kernelId }) },
    settings
  );
}

/** DELETE `snapshots/{id}`. */
export function deleteSnapshot(
  id: string,
  settings?: ServerConnection.ISettings
): Promise<unknown> {
  return requestAPI(snapshotEndpoint(id), { method: 'DELETE' }, settings);
}
