/**
 * A notification when a watched batch job ends (JobsModel.jobEnded):
 * "Job 12 (train.ipynb) succeeded in 3m12s · USD 0.41", success / error /
 * info by state, with "Insert outputs" (finished jobs with outputs) and
 * "Show jobs".
 */
import type { Notification } from '@jupyterlab/apputils';
import type { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import type { ISignal } from '@lumino/signaling';

import { Disposable } from './disposable';
import { CommandIDs } from './commands';
import { formatElapsed, formatMoney } from './format';
import type { IJob } from './jobsapi';
import { baseName } from './notebooks';
import type { INotifier } from './offloadmodel';

/** What the notifier needs of the command registry. */
export interface IJobCommands {
  execute(id: string, args?: ReadonlyPartialJSONObject): Promise<any>;
}

/** Notification type of a job's final state. */
export function jobNotificationType(state: string): Notification.TypeOptions {
  switch (state) {
    case 'succeeded':
      return 'success';
    case 'failed':
    case 'lost':
      return 'error';
    default:
      return 'info';
  }
}

/** "Job 12 (train.ipynb) succeeded in 3m12s · USD 0.41" (plus the exit reason when it failed). */
export function jobEndedMessage(job: IJob, currency?: string): string {
  const name = baseName(job.notebook || '') || job.notebook;
  const took = formatElapsed(job.elapsed_seconds);
  const verb = job.state === 'succeeded' ? 'succeeded in' : `${job.state} after`;
  const money = formatMoney(
    Number.isFinite(job.spend) ? job.spend : 0,
    job.currency || currency || 'USD'
  );
  const head = `Job ${job.id}${name ? ` (${name})` : ''} ${verb} ${took} · ${money}`;
  const reason =
    job.state !== 'succeeded' && job.exit_reason ? `\n${job.exit_reason}` : '';
  return head + reason;
}

export namespace JobNotifier {
  export interface IOptions {
    source: { readonly jobEnded: ISignal<any, IJob> };
    manager: INotifier;
    commands: IJobCommands;
    enabled?: boolean;
  }
}

/** Pops up each ended job once. */
export class JobNotifier extends Disposable {
  constructor(options: JobNotifier.IOptions) {
    super();
    this._source = options.source;
    this._manager = options.manager;
    this._commands = options.commands;
    this.enabled = options.enabled ?? true;
    this._source.jobEnded.connect(this._onEnded, this);
  }

  /** Whether ended jobs pop up. */
  enabled: boolean;

  /** Show the notification for one ended job; returns its id (null when off). */
  notify(job: IJob): string | null {
    if (!this.enabled) {
      return null;
    }
    const actions: Notification.IAction[] = [];
    if (job.state === 'succeeded' || job.state === 'failed') {
      actions.push({
        label: 'Insert outputs',
        caption: 'Put the job\'s outputs into the notebook\'s cells',
        displayType: 'accent',
        callback: () => {
          void this._commands.execute(CommandIDs.insertJobOutputs, { id: job.id });
        }
      });
    }
    actions.push({
      label: 'Show jobs',
      caption: 'Open the Jobs panel',
      displayType: 'link',
      callback: () => {
        void this._commands.execute(CommandIDs.openJobs, { id: job.id });
      }
    });
    return this._manager.notify(jobEndedMessage(job), jobNotificationType(job.state), {
      autoClose: job.state === 'succeeded' || job.state === 'cancelled' ? 10000 : false,
      actions,
      data: { costguardJobId: job.id, state: job.state }
    });
  }

  protected onDispose(): void {
    this._source.jobEnded.disconnect(this._onEnded, this);
  }

  private _onEnded(_: unknown, job: IJob): void {
    this.notify(job);
  }

  private _commands: IJobCommands;
  private _manager: INotifier;
  private _source: { readonly jobEnded: ISignal<any, IJob> };
}
