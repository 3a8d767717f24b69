// @ts-check
/**
 * @file Inpaint's source image and the mask painted over it. The mask lives in `#mask-canvas` at the source's
 * natural size (the overlay is only scaled by CSS), as coverage in the alpha channel: painting adds coverage,
 * the eraser removes it, invert flips it. Exported, coverage becomes a greyscale PNG of the same size, white
 * where the image is repainted. A soft edge blurs the coverage on export; since the pipeline thresholds the
 * mask at 50% (as diffusers binarises it), the blur rounds and smooths the outline rather than fading it.
 * @module page/ui/mask_painter
 */

import { InputError } from '../../shared/errors.js';
import { encodeGreyPng } from './grey_png.js';
import { checkImage, decodeChecked, describeCost } from './input_images.js';
import { requireElement } from './dom.js';

/** @typedef {import('./input_images.js').InputImage} InputImage */

/** Colour of painted areas on screen; only the alpha channel is the mask. */
const PAINT = 'rgb(255 48 96)';

/**
 * @param {number} width
 * @param {number} height
 * @returns {CanvasRenderingContext2D}
 */
function scratch(width, height) {
    const canvas = document.createElement('canvas');
    canvas.width = width;
    canvas.height = height;
    const context = canvas.getContext('2d', { willReadFrequently: true });
    if (!context) throw new Error('This browser has no 2D canvas: the mask cannot be painted.');
    return context;
}

