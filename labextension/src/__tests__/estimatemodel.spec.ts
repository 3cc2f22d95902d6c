/**
 * @jest-environment jsdom
 */
import { EstimateModel, estimateRequest, estimateText } from '../estimatemodel';
import type { IEstimate, IEstimateRequest } from '../jobsapi';
import { OffloadDialogBody } from '../offloaddialog';
import { slice } from './jobfixtures';

/** An estimate as the server answers it (`Estimate`), local by default. */
function estimate(extra: Partial<IEstimate> = {}): IEstimate {
  return {
    backend: 'local',
    priced: true,
    hourly_price: 21.96,
    currency: 'USD',
    time_limit_seconds: 5400,
    max_cost: 32.94,
    source: 'catalog',
    detail: 'catalog: aws p4d.24xlarge on-demand, as of 2025-06-05',
    retrieved: '2025-06-05',
    age_days: 3,
    stale: false,
    choice: null,
    price_cap: null,
    above_cap: false,
    refusal: null,
    notes: [],
    ...extra
  };
}

const request = {
  notebook: 'train.ipynb',
  cells: [{ id: 'c3', cell_type: 'code', source: 'y = 1', execution_count: null, metadata: {}, outputs: [] }],
  selected: ['c3'],
  resources: { gpus: 1, cpus: null, memory_gib: null, time_limit_seconds: 5400 },
  retries: 0
};

/** Resolve the promises the model awaits. */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await Promise.resolve();
  }
}

describe('estimateText', () => {
  it('says the hourly price, the most within the limit, and where it came from', () => {
    expect(estimateText(estimate())).toEqual({
      price: 'About USD 21.96/h on local',
      most: 'At most USD 32.94 within the 1 h 30 min time limit.',
      source: 'Price from catalog: aws p4d.24xlarge on-demand, as of 2025-06-05 (USD).',
      cap: null,
      notes: []
    });
  });

  it('says there is no most without a time limit', () => {
    const text = estimateText(estimate({ time_limit_seconds: null, max_cost: null }));
    expect(text.most).toBe('No time limit: nothing caps what it can cost.');
  });

  it('says plainly that a backend is not priced, never 0', () => {
    const detail =
      "not priced: c.Offload.cluster_rates has no entry for 'slurm', so the job's spend will not be priced either";
    const text = estimateText(
      estimate({ backend: 'slurm', priced: false, hourly_price: null, max_cost: null, source: 'none', detail })
    );
    expect(text).toEqual({ price: 'Not priced on slurm', most: null, source: detail, cap: null, notes: [] });
  });

  it('says whether SkyPilot\'s choice is within the price cap', () => {
    const sky: Partial<IEstimate> = {
      backend: 'skypilot',
      source: 'skypilot_optimizer',
      detail: 'SkyPilot optimizer: GCP us-central1, a2-highgpu-1g (A100:1), spot',
      hourly_price: 1.15,
      max_cost: 2.3,
      time_limit_seconds: 7200,
      price_cap: 5
    };
    expect(estimateText(estimate(sky)).cap).toBe(
      'Within the price cap of USD 5.00/h (skypilot_max_price_per_hour).'
    );
    const refusal = 'the cheapest place SkyPilot found (…) costs 9.83 per hour, above the cap of 5';
    expect(estimateText(estimate({ ...sky, hourly_price: 9.83, above_cap: true, refusal })).cap).toBe(
      `Over the price cap: the launch would refuse it (${refusal}).`
    );
  });
});

