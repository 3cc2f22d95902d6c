/**
 * "Load results" without the DOM or a kernel: which of the names a job brought
 * back already exist in the notebook's kernel, what to ask about them, and
 * which names to load for the user's answer. Nothing is replaced silently: a
 * name the kernel already has is loaded only when the user chose "Replace".
 *
 * The plugin asks the kernel with one silent execute whose user expression is
 * `existingNamesExpression(names)` (no code runs, nothing goes to the history
 * or the outputs), reads the answer with `parseExistingNames`, and when the
 * kernel could not say (not a Python kernel, an error), takes every name as
 * existing, so the question is still asked.
 */

/** A Python identifier (what a job may bring back, and all a load may name). */
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** What the user answered to "Replace x, y in the kernel?". */
export type LoadChoice = 'replace' | 'others' | 'cancel';

/** The names a load concerns. */
export interface ILoadPlan {
  /** Every name the job brought back, in its order. */
  names: string[];
  /** Those the kernel already has (the question is about them). */
  clashes: string[];
  /** Those it has not. */
  fresh: string[];
}

/** The names that are Python identifiers, each once. */
export function validNames(names: ReadonlyArray<string>): string[] {
  return names.filter((n, i) => IDENTIFIER.test(n) && names.indexOf(n) === i);
}

/**
 * A Python expression, evaluated in the kernel's namespace, whose value is
 * the comma-joined names among `names` that are defined there (`'x,y'`).
 */
export function existingNamesExpression(names: ReadonlyArray<string>): string {
  const list = validNames(names)
    .map(n => `'${n}'`)
    .join(', ');
  return `','.join(sorted(set(globals()) & {${list || "''"}}))`;
}

/** A user expression's reply (`user_expressions[key]` of an execute reply). */
export interface IExpressionReply {
  status?: string;
  data?: { [mime: string]: unknown };
  [key: string]: unknown;
}

/**
 * The names the kernel said exist (only ones asked about), or null when it
 * could not say (error, other kernel language, odd answer).
 */
export function parseExistingNames(
  reply: IExpressionReply | undefined | null,
  asked: ReadonlyArray<string>
): string[] | null {
  if (!reply || reply.status !== 'ok') {
    return null;
  }
  const text = reply.data?.['text/plain'];
  if (typeof text !== 'string') {
    return null;
  }
  const match = /^(['"])(.*)\1$/.exec(text.trim());
  if (!match) {
    return null;
  }
  const said = match[2].split(',').filter(Boolean);
  if (said.some(n => !IDENTIFIER.test(n))) {
    return null;
  }
  const set = new Set(said);
  return validNames(asked).filter(n => set.has(n));
}

/** Split the job's names into those the kernel has (null: could not say, so all) and the rest. */
export function planLoad(
  names: ReadonlyArray<string>,
  existing: ReadonlyArray<string> | null
): ILoadPlan {
  const all = validNames(names);
  const has = new Set(existing ?? all);
  return {
    names: all,
    clashes: all.filter(n => has.has(n)),
    fresh: all.filter(n => !has.has(n))
  };
}

/** Whether the user must be asked first (some name would be replaced). */
export function needsConfirm(plan: ILoadPlan): boolean {
  return plan.clashes.length > 0;
}

/** The answers offered: "Load the others only" only when there are others. */
export function choicesFor(plan: ILoadPlan): LoadChoice[] {
  return plan.fresh.length ? ['cancel', 'others', 'replace'] : ['cancel', 'replace'];
}

/**
 * The names to load for an answer (no question asked: `undefined`), or null
 * when nothing is to be loaded (cancelled, or "others" with none).
 */
export function namesToLoad(plan: ILoadPlan, choice?: LoadChoice): string[] | null {
  if (!needsConfirm(plan)) {
    return plan.names.length ? [...plan.names] : null;
  }
  switch (choice) {
    case 'replace':
      return [...plan.names];
    case 'others':
      return plan.fresh.length ? [...plan.fresh] : null;
    default:
      return null; // cancelled, or not answered: never replace silently
  }
}

/** "x, y and z". */
export function listNames(names: ReadonlyArray<string>): string {
  if (names.length <= 1) {
    return names.join('');
  }
  return `${names.slice(0, -1).join(', ')} and ${names[names.length - 1]}`;
}

/** The question: "Replace x and y in the kernel?" and what each answer does. */
export function replaceQuestion(
  plan: ILoadPlan,
  jobId: number,
  notebook: string
): { title: string; body: string } {
  const clashes = listNames(plan.clashes);
  const title = `Replace ${clashes} in the kernel?`;
  const them = plan.clashes.length === 1 ? 'it' : 'them';
  let body =
    `The kernel of ${notebook} already has ${clashes}. ` +
    `Job ${jobId}'s values would replace ${them}.`;
  if (plan.fresh.length) {
    body += ` "Load the others only" loads ${listNames(plan.fresh)} and keeps the kernel's ${clashes}.`;
  }
  return { title, body };
}

/** "Loaded weights from job 3 into the kernel of train.ipynb (kept err)." */
export function loadedMessage(
  loaded: ReadonlyArray<string>,
  kept: ReadonlyArray<string>,
  jobId: number,
  notebook: string
): string {
  const what = loaded.length ? listNames(loaded) : 'the results';
  const keep = kept.length ? ` (kept the kernel's ${listNames(kept)})` : '';
  return `Loaded ${what} from job ${jobId} into the kernel of ${notebook}${keep}.`;
}
