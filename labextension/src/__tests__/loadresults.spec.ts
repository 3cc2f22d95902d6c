import { getJobResults } from '../jobsapi';
import {
  choicesFor,
  existingNamesExpression,
  loadedMessage,
  namesToLoad,
  needsConfirm,
  parseExistingNames,
  planLoad,
  replaceQuestion
} from '../loadresults';
import { FakeServer } from './fakeserver';
import { results } from './jobfixtures';

describe('load results: asking the kernel', () => {
  it('asks with one expression naming only identifiers', () => {
    expect(existingNamesExpression(['weights', 'err'])).toBe(
      "','.join(sorted(set(globals()) & {'weights', 'err'}))"
    );
    // anything that is not a Python name never reaches the kernel
    expect(existingNamesExpression(["x'}); import os; ({'", 'ok'])).toBe(
      "','.join(sorted(set(globals()) & {'ok'}))"
    );
    expect(existingNamesExpression([])).toBe("','.join(sorted(set(globals()) & {''}))");
  });

  it('reads the answer, and says so when the kernel could not tell', () => {
    const ok = (text: string) => ({ status: 'ok', data: { 'text/plain': text } });
    expect(parseExistingNames(ok("'err,weights'"), ['weights', 'err', 'y'])).toEqual([
      'weights',
      'err'
    ]);
    expect(parseExistingNames(ok("''"), ['weights'])).toEqual([]);
    expect(parseExistingNames(ok("'weights,other'"), ['weights'])).toEqual(['weights']);
    expect(parseExistingNames({ status: 'error' }, ['weights'])).toBeNull();
    expect(parseExistingNames(ok('42'), ['weights'])).toBeNull();
    expect(parseExistingNames(ok("'a b'"), ['a'])).toBeNull();
    expect(parseExistingNames(undefined, ['weights'])).toBeNull();
  });
});

describe('load results: what to load', () => {
  it('loads at once when the kernel has none of the names', () => {
    const plan = planLoad(['weights', 'loss'], []);
    expect(needsConfirm(plan)).toBe(false);
    expect(namesToLoad(plan)).toEqual(['weights', 'loss']);
  });

  it('never replaces an existing name without "Replace"', () => {
    const plan = planLoad(['weights', 'loss'], ['loss']);
    expect(plan.clashes).toEqual(['loss']);
    expect(plan.fresh).toEqual(['weights']);
    expect(needsConfirm(plan)).toBe(true);
    expect(choicesFor(plan)).toEqual(['cancel', 'others', 'replace']);
    expect(namesToLoad(plan, 'replace')).toEqual(['weights', 'loss']);
    expect(namesToLoad(plan, 'others')).toEqual(['weights']);
    expect(namesToLoad(plan, 'cancel')).toBeNull();
    expect(namesToLoad(plan)).toBeNull(); // no answer: nothing
  });

  it('offers no "others" when every name exists', () => {
    const plan = planLoad(['weights'], ['weights']);
    expect(choicesFor(plan)).toEqual(['cancel', 'replace']);
    expect(namesToLoad(plan, 'others')).toBeNull();
  });

  it('asks about every name when the kernel could not say', () => {
    const plan = planLoad(['weights', 'loss'], null);
    expect(plan.clashes).toEqual(['weights', 'loss']);
    expect(choicesFor(plan)).toEqual(['cancel', 'replace']);
  });

  it('loads nothing when the job brought nothing back', () => {
    expect(namesToLoad(planLoad([], []))).toBeNull();
  });

  it('names the clashes in the question and what was kept afterwards', () => {
    const plan = planLoad(['weights', 'loss', 'acc'], ['loss', 'acc']);
    const q = replaceQuestion(plan, 3, 'train.ipynb');
    expect(q.title).toBe('Replace loss and acc in the kernel?');
    expect(q.body).toBe(
      "The kernel of train.ipynb already has loss and acc. Job 3's values would replace them. " +
        '"Load the others only" loads weights and keeps the kernel\'s loss and acc.'
    );
    expect(loadedMessage(['weights'], ['loss', 'acc'], 3, 'train.ipynb')).toBe(
      "Loaded weights from job 3 into the kernel of train.ipynb (kept the kernel's loss and acc)."
    );
    expect(loadedMessage(['a', 'b'], [], 3, 'n.ipynb')).toBe(
      'Loaded a and b from job 3 into the kernel of n.ipynb.'
    );
  });

  it('asks the server for the load code of a subset', async () => {
    const s = new FakeServer();
    s.routes['GET jobs/3/results'] = () => ({ body: results(3, { load_code: 'subset()' }) });
    const r = await getJobResults(3, s.settings(), ['weights', 'loss']);
    expect(s.requests[0].path).toBe('jobs/3/results?names=weights%2Closs');
    expect(r.load_code).toBe('subset()');
    await getJobResults(3, s.settings());
    expect(s.requests[1].path).toBe('jobs/3/results');
  });
});
