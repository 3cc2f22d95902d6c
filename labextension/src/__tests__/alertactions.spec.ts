/**
 * Hibernate on alerts: an idle-GPU alert offers it ("Hibernate: free N
 * GPUs, keep your variables") because the server sent it in the alert's
 * actions, and the button runs `costguard:hibernate-kernel` on the alert's
 * kernel.
 */
import type { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import {
  actionCaption,
  actionDisplayType,
  HIBERNATE_UNAVAILABLE_TEXT,
  IAlertActionContext,
  offeredActions,
  runAlertAction
} from '../alertactions';
import type { IAlert } from '../api';
import { CommandIDs } from '../commands';
import { alert } from './fixtures';

/** An idle-GPU alert as the guard sends it: Hibernate first. */
function idleGpuAlert(extra: Partial<IAlert> = {}): IAlert {
  const plain = alert('a1');
  return alert('a1', 'warning', {
    kind: 'idle-gpu-kernel',
    actions: [
      {
        id: 'hibernate',
        label: 'Hibernate: free 4 GPUs, keep your variables',
        args: { kernel_id: 'k-explore' }
      },
      ...plain.actions
    ],
    ...extra
  });
}

function context(available: string[], answer: unknown = true) {
  const executed: [string, ReadonlyPartialJSONObject | undefined][] = [];
  const notes: [string, string][] = [];
  const done: string[] = [];
  const ctx: IAlertActionContext = {
    target: { dismissAlert: async () => undefined, snoozeAlert: async () => undefined },
    commands: {
      hasCommand: id => available.includes(id),
      execute: async (id, args) => {
        executed.push([id, args]);
        return answer;
      }
    },
    snoozeSeconds: 3600,
    openUrl: () => undefined,
    notify: (message, type) => notes.push([message, type]),
    onConfirmedDone: a => done.push(a.id)
  };
  return { ctx, executed, notes, done };
}

const settle = () => new Promise(resolve => setTimeout(resolve, 0));

describe('Hibernate on alerts', () => {
  it("is offered where the server put it, with the server's words", () => {
    const actions = offeredActions(idleGpuAlert());
    expect(actions.map(a => a.id)).toEqual([
      'hibernate',
      'open-panel',
      'shutdown-kernel',
      'snooze',
      'dismiss'
    ]);
    expect(actions[0].label).toBe('Hibernate: free 4 GPUs, keep your variables');
    expect(actionDisplayType(actions[0])).toBe('accent');
    expect(actionCaption(actions[0], 3600)).toMatch(/save the kernel's variables/);
    const own = { id: 'hibernate', label: 'Hibernate', args: { kernel_id: 'k-explore' } };
    const a = idleGpuAlert({ actions: [{ id: 'snooze', label: 'Snooze' }, own] });
    expect(offeredActions(a).map(x => x.id)).toEqual(['snooze', 'hibernate']);
  });

  it('is not added by the page: only the server offers it, and only for a kernel', () => {
    // an idle-GPU alert from a server that does not offer it (older, or not a notebook's kernel)
    const bare = idleGpuAlert({ actions: alert('a2').actions });
    expect(offeredActions(bare).map(a => a.id)).not.toContain('hibernate');
    const noKernel = idleGpuAlert({ kernel_id: null, details: {} });
    expect(offeredActions(noKernel).map(a => a.id)).toContain('hibernate'); // args name it
    const nowhere = idleGpuAlert({
      kernel_id: null,
      actions: [{ id: 'hibernate', label: 'Hibernate' }]
    });
    expect(offeredActions(nowhere)).toEqual([]);
  });

  it("runs the hibernate command on the alert's kernel; done once confirmed", async () => {
    const a = idleGpuAlert();
    const { ctx, executed, done } = context([CommandIDs.hibernateKernel]);
    const stays = runAlertAction(a, offeredActions(a)[0], ctx);
    expect(stays).toBe(true);
    await settle();
    expect(executed).toEqual([
      [CommandIDs.hibernateKernel, { kernelId: 'k-explore', notebook: 'explore.ipynb' }]
    ]);
    expect(done).toEqual(['a1']);
  });

  it('is not done when the user cancels', async () => {
    const a = idleGpuAlert();
    const { ctx, done } = context([CommandIDs.hibernateKernel], false);
    runAlertAction(a, offeredActions(a)[0], ctx);
    await settle();
    expect(done).toEqual([]);
  });

  it('says it is not available when the hibernate plugin is off', () => {
    const a = idleGpuAlert();
    const { ctx, executed, notes } = context([]);
    expect(runAlertAction(a, offeredActions(a)[0], ctx)).toBe(true);
    expect(executed).toEqual([]);
    expect(notes).toEqual([[HIBERNATE_UNAVAILABLE_TEXT, 'info']]);
  });

  it('still shuts down and interrupts through their commands', async () => {
    const a = idleGpuAlert();
    const { ctx, executed, done } = context([CommandIDs.shutdownKernel, CommandIDs.interruptKernel]);
    expect(runAlertAction(a, { id: 'shutdown-kernel', label: 'Shut down' }, ctx)).toBe(true);
    expect(runAlertAction(a, { id: 'interrupt-kernel', label: 'Interrupt' }, ctx)).toBe(false);
    await settle();
    expect(executed.map(e => e[0])).toEqual([CommandIDs.shutdownKernel, CommandIDs.interruptKernel]);
    expect(done).toEqual(['a1']);
  });
});
