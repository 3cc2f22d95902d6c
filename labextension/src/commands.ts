/**
 * Command ids of the extension, and the command palette category of its commands.
 */

/** Command palette category of every costguard command. */
export const PALETTE_CATEGORY = 'Costguard';

export namespace CommandIDs {
  /** Open (and reveal) the cost panel; args `{path?}` highlights a notebook. */
  export const openPanel = 'costguard:open-panel';
  /** Shut a kernel down after confirmation; args `{kernelId, name?, notebook?, confirm?}`. */
  export const shutdownKernel = 'costguard:shutdown-kernel';
  /** Interrupt a kernel; args `{kernelId, name?, notebook?}`. */
  export const interruptKernel = 'costguard:interrupt-kernel';
  /** Restart a kernel after confirmation; args `{kernelId, name?, notebook?, confirm?}`. */
  export const restartKernel = 'costguard:restart-kernel';
  /**
   * Hibernate a kernel after confirmation: save its variables, shut it down,
   * free its GPUs; args `{kernelId?, name?, notebook?, confirm?}` (no
   * `kernelId`: the current notebook's kernel).
   */
  export const hibernateKernel = 'costguard:hibernate-kernel';
  /** Refresh every costguard figure now. */
  export const refresh = 'costguard:refresh';
  /**
   * Offload cells to a batch job (the guard's "Offload heavy cells" alert
   * action): run-as-job on the alert's notebook (args `{notebook?}`), else the
   * current one, always with the confirm dialog.
   */
  export const offloadCells = 'costguard:offload-cells';
  /**
   * "Run as batch job": submit the selected code cells (the active cell when
   * none is selected) of the current notebook; args `{confirm?: boolean}`.
   */
  export const runAsJob = 'costguard:run-as-job';
  /** Open (and reveal) the Jobs panel; args `{id?}` expands that job. */
  export const openJobs = 'costguard:open-jobs';
  /** Put a finished job's outputs into its open notebook; args `{id}`. */
  export const insertJobOutputs = 'costguard:insert-job-outputs';
  /** Run a finished job's `load_code` in its notebook's kernel; args `{id}`. */
  export const loadJobResults = 'costguard:load-job-results';
  /** Cancel a queued or running job; args `{id}`. */
  export const cancelJob = 'costguard:cancel-job';
  /** Submit a job's spec again as a new job; args `{id}`. */
  export const rerunJob = 'costguard:rerun-job';
}
