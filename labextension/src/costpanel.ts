/**
 * The cost panel (right sidebar): renders a CostPanelModel, nothing else. It
 * assembles its sections (`CostPanel.IPanelSection`s), one file each:
 * Budget (`costpanelbudgets.ts`), Instance (`costpanelinstance.ts`), Totals
 * (`costpaneltotals.ts`), the sections other plugins give it (alerts, the
 * spend chart), GPUs (`costpanelgpus.ts`), Notebooks
 * (`costpanelnotebooks.ts`) and Kernels (`costpanelkernels.ts`); each file
 * lists its DOM hooks. Rows are keyed (notebook path, kernel id, GPU uuid)
 * and updated in place, so buttons and hover survive the refreshes. The
 * panel routes clicks: sort headers, kernel actions, notebook links.
 *
 * Stable DOM hooks: `#jp-costguard-panel`, `#jp-costguard-panel-simulated`
 * (`.jp-costguard-simulated`), `.jp-costguard-owner` (whose server, under
 * JupyterHub; `hidden` otherwise), `.jp-costguard-panel-state`.
 */
import type { IKernelDoc } from './api';
import { BudgetsSection } from './costpanelbudgets';
import { GpusSection } from './costpanelgpus';
import { InstanceSection } from './costpanelinstance';
import { KernelsSection } from './costpanelkernels';
import { CostPanelModel, PanelTable } from './costpanelmodel';
import { NotebooksSection } from './costpanelnotebooks';
import type { CostPanelSection, IPanelSection as IPanelSectionBase } from './costpanelsection';
import { TotalsSection } from './costpaneltotals';
import { el, setText } from './dom';
import { SidePanel } from './sidepanel';

/** DOM id of the panel. */
export const PANEL_ID = 'jp-costguard-panel';

/** DOM id of the panel's "simulated" pill (the status bar's is `jp-costguard-simulated`). */
export const PANEL_SIMULATED_ID = 'jp-costguard-panel-simulated';

/** Kernel actions the panel offers. */
export type KernelAction = 'shutdown' | 'interrupt' | 'hibernate';

export namespace CostPanel {
  export interface IOptions {
    model: CostPanelModel;
    /** Run a kernel action (the plugin confirms and calls the REST API). */
    onKernelAction?: (action: KernelAction, kernel: IKernelDoc) => void;
    /** Open a notebook (the plugin asks the document manager). */
    onOpenNotebook?: (path: string) => void;
    /**
     * Sections other plugins' widgets render (e.g. the spend chart), placed
     * after Totals; each is told when the panel is shown or hidden.
     */
    sections?: ReadonlyArray<IPanelSection>;
  }

  /** A section of the panel (declared with the sections' base, which imports no panel). */
  export type IPanelSection = IPanelSectionBase;
}

/**
 * The cost panel widget.
 */
export class CostPanel extends SidePanel<CostPanelModel> {
  constructor(options: CostPanel.IOptions) {
    super(options.model, ['click', 'keydown']);
    this._onKernelAction = options.onKernelAction;
    this._onOpenNotebook = options.onOpenNotebook;
    this._extraSections = options.sections ?? [];
    this.id = PANEL_ID;
    this.addClass('jp-costguard-panel');
    this.title.caption = 'Costguard: GPU spend';
    this._build();
    this.render();
  }

  handleEvent(event: Event): void {
    if (event.type === 'click') {
      this._onClick(event as MouseEvent);
    } else if (event.type === 'keydown') {
      const key = (event as KeyboardEvent).key;
      const target = event.target as HTMLElement;
      if ((key === 'Enter' || key === ' ') && target.closest('.jp-costguard-sort')) {
        event.preventDefault();
        this._onClick(event as unknown as MouseEvent);
      }
    }
  }

  /** Polls `kernels` and `gpus` only while shown. */
  protected setShown(shown: boolean): void {
    this.model.active = shown;
    for (const section of this._extraSections) {
      section.setShown?.(shown);
    }
  }

  private _onClick(event: MouseEvent): void {
    const target = event.target as HTMLElement | null;
    if (!target) {
      return;
    }
    const sort = target.closest<HTMLElement>('.jp-costguard-sort');
    if (sort && this.node.contains(sort)) {
      const table = sort.dataset.table as PanelTable;
      const key = sort.dataset.key;
      if (key && (table === 'notebooks' || table === 'kernels')) {
        this.model.sortBy(table, key);
      }
      return;
    }
    const button = target.closest<HTMLElement>('[data-action]');
    if (button && this.node.contains(button)) {
      const action = button.dataset.action;
      if (action === 'shutdown' || action === 'interrupt' || action === 'hibernate') {
        const row = button.closest<HTMLElement>('.jp-costguard-kernel-row');
        const id = row?.dataset.kernelId;
        const kernel = this.model.kernels.find(k => k.kernel_id === id);
        if (kernel && this._onKernelAction) {
          this._onKernelAction(action, kernel);
        }
      } else if (action === 'open-notebook') {
        const row = button.closest<HTMLElement>('.jp-costguard-notebook-row');
        const path = row?.dataset.path;
        if (path && this._onOpenNotebook) {
          event.preventDefault();
          this._onOpenNotebook(path);
        }
      }
    }
  }

  // ---- construction -------------------------------------------------------

  private _build(): void {
    const header = el('div', 'jp-costguard-panel-header');
    header.appendChild(el('h2', 'jp-costguard-panel-title', 'Costguard'));
    this._owner = el('span', 'jp-costguard-owner');
    this._owner.title = 'JupyterHub user (server)';
    this._owner.hidden = true;
    header.appendChild(this._owner);
    this._simulated = el('span', 'jp-costguard-simulated', 'simulated');
    this._simulated.id = PANEL_SIMULATED_ID;
    this._simulated.title = 'Numbers come from a replayed trace, not this machine';
    header.appendChild(this._simulated);
    this._stateNode = el('span', 'jp-costguard-panel-state');
    header.appendChild(this._stateNode);
    this.node.appendChild(header);

    const body = el('div', 'jp-costguard-panel-body');
    this.node.appendChild(body);
    const model = this.model;
    const before = [new BudgetsSection(model), new InstanceSection(model), new TotalsSection(model)];
    const after = [new GpusSection(model), new NotebooksSection(model), new KernelsSection(model)];
    this._sections = [...before, ...after];
    for (const section of [...before, ...this._extraSections, ...after]) {
      body.appendChild(section.node);
    }
  }

  // ---- rendering ----------------------------------------------------------

  protected render(): void {
    const model = this.model;
    const data = model.data;
    this._simulated.hidden = !model.simulated;
    const owner = model.owner;
    this._owner.hidden = owner === null;
    setText(this._owner, owner ?? '');
    this.node.dataset.costguardSimulated = model.simulated ? 'true' : 'false';
    let stateText = '';
    if (data.state === 'offline') {
      stateText = 'costguard: offline';
    } else if (data.state === 'loading') {
      stateText = 'loading…';
    }
    setText(this._stateNode, stateText);
    this.node.dataset.costguardState = data.state;
    for (const section of this._sections) {
      section.render();
    }
  }

  private _extraSections: ReadonlyArray<CostPanel.IPanelSection>;
  private _onKernelAction?: (action: KernelAction, kernel: IKernelDoc) => void;
  private _onOpenNotebook?: (path: string) => void;
  private _owner!: HTMLElement;
  private _sections: CostPanelSection[] = [];
  private _simulated!: HTMLElement;
  private _stateNode!: HTMLElement;
}
