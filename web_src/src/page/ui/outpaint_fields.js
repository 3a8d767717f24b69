// @ts-check
/**
 * @file Inpaint's "Extend" fields: pixels to add on each side of the image to inpaint (outpainting). The worker pads
 * the image and the mask by the rule of shared/outpaint.js; here the fields are read, checked with the same words
 * and the output size they give is shown.
 * @module page/ui/outpaint_fields
 */

import { InputError } from '../../shared/errors.js';
import { inputImageSize } from '../../shared/limits.js';
import { EXTEND_MAX, SIDES, checkExtension, isExtended, paddedProblem, paddedSize } from '../../shared/outpaint.js';
import { requireElement } from './dom.js';

/** @typedef {import('../../shared/outpaint.js').Extension} Extension */

export class OutpaintFields {
    /**
     * @param {Document} doc
     * @param {{onChange: () => void}} handlers  After any field changes (the output size follows them).
     */
    constructor(doc, { onChange }) {
        this.field = requireElement(doc, 'extend-field', HTMLElement);
        this.info = requireElement(doc, 'extend-info', HTMLElement);
        /** @type {Record<string, HTMLInputElement>} */
        this.inputs = Object.fromEntries(
            SIDES.map((side) => [side, requireElement(doc, `extend-${side}`, HTMLInputElement)]),
        );
        for (const input of Object.values(this.inputs)) {
            input.max = String(EXTEND_MAX);
            input.addEventListener('input', onChange);
        }
    }

    /**
     * The extension the fields ask for (an empty field is 0), or an InputError in the worker's words.
     * @returns {Extension}
     */
    read() {
        /** @type {Record<string, number>} */
        const values = {};
        for (const side of SIDES) {
            const text = this.inputs[side].value.trim();
            values[side] = text === '' ? 0 : Number(text);
        }
        return checkExtension(values);
    }

    /**
     * The extension to send with the request: null when it adds nothing; an InputError when the fields are wrong or
     * the padded image is beyond the limits.
     * @param {{name: string, width: number, height: number}} source  The image to inpaint, decoded size.
     * @returns {Extension | null}
     */
    collect(source) {
        const extension = this.read();
        if (!isExtended(extension)) return null;
        const problem = paddedProblem(extension, source.width, source.height, `The image to inpaint (${source.name})`);
        if (problem) throw new InputError(problem, { extend: extension });
        return extension;
    }

    /** @param {Extension | null} extension  A history entry's (null: none). */
    write(extension) {
        for (const side of SIDES) {
            const value = extension?.[side] ?? 0;
            this.inputs[side].value = value ? String(value) : '';
        }
    }

    /**
     * The output size with the extension (the padded image's used size), or null when it adds nothing or is wrong;
     * the hint says which.
     * @param {{name: string, width: number, height: number} | null} source
     * @returns {{width: number, height: number} | null}
     */
    sync(source) {
        let extension;
        try {
            extension = this.read();
        } catch (err) {
            this.info.textContent = err instanceof Error ? err.message : String(err);
            return null;
        }
        if (!isExtended(extension)) {
            this.info.textContent = 'Pixels to add on each side; the new area is painted to match (outpainting).';
            return null;
        }
        if (!source) {
            this.info.textContent = 'Choose the image to extend.';
            return null;
        }
        const problem = paddedProblem(extension, source.width, source.height, `The image to inpaint (${source.name})`);
        if (problem) {
            this.info.textContent = problem;
            return null;
        }
        const padded = paddedSize(extension, source.width, source.height);
        const used = inputImageSize(padded.width, padded.height);
        this.info.textContent =
            `Extended to ${padded.width}x${padded.height}, used at ${used.width}x${used.height}; ` +
            'the new area is repainted, a painted mask repaints more.';
        return { width: used.width, height: used.height };
    }
}
