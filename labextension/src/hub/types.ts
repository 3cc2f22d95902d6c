/**
 * The hub service's answers, as its OpenAPI document (`hub/openapi.yaml`) says
 * them: the types `npm run gen:hub` writes to `src/generated/hubapi.ts`.
 */
import type { components } from '../generated/hubapi';

type Schemas = components['schemas'];

/** A row of `api/spend`: a user, a group or a server. */
export type Row = Schemas['Row'];
/** A budget with what this period has spent of it. */
export type Budget = Schemas['Budget'];
/** `api/spend`'s answer. */
export type SpendList = Schemas['SpendList'];
/** The service's last look at the Hub (admins only). */
export type Poll = NonNullable<SpendList['poll']>;
/** `api/series`'s answer. */
export type Series = Schemas['Series'];
/** One point of a series. */
export type SeriesPoint = Series['series'][number]['points'][number];
/** `api/me`'s answer. */
export type Me = Schemas['Me'];
/** What the figures are by. */
export type By = SpendList['by'];
/** A chart's bar width. */
export type Step = Series['step'];

/** What the page's shell hands the script (the `boot` JSON the service writes). */
export interface IBoot {
  admin: boolean;
  user: string;
  prefix: string;
  xsrf: string;
  currency: string;
}