export class MaskPainter {
    /**
     * @param {Document} doc
     * @param {{onSourceChange: () => void}} handlers  After a source is set or removed (the output size follows it).
     */
    constructor(doc, { onSourceChange }) {
        this.sourceInput = requireElement(doc, 'source-file', HTMLInputElement);
        this.chooseSource = requireElement(doc, 'choose-source', HTMLButtonElement);
        this.sourceInfo = requireElement(doc, 'source-info', HTMLElement);
        this.painter = requireElement(doc, 'painter', HTMLElement);
        this.image = requireElement(doc, 'source-image', HTMLImageElement);
        this.canvas = requireElement(doc, 'mask-canvas', HTMLCanvasElement);
        this.tools = requireElement(doc, 'mask-tools', HTMLElement);
        this.brushSize = requireElement(doc, 'brush-size', HTMLInputElement);
        this.brushSizeValue = requireElement(doc, 'brush-size-value', HTMLOutputElement);
        this.erase = requireElement(doc, 'tool-erase', HTMLInputElement);
        this.softEdge = requireElement(doc, 'soft-edge', HTMLInputElement);
        this.softEdgeValue = requireElement(doc, 'soft-edge-value', HTMLOutputElement);
        this.maskInput = requireElement(doc, 'mask-file', HTMLInputElement);
        this.maskInfo = requireElement(doc, 'mask-info', HTMLElement);
        this.onSourceChange = onSourceChange;
        /** @type {InputImage | null} */
        this.source = null;
        /** The mask file the user loaded, while the canvas still shows exactly it (then it is sent as given). */
        /** @type {{blob: Blob, name: string} | null} */
        this.loadedMask = null;
        /** @type {{x: number, y: number} | null} last point of the stroke in progress */
        this.last = null;
        const context = this.canvas.getContext('2d', { willReadFrequently: true });
        if (!context) throw new Error('This browser has no 2D canvas: the mask cannot be painted.');
        this.context = context;

        this.chooseSource.addEventListener('click', () => this.sourceInput.click());
        requireElement(doc, 'load-mask', HTMLButtonElement).addEventListener('click', () => this.maskInput.click());
        requireElement(doc, 'mask-clear', HTMLButtonElement).addEventListener('click', () => this.clear());
        requireElement(doc, 'mask-invert', HTMLButtonElement).addEventListener('click', () => this.invert());
        requireElement(doc, 'mask-download', HTMLButtonElement).addEventListener('click', () => this.#download());
        this.brushSize.addEventListener('input', () => this.#syncLabels());
        this.softEdge.addEventListener('input', () => {
            this.#setLoaded(null);
            this.#syncLabels();
        });
        this.canvas.addEventListener('pointerdown', (event) => this.#down(event));
        this.canvas.addEventListener('pointermove', (event) => this.#move(event));
        for (const type of /** @type {const} */ (['pointerup', 'pointercancel'])) {
            this.canvas.addEventListener(type, () => (this.last = null));
        }
        // The on-screen blur is in screen pixels: follow the overlay's displayed size.
        new ResizeObserver(() => this.#syncLabels()).observe(this.canvas);
        this.#show();
    }

    /**
     * Checks and shows the image to inpaint; the mask starts empty at its natural size.
     * @param {Blob} blob
     * @param {string} name
     */
    async setSource(blob, name) {
        const image = await checkImage(blob, name, `The image to inpaint (${name})`);
        if (this.image.src) URL.revokeObjectURL(this.image.src);
        this.source = image;
        this.image.src = URL.createObjectURL(blob);
        this.image.alt = `Image to inpaint: ${name}`;
        this.canvas.width = image.width;
        this.canvas.height = image.height;
        const longer = Math.max(image.width, image.height);
        this.brushSize.max = String(Math.max(64, Math.round(longer / 3)));
        this.brushSize.value = String(Math.max(4, Math.round(longer / 16)));
        this.softEdge.max = String(Math.max(16, Math.round(longer / 16)));
        this.clear();
        this.#show();
        this.onSourceChange();
    }

    removeSource() {
        if (this.image.src) URL.revokeObjectURL(this.image.src);
        this.image.removeAttribute('src');
        this.source = null;
        this.#setLoaded(null);
        this.#show();
        this.onSourceChange();
    }

    /**
     * Loads a mask file in place of the painted one: its brightness becomes coverage, scaled to the source.
     * @param {Blob} blob
     * @param {string} name
     */
    async loadMask(blob, name) {
        if (!this.source) throw new InputError('Load the image to inpaint before its mask.');
        // Decoded as the worker decodes it, to refuse what it would refuse, a coloured mask among them (which
        // pixels repaint would depend on a luma formula the user never sees).
        const label = `The mask (${name})`;
        const { image: checked, pixels: file } = await decodeChecked(blob, name, label, { mask: true });
        const own = scratch(checked.width, checked.height);
        const grey = own.createImageData(checked.width, checked.height);
        for (let p = 0, q = 0; p < file.rgb.length; p += 3, q += 4) {
            if (file.rgb[p] !== file.rgb[p + 1] || file.rgb[p + 1] !== file.rgb[p + 2]) {
                throw new InputError(
                    `${label} has coloured pixels; a mask must be greyscale (white repaints, black keeps).`,
                );
            }
            grey.data[q] = grey.data[q + 1] = grey.data[q + 2] = file.rgb[p];
            grey.data[q + 3] = 255;
        }
        own.putImageData(grey, 0, 0);
        // Brightness becomes coverage at the image's size.
        const { width, height } = this.canvas;
        const scaled = scratch(width, height);
        scaled.drawImage(own.canvas, 0, 0, width, height);
        const pixels = scaled.getImageData(0, 0, width, height);
        const data = pixels.data;
        for (let i = 0; i < data.length; i += 4) {
            const level = data[i];
            data[i] = 255;
            data[i + 1] = 48;
            data[i + 2] = 96;
            data[i + 3] = level;
        }
        this.context.putImageData(pixels, 0, 0);
        this.#setLoaded({ blob, name });
    }

    clear() {
        this.context.clearRect(0, 0, this.canvas.width, this.canvas.height);
        this.#setLoaded(null);
    }

    /** Painted becomes kept and kept painted (`xor` with full coverage leaves 1 - alpha). */
    invert() {
        const { context } = this;
        context.save();
        context.globalCompositeOperation = 'xor';
        context.fillStyle = PAINT;
        context.fillRect(0, 0, this.canvas.width, this.canvas.height);
        context.restore();
        this.#setLoaded(null);
    }

    /** @returns {boolean} Nothing painted: inpainting would repaint nothing. */
    isEmpty() {
        const data = this.context.getImageData(0, 0, this.canvas.width, this.canvas.height).data;
        for (let i = 3; i < data.length; i += 4) if (data[i] !== 0) return false;
        return true;
    }

    /**
     * The mask as the pipeline takes it: a loaded, untouched mask file as given; otherwise the coverage (with
     * the soft edge) as a greyscale PNG at the source's natural size, white = repaint.
     * @returns {Promise<{blob: Blob, name: string}>}
     */
    async exportMask() {
        if (this.loadedMask) return this.loadedMask;
        const { width, height } = this.canvas;
        const radius = Number(this.softEdge.value);
        const blurred = scratch(width, height);
        if (radius > 0) blurred.filter = `blur(${radius}px)`;
        blurred.drawImage(this.canvas, 0, 0);
        const rgba = blurred.getImageData(0, 0, width, height).data;
        const grey = new Uint8Array(width * height);
        for (let i = 0; i < grey.length; i++) grey[i] = rgba[4 * i + 3];
        return { blob: await encodeGreyPng(grey, width, height), name: 'painted-mask.png' };
    }

    /**
     * Whether the canvas shows a loaded file untouched (sent as given) or a painted mask (exported).
     * @param {{blob: Blob, name: string} | null} loaded
     */
    #setLoaded(loaded) {
        this.loadedMask = loaded;
        this.maskInfo.textContent = loaded
            ? `Mask: ${loaded.name}, sent as given (painting over it makes it a painted mask).`
            : 'Mask: painted here, sent as a greyscale PNG of the image’s size.';
    }

    /** Saves the mask as it would be sent, to reuse it in a later run or another tool. */
    async #download() {
        const { blob, name } = await this.exportMask();
        const url = URL.createObjectURL(blob);
        const link = document.createElement('a');
        link.href = url;
        link.download = name;
        link.click();
        setTimeout(() => URL.revokeObjectURL(url), 60_000);
    }

    #show() {
        const source = this.source;
        this.painter.hidden = source === null;
        this.tools.hidden = source === null;
        this.chooseSource.textContent = source ? 'Replace image…' : 'Choose image…';
        this.sourceInfo.textContent = source
            ? `${source.name}: ${describeCost(source)}. The output is ${source.used.width}x${source.used.height}.`
            : 'Drop, paste (Ctrl+V) or choose the image to repaint part of.';
        this.#syncLabels();
    }

    #syncLabels() {
        this.brushSizeValue.value = `${this.brushSize.value} px`;
        const radius = Number(this.softEdge.value);
        this.softEdgeValue.value = radius > 0 ? `${radius} px` : 'off';
        const shown = this.canvas.getBoundingClientRect().width;
        const scale = this.canvas.width > 0 && shown > 0 ? shown / this.canvas.width : 1;
        this.canvas.style.filter = radius > 0 ? `blur(${(radius * scale).toFixed(2)}px)` : '';
    }

    /**
     * @param {PointerEvent} event
     * @returns {{x: number, y: number}}  In the source's pixels.
     */
    #point(event) {
        const box = this.canvas.getBoundingClientRect();
        return {
            x: ((event.clientX - box.left) * this.canvas.width) / box.width,
            y: ((event.clientY - box.top) * this.canvas.height) / box.height,
        };
    }

