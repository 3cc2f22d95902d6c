/**
 * The "Run as batch job" confirm dialog's form without the DOM: its fields
 * from a request, and the request from what the user typed (or the first
 * problem found, said as the server's limits say it).
 */
import { IJobResources, ISubmitRequest } from './jobsapi';
import {
  allNull,
  IResourceSettings,
  MAX_CPUS,
  MAX_GPUS,
  MAX_RETRIES,
  MAX_TIME_LIMIT_SECONDS
} from './offloadsettings';

/** The editable fields of the confirm dialog, as typed. */
export interface IOffloadForm {
  gpus: string;
  cpus: string;
  memory_gib: string;
  time_limit_seconds: string;
  retries: string;
  /** Variables to send, comma- or space-separated. */
  send: string;
}

/** Keys of the resource fields, in dialog order. */
export const RESOURCE_FIELDS: ReadonlyArray<keyof IResourceSettings> = [
  'gpus',
  'cpus',
  'memory_gib',
  'time_limit_seconds'
];

function fieldText(value: number | null | undefined): string {
  return value === null || value === undefined ? '' : String(value);
}

/** The form's initial values from a request. */
export function formFromRequest(request: ISubmitRequest): IOffloadForm {
  const r: IJobResources = request.resources ?? {};
  return {
    gpus: fieldText(r.gpus),
    cpus: fieldText(r.cpus),
    memory_gib: fieldText(r.memory_gib),
    time_limit_seconds: fieldText(r.time_limit_seconds),
    retries: fieldText(request.retries ?? 0),
    send: (request.send ?? []).join(', ')
  };
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Names typed in a field: split on commas and spaces. */
export function parseNames(text: string): string[] {
  return text
    .split(/[\s,]+/)
    .map(s => s.trim())
    .filter(Boolean)
    .filter((name, i, all) => all.indexOf(name) === i);
}

/** The request with the form's values, or the first problem found. */
export function applyForm(
  request: ISubmitRequest,
  form: IOffloadForm
): { request: ISubmitRequest } | { error: string } {
  const resources: IResourceSettings = {
    gpus: null,
    cpus: null,
    memory_gib: null,
    time_limit_seconds: null
  };
  const limits: { [K in keyof IResourceSettings]: [number, boolean, string] } = {
    gpus: [MAX_GPUS, true, 'GPUs must be a whole number from 0 to 64'],
    cpus: [MAX_CPUS, false, 'CPUs must be a number above 0, at most 1024'],
    memory_gib: [1 << 16, false, 'Memory must be a number of GiB above 0'],
    time_limit_seconds: [
      MAX_TIME_LIMIT_SECONDS,
      false,
      'The time limit must be a number of seconds above 0, at most 30 days'
    ]
  };
  for (const key of RESOURCE_FIELDS) {
    const text = (form[key] ?? '').trim();
    if (!text) {
      continue;
    }
    const value = Number(text);
    const [max, integer, message] = limits[key];
    const ok =
      Number.isFinite(value) &&
      value <= max &&
      (integer ? Number.isInteger(value) && value >= 0 : value > 0);
    if (!ok) {
      return { error: message };
    }
    resources[key] = value;
  }
  const retriesText = (form.retries ?? '').trim();
  const retries = retriesText ? Number(retriesText) : 0;
  if (!Number.isInteger(retries) || retries < 0 || retries > MAX_RETRIES) {
    return { error: `Retries must be a whole number from 0 to ${MAX_RETRIES}` };
  }
  const send = parseNames(form.send ?? '');
  const bad = send.find(name => !IDENTIFIER.test(name));
  if (bad !== undefined) {
    return { error: `Not a variable name: ${bad}` };
  }
  if (send.length && !request.kernel_id) {
    return { error: 'Sending variables needs the notebook\'s kernel to be running' };
  }
  const next: ISubmitRequest = { ...request, retries };
  if (allNull(resources)) {
    delete next.resources;
  } else {
    next.resources = resources;
  }
  if (send.length) {
    next.send = send;
  } else {
    delete next.send;
  }
  return { request: next };
}

/** First line of a cell's source, shortened for the dialog. */
export function firstLine(source: string, max = 80): string {
  const line = (source ?? '').split('\n').find(l => l.trim()) ?? '';
  const text = line.trim();
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
