/**
 * The hub pages' entry point: the shell (`jupyter_costguard/hub/page.html`)
 * loads the bundle built from here (`npm run build:hub`).
 */
import { HubPage, readBoot } from './page';

new HubPage(readBoot()).start();
