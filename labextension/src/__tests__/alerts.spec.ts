import {
  AlertDeduplicator,
  alertsForNotebook,
  maxSeverity,
  notebookDocSeverity,
  notebookSeverity,
  notificationType,
  severityRank
} from '../alerts';
import { alert, notebook } from './fixtures';

describe('severities', () => {
  it('orders info < warning < critical, unknown lowest', () => {
    expect(severityRank('info')).toBe(1);
    expect(severityRank('warning')).toBe(2);
    expect(severityRank('critical')).toBe(3);
    expect(severityRank('bogus')).toBe(0);
    expect(severityRank(null)).toBe(0);
  });

  it('takes the highest', () => {
    expect(maxSeverity([])).toBeNull();
    expect(maxSeverity([null, undefined])).toBeNull();
    expect(maxSeverity(['info', 'critical', 'warning'])).toBe('critical');
    expect(maxSeverity(['info', null])).toBe('info');
  });

  it('maps to notification types', () => {
    expect(notificationType('info')).toBe('info');
    expect(notificationType('warning')).toBe('warning');
    expect(notificationType('critical')).toBe('error');
  });
});

describe('alerts of a notebook', () => {
  const alerts = [
    alert('by-path', 'info', { notebook: 'work/a.ipynb', kernel_id: null }),
    alert('by-kernel', 'critical', { notebook: null, kernel_id: 'k1' }),
    alert('other', 'warning', { notebook: 'b.ipynb', kernel_id: 'k9' }),
    alert('server', 'critical', { notebook: null, kernel_id: null })
  ];
  const doc = notebook('work/a.ipynb', 1, { kernel_ids: ['k1'] });

  it('selects by path and by serving kernel', () => {
    expect(alertsForNotebook(alerts, 'work/a.ipynb', doc).map(a => a.id)).toEqual(
      ['by-path', 'by-kernel']
    );
    expect(alertsForNotebook(alerts, 'work/a.ipynb').map(a => a.id)).toEqual([
      'by-path'
    ]);
    expect(alertsForNotebook(alerts, 'RTC:work/a.ipynb').map(a => a.id)).toEqual(
      ['by-path']
    );
    expect(alertsForNotebook(alerts, null)).toEqual([]);
  });

  it('reads the notebook document summary, either spelling', () => {
    expect(notebookDocSeverity(null)).toBeNull();
    expect(notebookDocSeverity(notebook('a', 1))).toBeNull();
    expect(
      notebookDocSeverity(notebook('a', 1, { alerts: { ids: ['x'], severity: 'warning' } }))
    ).toBe('warning');
    expect(
      notebookDocSeverity(
        notebook('a', 1, { alerts: { ids: ['x'], highest_severity: 'critical' } })
      )
    ).toBe('critical');
    expect(
      notebookDocSeverity(notebook('a', 1, { alerts: { ids: [], severity: null } }))
    ).toBeNull();
  });

  it('combines the list and the document', () => {
    expect(notebookSeverity(alerts, 'work/a.ipynb', doc, true)).toBe('critical');
    // No alerts route: the document's summary alone.
    const withSummary = notebook('work/a.ipynb', 1, {
      alerts: { ids: ['x'], severity: 'warning' }
    });
    expect(notebookSeverity([], 'work/a.ipynb', withSummary, false)).toBe('warning');
    expect(notebookSeverity(alerts, 'work/a.ipynb', null, false)).toBeNull();
    expect(notebookSeverity(alerts, null, doc, true)).toBeNull();
  });
});

describe('AlertDeduplicator', () => {
  it('notifies each alert once across polls', () => {
    const d = new AlertDeduplicator();
    const a = alert('a1');
    expect(d.update([a]).notify.map(x => x.id)).toEqual(['a1']);
    for (let i = 0; i < 5; i++) {
      const r = d.update([a]);
      expect(r.notify).toEqual([]);
      expect(r.escalate).toEqual([]);
      expect(r.gone).toEqual([]);
    }
  });

  it('ignores duplicates within one response', () => {
    const d = new AlertDeduplicator();
    expect(d.update([alert('a1'), alert('a1')]).notify).toHaveLength(1);
  });

  it('does not re-notify an update at the same or a lower severity', () => {
    const d = new AlertDeduplicator();
    d.update([alert('a1', 'warning', { updated: 100 })]);
    const same = d.update([alert('a1', 'warning', { updated: 200, message: 'new text' })]);
    expect(same.notify).toEqual([]);
    expect(same.escalate).toEqual([]);
    const lower = d.update([alert('a1', 'info', { updated: 300 })]);
    expect(lower.escalate).toEqual([]);
    // Back up to warning: not above what was already notified.
    expect(d.update([alert('a1', 'warning', { updated: 400 })]).escalate).toEqual([]);
  });

  it('re-notifies an update to a higher severity, once', () => {
    const d = new AlertDeduplicator();
    d.update([alert('a1', 'info', { updated: 100 })]);
    const up = d.update([alert('a1', 'critical', { updated: 200 })]);
    expect(up.escalate.map(x => x.id)).toEqual(['a1']);
    expect(up.notify).toEqual([]);
    expect(d.update([alert('a1', 'critical', { updated: 300 })]).escalate).toEqual([]);
  });

  it('needs a newer `updated` to escalate', () => {
    const d = new AlertDeduplicator();
    d.update([alert('a1', 'info', { updated: 100 })]);
    expect(d.update([alert('a1', 'critical', { updated: 100 })]).escalate).toEqual([]);
  });

  it('forgets alerts that leave, so a returning one is notified again', () => {
    const d = new AlertDeduplicator();
    d.update([alert('a1'), alert('a2')]);
    const r = d.update([alert('a2')]);
    expect(r.gone).toEqual(['a1']);
    expect(d.has('a1')).toBe(false);
    expect(d.has('a2')).toBe(true);
    // e.g. a snooze ran out
    expect(d.update([alert('a1'), alert('a2')]).notify.map(x => x.id)).toEqual(['a1']);
  });

  it('clear() forgets everything', () => {
    const d = new AlertDeduplicator();
    d.update([alert('a1')]);
    d.clear();
    expect(d.update([alert('a1')]).notify).toHaveLength(1);
  });
});
