/**
 * Types and request helpers for hibernation (`{baseUrl}costguard/api/kernels/{id}/hibernate`
 * and `.../snapshots...`): save a kernel's variables and shut it down, list the
 * snapshots of a notebook, load one into a kernel, delete one. Described by
 * `jupyter_costguard/web/openapi.yaml`, whose schemas the types here are
 * derived from. Pure REST: nothing here talks to a kernel.
 */
import { ServerConnection } from '@jupyterlab/services';

import { Accepts, Lenient, requestAPI, Schemas } from './api';

/** A variable that was not saved or not restored, and why ("a generator"; `module`: the one it needs). */
export type ISkippedName = Schemas['Skipped'];

/** The fields every snapshot document has had since hibernation shipped. */
type SnapshotCore = 'id' | 'notebook' | 'created' | 'bytes' | 'saved' | 'skipped';

/**
 * One snapshot (`Snapshot`): the notebook whose kernel it was, when it was
 * written (`created`, epoch seconds) and its size, the names saved and those
 * skipped with why; where it is stored and its kernelspec; the GPUs and rate
 * the kernel held, when it was first restored (null while hibernated) and
 * what staying alive would have cost meanwhile (`waste_avoided`).
 */
export interface ISnapshot extends Lenient<Schemas['Snapshot'], SnapshotCore> {}

/** Response of `POST kernels/{id}/hibernate` (`Hibernated`): the snapshot and the GPUs freed. */
export interface IHibernateResult
  extends Lenient<Schemas['Snapshot'], SnapshotCore>,
    Pick<Schemas['Hibernated'], 'gpus_freed'> {}

/** Response of `GET snapshots` (`SnapshotList`; `waste_avoided` in `currency`, all listed). */
export interface ISnapshotList
  extends Lenient<Omit<Schemas['SnapshotList'], 'snapshots'>, never> {
  snapshots: ISnapshot[];
}

/** Something to know about a value that came back ("on the CPU: its GPU is not here"). */
export type IRestoreNote = NonNullable<Schemas['Restored']['notes']>[number];

/** Response of `POST snapshots/{id}/restore` (`Restored`). */
export type IRestoreResult = Schemas['Restored'];

/** The responses this module reads, held to their schemas (see `Accepts` in api.ts). */
export type HibernateContract = [
  Accepts<ISnapshot, Schemas['Snapshot']>,
  Accepts<IHibernateResult, Schemas['Hibernated']>,
  Accepts<ISnapshotList, Schemas['SnapshotList']>,
  Accepts<IRestoreResult, Schemas['Restored']>
];

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