describe('EstimateModel', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('asks once after the edits stop, and drops an answer to an older request', async () => {
    const asked: IEstimateRequest[] = [];
    const answers: Array<(e: IEstimate) => void> = [];
    const model = new EstimateModel({
      delayMs: 300,
      fetch: r => {
        asked.push(r);
        return new Promise(resolve => answers.push(resolve));
      }
    });
    model.request({ backend: null, resources: { gpus: 1 } });
    model.request({ backend: null, resources: { gpus: 2 } });
    expect(model.state).toBe('loading');
    jest.advanceTimersByTime(300);
    expect(asked).toEqual([{ backend: null, resources: { gpus: 2 } }]);
    model.request({ backend: null, resources: { gpus: 3 } }, true);
    answers[0](estimate({ hourly_price: 2 }));
    await settle();
    expect(model.state).toBe('loading'); // the gpus: 2 answer came after gpus: 3 was asked
    answers[1](estimate({ hourly_price: 3 }));
    await settle();
    expect(model.state).toBe('ok');
    expect(model.estimate!.hourly_price).toBe(3);
    model.request({ backend: null, resources: { gpus: 3 } }, true);
    expect(asked.length).toBe(2); // the same again is not asked
  });

  it('keeps the error as text and asks again on the next request', async () => {
    let fail = true;
    const model = new EstimateModel({
      fetch: () => (fail ? Promise.reject(new Error('the server cannot be reached')) : Promise.resolve(estimate()))
    });
    model.request({ backend: 'local', resources: null }, true);
    await settle();
    expect([model.state, model.error]).toEqual(['error', 'the server cannot be reached']);
    fail = false;
    model.request({ backend: 'local', resources: null }, true);
    await settle();
    expect([model.state, model.error]).toEqual(['ok', null]);
  });
});

describe('the offload dialog\'s estimate', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('shows it loading, then the figures, and asks again as the time limit changes', async () => {
    const asked: IEstimateRequest[] = [];
    const model = new EstimateModel({
      delayMs: 200,
      fetch: r => {
        asked.push(r);
        const limit = r.resources?.time_limit_seconds ?? null;
        return Promise.resolve(
          estimate({ time_limit_seconds: limit, max_cost: limit === null ? null : (21.96 * limit) / 3600 })
        );
      }
    });
    const body = new OffloadDialogBody(slice, request, { estimate: model });
    const node = body.node.querySelector<HTMLElement>('.jp-costguard-offload-estimate')!;
    expect(asked).toEqual([estimateRequest(request)]);
    expect(node.dataset.state).toBe('loading');
    expect(node.textContent).toBe('Estimating what the job will cost…');
    await settle();
    expect(node.dataset.state).toBe('ok');
    const field = (name: string): string | null =>
      node.querySelector(`[data-field="${name}"]`)?.textContent ?? null;
    expect(field('price')).toBe('About USD 21.96/h on local');
    expect(field('most')).toBe('At most USD 32.94 within the 1 h 30 min time limit.');
    expect(field('source')).toMatch(/^Price from catalog: aws p4d\.24xlarge on-demand, as of 2025-06-05/);

    const limit = body.node.querySelector<HTMLInputElement>('input[name="time_limit_seconds"]')!;
    limit.value = '';
    limit.dispatchEvent(new Event('input', { bubbles: true }));
    expect(node.dataset.state).toBe('loading');
    jest.advanceTimersByTime(200);
    await settle();
    expect(asked[1]).toEqual({ backend: null, resources: { gpus: 1, cpus: null, memory_gib: null, time_limit_seconds: null } });
    expect(field('most')).toBe('No time limit: nothing caps what it can cost.');

    limit.value = 'soon';  // a form error keeps the last estimate and asks nothing
    limit.dispatchEvent(new Event('input', { bubbles: true }));
    jest.advanceTimersByTime(200);
    expect(asked.length).toBe(2);
    body.dispose();
  });

  it('shows a failed estimate as text, and the form stays usable', async () => {
    const model = new EstimateModel({
      fetch: () => Promise.reject(new Error('the jobs API answered 504: the skypilot backend gave no estimate'))
    });
    const body = new OffloadDialogBody(slice, request, { estimate: model });
    await settle();
    const node = body.node.querySelector<HTMLElement>('.jp-costguard-offload-estimate')!;
    expect(node.dataset.state).toBe('error');
    expect(node.querySelector('[data-field="error"]')!.textContent).toBe(
      'Could not estimate the cost: the jobs API answered 504: the skypilot backend gave no estimate'
    );
    expect(body.getValue().gpus).toBe('1');
  });

  it('is absent without a model', () => {
    const body = new OffloadDialogBody(slice, request);
    expect(body.node.querySelector<HTMLElement>('.jp-costguard-offload-estimate')!.hidden).toBe(true);
  });
});
