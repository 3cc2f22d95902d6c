/**
 * Shared test data shaped like the server's documents (openapi.yaml).
 */
import type {
  AlertSeverity,
  IAlert,
  ICostPrice,
  ICostStatus,
  IGpuList,
  IHubBudget,
  IKernelDoc,
  INotebookDoc
} from '../api';

export const status: ICostStatus = {
  simulated: true,
  currency: 'USD',
  time: 1764460800,
  instance: {
    provider: 'aws',
    instance_type: 'p4d.24xlarge',
    gpu_model: 'A100-SXM4-40GB',
    gpu_count: 8,
    gpu_memory_gib: 40,
    vcpus: 96,
    memory_gib: 1152,
    region: null,
    on_demand_per_hour: 32.77,
    spot_per_hour: null,
    source_url: 'https://aws.amazon.com/ec2/instance-types/p4/',
    retrieved: '2025-11-01'
  },
  rate_per_hour: 32.77,
  market: 'on-demand',
  price_source: 'config',
  price_detail: 'c.CostGuard.instance_type',
  gpu_status: 'ok',
  gpu_detail: '',
  gpu_count: 8,
  totals: {
    since: 1764450000,
    seconds: 10800,
    spend: 1.2345,
    waste: 0.5,
    unattributed: 0.1,
    unattributed_gpu: 0.05
  },
  last_sample_time: 1764460800,
  history: []
};

/** A fresh `price` object of a newer server (no container share). */
export const price: ICostPrice = {
  provider: 'aws',
  instance_type: 'p4d.24xlarge',
  region: 'us-east-1',
  region_priced: 'us-east-1',
  region_note: null,
  market: 'on-demand',
  market_source: 'config',
  retrieved: '2025-11-01',
  age_days: 29,
  stale: false,
  stale_after_days: 90,
  refresh_hint: 'jupyter costguard catalog update',
  instance_rate_per_hour: 32.77,
  share: null,
  tried: [
    'c.CostGuard.instance_type is p4d.24xlarge.',
    'The catalog has p4d.24xlarge in us-east-1, on-demand.'
  ]
};

/** `status` of a newer server, with `price` (patched by `extra`). */
export function pricedStatus(extra: Partial<ICostPrice> = {}): ICostStatus {
  return { ...status, price: { ...price, ...extra } };
}

/** A container holding 1 of 8 GPUs and a quarter of the host. */
export const share: NonNullable<ICostPrice['share']> = {
  gpus_held: 1,
  gpus_instance: 8,
  cpu_share: 0.25,
  memory_share: 0.2,
  host_share: 0.25,
  fraction: 0.15625,
  detail: 'The container holds 1 of the 8 GPUs and 24 of the 96 vCPUs.'
};

export function notebook(
  path: string,
  spend: number,
  extra: Partial<INotebookDoc> = {}
): INotebookDoc {
  return {
    path,
    spend,
    waste: spend / 2,
    gpu_spend: spend * 0.9,
    host_spend: spend * 0.1,
    first_seen: 1764450000,
    last_seen: 1764460800,
    kernel_ids: [],
    kernels_seen: 1,
    gpu_utilization_percent: null,
    gpu_memory_bytes: 0,
    idle_seconds: null,
    spend_rate_per_hour: 0,
    history: [],
    ...extra
  };
}

export function kernel(
  kernel_id: string,
  notebookPath: string | null,
  spend: number,
  extra: Partial<IKernelDoc> = {}
): IKernelDoc {
  return {
    kernel_id,
    name: 'python3',
    notebook: notebookPath,
    execution_state: 'idle',
    last_activity: 1764460000,
    idle_seconds: 800,
    connections: 1,
    pids: [1234],
    cpu_percent: 0.5,
    rss_bytes: 100 * 1024 ** 2,
    gpus: [],
    gpu_memory_bytes: 0,
    gpu_utilization_percent: null,
    attribution: 'none',
    spend,
    waste: spend / 2,
    spend_rate_per_hour: 0,
    ...extra
  };
}

export function alert(
  id: string,
  severity: AlertSeverity = 'warning',
  extra: Partial<IAlert> = {}
): IAlert {
  return {
    id,
    kind: 'idle-gpu',
    severity,
    notebook: 'explore.ipynb',
    kernel_id: 'k-explore',
    title: 'GPU idle',
    message: 'The GPU held by explore.ipynb has been idle for 30 min.',
    actions: [
      { id: 'open-panel', label: 'Details' },
      { id: 'shutdown-kernel', label: 'Shut down kernel' },
      { id: 'snooze', label: 'Snooze 1 h' },
      { id: 'dismiss', label: 'Dismiss' }
    ],
    details: {},
    created: 100,
    updated: 100,
    state: 'active',
    snoozed_until: null,
    source: 'guard',
    ...extra
  };
}

export const gpus: IGpuList = {
  simulated: true,
  currency: 'USD',
  time: 1764460800,
  status: 'ok',
  detail: '',
  driver_version: '550.54',
  gpus: [
    {
      index: 0,
      uuid: 'GPU-0',
      name: 'NVIDIA A100-SXM4-40GB',
      memory_total_bytes: 40 * 1024 ** 3,
      memory_used_bytes: 10 * 1024 ** 3,
      utilization_percent: 3,
      power_watts: 61.2,
      mig_parent_uuid: null,
      faulty: null,
      processes: []
    }
  ]
};

/** 2026-12-01T00:00:00Z and 2027-01-01T00:00:00Z: a calendar month (UTC). */
export const DEC_2026 = 1796083200;
export const JAN_2027 = 1798761600;
/** 2026-11-30 and 2026-12-07, Mondays: an ISO week (UTC). */
export const WEEK_START = 1795996800;
export const WEEK_END = 1796601600;

/**
 * A budget of `hub_budgets`: the user's monthly USD 50, USD 37.60 spent
 * (`remaining` and `used` follow `spent` unless `extra` says).
 */
export function hubBudget(extra: Partial<IHubBudget> = {}): IHubBudget {
  const budget = extra.budget ?? 50;
  const spent = extra.spent ?? 37.6;
  return {
    scope: 'user',
    name: 'alice',
    budget,
    spent,
    remaining: Math.max(0, budget - spent),
    used: spent / budget,
    period: 'month',
    period_start: DEC_2026,
    period_end: JAN_2027,
    ...extra
  };
}

/** The ml group's weekly USD 20. */
export function groupBudget(extra: Partial<IHubBudget> = {}): IHubBudget {
  return hubBudget({
    scope: 'group',
    name: 'ml',
    budget: 20,
    spent: 5,
    period: 'week',
    period_start: WEEK_START,
    period_end: WEEK_END,
    ...extra
  });
}

/**
 * The ml group's weekly budget as a member sees it by default (the site's
 * `member_group_view` "remaining"): only what is left of it.
 */
export function groupRemaining(remaining = 3.5): IHubBudget {
  return { ...groupBudget(), budget: null, spent: null, used: null, remaining };
}

/** `status` of a server under a hub with `budgets`. */
export function budgetStatus(budgets: IHubBudget[]): ICostStatus {
  return { ...status, user: 'alice', server: '', hub_budgets: budgets };
}
