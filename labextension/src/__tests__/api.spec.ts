import { ServerConnection } from '@jupyterlab/services';

import {
  alertsEndpoint,
  errorStatus,
  isNotFound,
  notebookEndpoint,
  requestAPI
} from '../api';
import { FakeServer } from './fakeserver';

describe('endpoints', () => {
  // Moved here from the cost widget's tests, which had its own copies.
  it('builds endpoints with encoded paths', () => {
    expect(notebookEndpoint('work/my nb#1.ipynb')).toBe(
      'notebooks/work/my%20nb%231.ipynb'
    );
    expect(alertsEndpoint('work/a b.ipynb')).toBe(
      'alerts?notebook=work%2Fa%20b.ipynb'
    );
    expect(alertsEndpoint()).toBe('alerts');
  });
});

describe('errors', () => {
  it('reads the HTTP status of a failed request', async () => {
    const s = new FakeServer();
    s.routes['GET status'] = () => ({ status: 403, body: { message: 'no' } });
    const failed = await requestAPI('status', { method: 'GET' }, s.settings()).catch(e => e);
    expect(failed).toBeInstanceOf(ServerConnection.ResponseError);
    expect(errorStatus(failed)).toBe(403);
    expect(isNotFound(failed)).toBe(false);
    const missing = await requestAPI('nope', { method: 'GET' }, s.settings()).catch(e => e);
    expect(isNotFound(missing)).toBe(true);
  });

  it('has no status for network errors and anything else', () => {
    expect(errorStatus(new TypeError('Failed to fetch'))).toBeNull();
    expect(errorStatus(null)).toBeNull();
    expect(errorStatus({ response: { status: 'x' } })).toBeNull();
    expect(isNotFound({ response: { status: 404 } })).toBe(true);
  });
});
