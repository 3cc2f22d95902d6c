/**
 * Command ids of the extension (and the one it calls if another plugin offers it).
 */
export namespace CommandIDs {
  /** Open (and reveal) the cost panel; args `{path?}` highlights a notebook. */
  export const openPanel = 'costguard:open-panel';
  /** Shut a kernel down after confirmation; args `{kernelId, name?, notebook?, confirm?}`. */
  export const shutdownKernel = 'costguard:shutdown-kernel';
  /** Interrupt a kernel; args `{kernelId, name?, notebook?}`. */
  export const interruptKernel = 'costguard:interrupt-kernel';
  /** Restart a kernel after confirmation; args `{kernelId, name?, notebook?, confirm?}`. */
  export const restartKernel = 'costguard:restart-kernel';
  /** Refresh every costguard figure now. */
  export const refresh = 'costguard:refresh';
  /** Offload cells to a batch job: registered by the offload work, if installed. */
  export const offloadCells = 'costguard:offload-cells';
}
