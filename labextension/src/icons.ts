/**
 * Costguard icons: the extension's (cost panel tab, settings editor), the
 * Jobs panel's tab, "Run as batch job" (notebook and cell toolbars, context menu) and
 * Hibernate (notebook toolbar).
 */
import { LabIcon } from '@jupyterlab/ui-components';

const svgstr = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M8 1h2v3h4V1h2v3h2a2 2 0 0 1 2 2v2h3v2h-3v4h3v2h-3v2a2 2 0 0 1-2 2h-2v3h-2v-3h-4v3H8v-3H6a2 2 0 0 1-2-2v-2H1v-2h3v-4H1V8h3V6a2 2 0 0 1 2-2h2V1zM6 6v12h12V6H6z"/>
    <path d="M11.2 7.5h1.6v1.1c1.1.2 1.9.8 2.1 1.9l-1.5.4c-.1-.5-.6-.9-1.4-.9-.8 0-1.2.3-1.2.7 0 .5.4.7 1.5.9 1.6.3 2.7.8 2.7 2.2 0 1.1-.8 1.9-2.2 2.1v1.1h-1.6v-1.1c-1.3-.2-2.2-.9-2.4-2.1l1.6-.3c.1.6.7 1 1.6 1 .8 0 1.3-.3 1.3-.8 0-.4-.3-.6-1.6-.9-1.5-.3-2.6-.8-2.6-2.2 0-1 .8-1.8 2.1-2V7.5z"/>
  </g>
</svg>`;

export const costguardIcon = new LabIcon({
  name: 'jupyter-costguard:icon',
  svgstr
});

/** A queue of jobs with a clock: the Jobs panel. */
const jobsSvg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M2 4h13v3H2zM2 10.5h9v3H2zM2 17h9v3H2z"/>
    <path d="M17.5 9a5.5 5.5 0 1 0 0 11 5.5 5.5 0 0 0 0-11zm0 1.8a3.7 3.7 0 1 1 0 7.4 3.7 3.7 0 0 1 0-7.4zM16.7 12v3.2l2.6 1.6.8-1.2-1.9-1.2V12z"/>
  </g>
</svg>`;

export const jobsIcon = new LabIcon({
  name: 'jupyter-costguard:jobs',
  svgstr: jobsSvg
});

/**
 * An arrow going into a server rack: "send to batch" (the copy-like stack of
 * cards it replaced read as "duplicate").
 */
const runAsJobSvg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path fill-rule="evenodd" d="M13 2h10v20H13zm2 2v4h6V4zm0 6v4h6v-4zm0 6v4h6v-4z"/>
    <path d="M1 10.5h6V6.5l5.5 5.5L7 17.5v-4H1z"/>
  </g>
</svg>`;

export const runAsJobIcon = new LabIcon({
  name: 'jupyter-costguard:run-as-job',
  svgstr: runAsJobSvg
});

/** A crescent moon with a small "z": a kernel put to sleep, its work kept (Hibernate). */
const hibernateSvg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M10.5 3.2A8.9 8.9 0 0 0 12 21a9 9 0 0 0 8.6-6.3 7.3 7.3 0 0 1-10.1-11.5z"/>
    <path d="M15 2h6v1.6l-3.7 4h3.7V9h-6V7.4l3.7-4H15z"/>
  </g>
</svg>`;

export const hibernateIcon = new LabIcon({
  name: 'jupyter-costguard:hibernate',
  svgstr: hibernateSvg
});
