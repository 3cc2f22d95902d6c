/**
 * A stand-in for the costguard REST API behind ServerConnection: records
 * every request, answers from a route table.
 */
import { ServerConnection } from '@jupyterlab/services';

export interface IRecorded {
  method: string;
  path: string;
  body: string;
}

export type Handler = (req: IRecorded) => { status?: number; body?: unknown } | 'network-error';

export class FakeServer {
  readonly requests: IRecorded[] = [];
  routes: { [key: string]: Handler } = {};

  /** Server settings whose fetch goes to this fake. */
  settings(): ServerConnection.ISettings {
    return ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/lab-base/',
      wsUrl: 'ws://localhost:8888/lab-base/',
      appendToken: false,
      token: 'secret',
      fetch: (async (input: RequestInfo, init?: RequestInit) => {
        const request = new Request(input, init);
        const url = new URL(request.url);
        // ServerConnection appends a cache-busting timestamp to GETs.
        url.search = url.search.replace(/[?&]\d{10,}$/, '');
        const prefix = '/lab-base/costguard/api/';
        const path = url.pathname.startsWith(prefix)
          ? url.pathname.slice(prefix.length) + url.search
          : url.pathname + url.search;
        const rec: IRecorded = {
          method: request.method,
          path,
          body: request.method === 'GET' ? '' : await request.text()
        };
        this.requests.push(rec);
        const handler =
          this.routes[`${rec.method} ${url.pathname.slice(prefix.length)}`] ??
          this.routes[`${rec.method} ${path}`];
        if (!handler) {
          return new Response('<html>404</html>', { status: 404 });
        }
        const result = handler(rec);
        if (result === 'network-error') {
          throw new TypeError('Failed to fetch');
        }
        // No body at all (not ''): a 204 may not have one.
        return new Response(
          result.body === undefined ? null : JSON.stringify(result.body),
          {
            status: result.status ?? 200,
            headers: { 'Content-Type': 'application/json' }
          }
        );
      }) as typeof fetch
    });
  }

  count(method: string, path: string): number {
    return this.requests.filter(r => r.method === method && r.path === path).length;
  }
}
