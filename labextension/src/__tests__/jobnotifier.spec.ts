import { Signal } from '@lumino/signaling';

import { CommandIDs } from '../commands';
import type { IJob } from '../jobsapi';
import { jobEndedMessage, jobNotificationType, JobNotifier } from '../jobnotifier';
import { FakeNotifier, job } from './jobfixtures';

class Source {
  jobEnded = new Signal<this, IJob>(this);
}

function setup() {
  const source = new Source();
  const manager = new FakeNotifier();
  const executed: [string, any][] = [];
  const notifier = new JobNotifier({
    source,
    manager,
    commands: {
      execute: async (id, args) => {
        executed.push([id, args]);
      }
    }
  });
  return { source, manager, executed, notifier };
}

describe('job notifications', () => {
  it('words the message like the label', () => {
    expect(jobEndedMessage(job(12, 'succeeded'))).toBe(
      'Job 12 (train.ipynb) succeeded in 3m12s · USD 0.41'
    );
    expect(jobEndedMessage(job(13, 'failed'))).toBe(
      'Job 13 (train.ipynb) failed after 3m12s · USD 0.41\nexit code 1'
    );
    expect(jobEndedMessage(job(14, 'cancelled', { elapsed_seconds: 5, spend: 0 }))).toBe(
      'Job 14 (train.ipynb) cancelled after 5s · USD 0.00'
    );
  });

  it('picks the type by state', () => {
    expect(jobNotificationType('succeeded')).toBe('success');
    expect(jobNotificationType('failed')).toBe('error');
    expect(jobNotificationType('lost')).toBe('error');
    expect(jobNotificationType('cancelled')).toBe('info');
  });

  it('pops up ended jobs with Insert outputs and Show jobs', () => {
    const { source, manager, executed } = setup();
    source.jobEnded.emit(job(12, 'succeeded'));
    const shown = manager.last()!;
    expect(shown.type).toBe('success');
    expect(shown.options.actions.map((a: any) => a.label)).toEqual(['Insert outputs', 'Show jobs']);
    manager.click(shown, 'Insert outputs');
    manager.click(shown, 'Show jobs');
    expect(executed).toEqual([
      [CommandIDs.insertJobOutputs, { id: 12 }],
      [CommandIDs.openJobs, { id: 12 }]
    ]);
    source.jobEnded.emit(job(13, 'cancelled'));
    expect(manager.last()!.type).toBe('info');
    expect(manager.last()!.options.actions.map((a: any) => a.label)).toEqual(['Show jobs']);
  });

  it('stays quiet when turned off or disposed', () => {
    const { source, manager, notifier } = setup();
    notifier.enabled = false;
    source.jobEnded.emit(job(12, 'failed'));
    expect(manager.shown).toEqual([]);
    notifier.enabled = true;
    notifier.dispose();
    source.jobEnded.emit(job(12, 'failed'));
    expect(manager.shown).toEqual([]);
  });
});