    /** @param {PointerEvent} event */
    #down(event) {
        if (!this.source || event.button !== 0 || this.brushSize.disabled) return;
        event.preventDefault();
        this.canvas.setPointerCapture(event.pointerId);
        this.last = this.#point(event);
        this.#stroke(this.last, this.last);
    }

    /** @param {PointerEvent} event */
    #move(event) {
        if (!this.last) return;
        const point = this.#point(event);
        this.#stroke(this.last, point);
        this.last = point;
    }

    /**
     * @param {{x: number, y: number}} from
     * @param {{x: number, y: number}} to
     */
    #stroke(from, to) {
        const { context } = this;
        context.save();
        context.globalCompositeOperation = this.erase.checked ? 'destination-out' : 'source-over';
        context.strokeStyle = PAINT;
        context.lineWidth = Number(this.brushSize.value);
        context.lineCap = 'round';
        context.lineJoin = 'round';
        context.beginPath();
        if (from.x === to.x && from.y === to.y) {
            // A click paints a dot: a zero-length line is dropped by the stroker, caps and all.
            context.fillStyle = PAINT;
            context.arc(to.x, to.y, context.lineWidth / 2, 0, 2 * Math.PI);
            context.fill();
        } else {
            context.moveTo(from.x, from.y);
            context.lineTo(to.x, to.y);
            context.stroke();
        }
        context.restore();
        this.#setLoaded(null);
    }
}
