import { HubClient, apiUrl } from '../client';

function answer(status: number, body: string): Response {
  return { ok: status >= 200 && status < 300, status, json: async () => JSON.parse(body) } as Response;
}

describe('the hub API client', () => {
  it('leaves empty parameters out of a URL', () => {
    expect(apiUrl('/p/', 'api/spend', [['by', 'user'], ['since', null], ['until', ''], ['n', 0]])).toBe(
      '/p/api/spend?by=user&n=0'
    );
    expect(apiUrl('/p/', 'api/me')).toBe('/p/api/me');
  });

  it('asks with the XSRF token and the login cookie', async () => {
    const asked: Array<[string, RequestInit]> = [];
    const client = new HubClient('/services/costguard/', 'tok', async (url, init) => {
      asked.push([url, init]);
      return answer(200, '{"rows": []}');
    });
    await client.spend('group', { since: 10, until: null });
    expect(asked[0][0]).toBe('/services/costguard/api/spend?by=group&since=10');
    expect(asked[0][1].credentials).toBe('same-origin');
    expect((asked[0][1].headers as Record<string, string>)['X-XSRFToken']).toBe('tok');
    await client.series({ by: 'user', key: null, step: 'day', since: 1, until: 2 });
    expect(asked[1][0]).toBe('/services/costguard/api/series?by=user&step=day&since=1&until=2');
  });

  it("throws the service's message, or the status when it gave none", async () => {
    const refused = new HubClient('/', '', async () => answer(403, '{"message": "no", "status": 403}'));
    await expect(refused.me()).rejects.toThrow('no');
    const broken = new HubClient('/', '', async () => answer(502, '<html>'));
    await expect(broken.me()).rejects.toThrow('HTTP 502');
  });
});
