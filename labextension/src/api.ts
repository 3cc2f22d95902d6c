/**
 * Types and a request helper for the costguard REST API
 * (`{baseUrl}costguard/api/...`).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** The instance costguard believes it runs on (null when unknown). */
export interface ICostInstance {
  provider?: string;
  instance_type?: string;
  [key: string]: unknown;
}

/** Spend totals for the server since `since` (epoch seconds). */
export interface ICostTotals {
  spend?: number;
  waste?: number;
  unattributed?: number;
  since?: number | null;
}

/** Response of `GET costguard/api/status`. */
export interface ICostStatus {
  instance: ICostInstance | null;
  rate_per_hour: number | null;
  currency: string;
  market?: string;
  price_source?:
    | 'config'
    | 'environment'
    | 'detected'
    | 'hourly_rate'
    | 'unpriced'
    | string;
  price_detail?: string;
  simulated?: boolean;
  totals?: ICostTotals | null;
  gpu_status?: 'ok' | 'no-gpu' | 'error' | 'starting' | string;
  gpu_detail?: string;
  last_sample_time?: number | null;
  /** The server sends more fields (counts, history, ...); see openapi.yaml. */
  [key: string]: unknown;
}

/** The API root, relative to the server's base URL. */
export const API_NAMESPACE = 'costguard/api';

/**
 * Call the costguard REST API.
 *
 * @param endPoint path below `costguard/api/`, e.g. `status`
 * @param init request options
 * @param settings server connection settings (defaults to the page's)
 * @returns the parsed JSON body
 * @throws ServerConnection.NetworkError or ServerConnection.ResponseError
 */
export async function requestAPI<T>(
  endPoint = '',
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_NAMESPACE, endPoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: any = text;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch (error) {
      if (response.ok) {
        throw new Error(`costguard: invalid JSON from ${url}`);
      }
    }
  }
  if (!response.ok) {
    throw new ServerConnection.ResponseError(response, data?.message || data);
  }
  return data as T;
}
