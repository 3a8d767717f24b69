// @ts-check
/**
 * @file The reference images of Edit (and Inpaint's optional ones): `#references` thumbnails, each with its
 * size, used size and token cost and a remove button, and `#reference-tokens`, what they add to every step.
 * Adding is all or nothing: a batch with one unreadable, too small or surplus file adds none of its files, so
 * the list never holds half of what the user dropped.
 * @module page/ui/references
 */

import { InputError } from '../../shared/errors.js';
import { LIMITS } from '../../shared/limits.js';
import { blobName, checkImage, describeCost } from './input_images.js';
import { requireElement } from './dom.js';

/** @typedef {import('./input_images.js').InputImage} InputImage */

export class ReferencesView {
    /**
     * @param {Document} doc
     * @param {{onChange: () => void}} handlers  Called after every change of the list (the output size follows it).
     */
    constructor(doc, { onChange }) {
        this.list = requireElement(doc, 'references', HTMLElement);
        this.tokens = requireElement(doc, 'reference-tokens', HTMLElement);
        this.input = requireElement(doc, 'reference-files', HTMLInputElement);
        this.addButton = requireElement(doc, 'add-references', HTMLButtonElement);
        this.onChange = onChange;
        /** @type {InputImage[]} */
        this.images = [];
        /** @type {string[]} thumbnail object URLs of the current render, revoked on the next */
        this.urls = [];
        this.addButton.addEventListener('click', () => this.input.click());
        this.render();
    }

    /**
     * Checks every file, then adds them all or none. Throws InputError (naming the file) when one is refused.
     * @param {Blob[]} blobs
     * @param {{replace?: boolean, names?: string[]}} [options]  replace: the list becomes exactly these (history).
     */
    async add(blobs, { replace = false, names = [] } = {}) {
        const start = replace ? 0 : this.images.length;
        if (start + blobs.length > LIMITS.referencesMax) {
            const taken = Math.max(0, LIMITS.referencesMax - start);
            const surplus = blobs.slice(taken).map((b, i) => blobName(b, names[taken + i] ?? 'pasted image'));
            throw new InputError(
                `At most ${LIMITS.referencesMax} reference images: ${start} ${start === 1 ? 'is' : 'are'} loaded, so ` +
                    `${surplus.join(', ')} ${surplus.length === 1 ? 'was' : 'were'} not added. Remove one first.`,
            );
        }
        /** @type {InputImage[]} */
        const checked = [];
        for (const [i, blob] of blobs.entries()) {
            const name = names[i] ?? blobName(blob, `pasted image ${start + i + 1}`);
            checked.push(await checkImage(blob, name, `Reference ${start + i + 1} (${name})`));
        }
        this.images = replace ? checked : [...this.images, ...checked];
        this.render();
        this.onChange();
    }

    /** @param {number} index */
    remove(index) {
        this.images.splice(index, 1);
        this.render();
        this.onChange();
        // Keyboard users stay in the list: the next remove button, else the add button.
        const buttons = this.list.querySelectorAll('button');
        const next = buttons[Math.min(index, buttons.length - 1)];
        (next instanceof HTMLButtonElement ? next : this.addButton).focus();
    }

    clear() {
        this.images = [];
        this.render();
        this.onChange();
    }

    /** @returns {number} Transformer tokens the references add to every step. */
    totalTokens() {
        return this.images.reduce((sum, image) => sum + image.used.tokens, 0);
    }

    render() {
        for (const url of this.urls) URL.revokeObjectURL(url);
        this.urls = [];
        this.list.replaceChildren(...this.images.map((image, index) => this.#item(image, index)));
        this.addButton.disabled = this.images.length >= LIMITS.referencesMax;
        const total = this.totalTokens();
        this.tokens.textContent = this.images.length
            ? `${this.images.length} of ${LIMITS.referencesMax} images: ` +
              `${total.toLocaleString('en-US')} tokens added to every step.`
            : `Drop, paste (Ctrl+V) or choose up to ${LIMITS.referencesMax} images (PNG, JPEG or WebP).`;
    }

    /**
     * @param {InputImage} image
     * @param {number} index
     * @returns {HTMLLIElement}
     */
    #item(image, index) {
        const item = document.createElement('li');
        item.className = 'reference';
        const url = URL.createObjectURL(image.blob);
        this.urls.push(url);
        const thumb = document.createElement('img');
        thumb.src = url;
        thumb.alt = `Reference ${index + 1}: ${image.name}`;
        const text = document.createElement('span');
        text.className = 'reference-text';
        const name = document.createElement('span');
        name.className = 'reference-name';
        name.textContent = image.name;
        name.title = image.name;
        const cost = document.createElement('span');
        cost.className = 'reference-cost';
        cost.textContent = describeCost(image);
        text.append(name, cost);
        const remove = document.createElement('button');
        remove.type = 'button';
        remove.className = 'btn btn-icon btn-quiet reference-remove';
        remove.setAttribute('aria-label', `Remove reference ${index + 1} (${image.name})`);
        remove.title = 'Remove';
        remove.textContent = '×';
        remove.addEventListener('click', () => this.remove(index));
        item.append(thumb, text, remove);
        return item;
    }
}
