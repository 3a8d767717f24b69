// @ts-check
/**
 * @file The step preview: the "Show each step" setting (GenerateParams.preview; kept in this browser like the
 * Memory field, and `?preview=on|off` on the address sets it) and its view, `#step-preview` in the result frame,
 * which shows what the image is becoming after each denoising step (the worker's PreviewFrame, 1/8 of the image's
 * size, scaled up smoothly by the browser) until the image arrives.
 * @module page/ui/step_preview
 */

import { InputError } from '../../shared/errors.js';
import { requireElement } from './dom.js';
import { keep, readKept } from './kept_setting.js';

/** @typedef {import('../../protocol.js').JobEvent} WorkerEvent */

/** Where the choice is kept. */
export const PREVIEW_KEY = 'klein-web:preview';

/**
 * What `?preview=` asks for: true (on), false (off), or null when the address has none.
 * @param {string} href
 * @returns {boolean | null}
 */
export function previewFromUrl(href) {
    const value = new URL(href).searchParams.get('preview');
    if (value === null || value === '') return null;
    if (value !== 'on' && value !== 'off') {
        throw new InputError(`?preview=${value} is not a preview setting; use ?preview=on or ?preview=off.`);
    }
    return value === 'on';
}

export class PreviewSetting {
    /**
     * @param {Document} doc
     * @param {{storage: Storage | null, href: string}} options  `storage`: localStorage, or null.
     */
    constructor(doc, { storage, href }) {
        this.checkbox = requireElement(doc, 'preview', HTMLInputElement);
        // On unless this browser turned it off.
        let on = readKept(storage, PREVIEW_KEY) !== 'off';
        /** @type {InputError | null} A bad `?preview=`, for the page to show (the kept choice applies). */
        this.urlError = null;
        try {
            on = previewFromUrl(href) ?? on;
        } catch (err) {
            this.urlError = /** @type {InputError} */ (err);
        }
        this.checkbox.checked = on;
        const save = () => keep(storage, PREVIEW_KEY, this.checkbox.checked ? 'on' : 'off');
        save();
        this.checkbox.addEventListener('change', save);
    }

    /** @returns {boolean} Whether to ask the worker for step previews. */
    enabled() {
        return this.checkbox.checked;
    }
}

export class StepPreviewView {
    /** @param {Document} doc */
    constructor(doc) {
        this.canvas = requireElement(doc, 'step-preview', HTMLCanvasElement);
    }

    /**
     * Draws the preview a `step` event carries (other events are not its business).
     * @param {WorkerEvent} event
     */
    handle(event) {
        if (event.type !== 'step' || !event.preview) return;
        const { width, height, rgba } = event.preview;
        const { canvas } = this;
        if (canvas.width !== width || canvas.height !== height) {
            canvas.width = width;
            canvas.height = height;
        }
        const context = canvas.getContext('2d');
        if (!context) return; // no 2D canvas: the image still arrives at the end
        // A structured-cloned array owns a plain ArrayBuffer, which ImageData requires.
        context.putImageData(new ImageData(/** @type {Uint8ClampedArray<ArrayBuffer>} */ (rgba), width, height), 0, 0);
        canvas.setAttribute('aria-label', `What the image is becoming: step ${event.step} of ${event.steps}`);
        canvas.dataset.step = String(event.step);
        canvas.hidden = false;
    }

    /** The run ended: the image (or the previous one, after a failure) shows again. */
    clear() {
        this.canvas.hidden = true;
        delete this.canvas.dataset.step;
    }
}
