// @ts-check
/**
 * @file The form's mode (Text to image | Edit | Inpaint) and the inputs the two image modes add: references
 * (references.js), the image to inpaint with its mask (mask_painter.js) and the strength. Files arrive by the
 * pickers, by a drop anywhere on the form and by pasting (Ctrl/Cmd+V of an image or an image file); where they
 * go follows the mode. The output size follows the inputs: Edit matches the first reference's used size unless
 * the user sets another, Inpaint is locked to the source's used size (the pipeline requires it).
 * In Text to image nothing here is visible and nothing is sent, so that mode is what it was without them.
 * @module page/ui/editing
 */

import { InputError } from '../../shared/errors.js';
import { inpaintStart } from '../../shared/inpaint.js';
import { LIMITS } from '../../shared/limits.js';
import { blobName, readBlob, transferFiles } from './input_images.js';
import { MaskPainter } from './mask_painter.js';
import { OutpaintFields } from './outpaint_fields.js';
import { ReferencesView } from './references.js';
import { requireElement } from './dom.js';

/** @typedef {import('../../protocol.js').ImageInput} ImageInput */
/** @typedef {'text' | 'edit' | 'inpaint'} Mode */
/**
 * What a history entry keeps of a run's inputs: the files as they were sent.
 * @typedef {Object} RunInputs
 * @property {'edit' | 'inpaint'} mode
 * @property {{name: string, blob: Blob}[]} images  In request order (inpaint: the source first).
 * @property {{name: string, blob: Blob} | null} mask
 * @property {number | null} strength
 * @property {import('../../shared/outpaint.js').Extension | null} [extension]  Inpaint: outpainting's pixels.
 */
/**
 * @typedef {Object} Collected
 * @property {{images?: ImageInput[], mask?: ImageInput, strength?: number,
 *   extend?: import('../../shared/outpaint.js').Extension}} params  What GenerateParams adds.
 * @property {RunInputs | null} record  null in text-to-image.
 */

/** diffusers' default strength for inpainting (shared/limits.js). */
export const DEFAULT_STRENGTH = LIMITS.strengthDefault;

/**
 * The denoising steps inpainting runs at `strength` out of `steps` (0 when it would run none).
 * @param {number} steps
 * @param {number} strength
 * @returns {number}
 */
function stepsRun(steps, strength) {
    try {
        return steps - inpaintStart(steps, strength);
    } catch {
        return 0;
    }
}

/**
 * A copy of the file's bytes for the request: the page keeps the Blob (history, the next run).
 * @param {{name: string, blob: Blob}} input
 * @param {string} label  How a message names it, e.g. 'Reference 2 (cat.png)'.
 * @returns {Promise<ImageInput>}
 */
async function imageInput({ name, blob }, label) {
    return { name, bytes: await readBlob(blob, label) };
}

export class EditingView {
    /**
     * @param {Document} doc
     * @param {import('./form.js').FormView} form
     * @param {{onProblem: (error: unknown) => void, onAdded: () => void}} handlers  A refused file; any file taken.
     */
    constructor(doc, form, { onProblem, onAdded }) {
        this.form = form;
        this.onProblem = onProblem;
        this.onAdded = onAdded;
        this.modeInputs = /** @type {HTMLInputElement[]} */ ([...doc.querySelectorAll('input[name="mode"]')]);
        this.panel = requireElement(doc, 'editing', HTMLElement);
        this.sourceField = requireElement(doc, 'inpaint-source', HTMLElement);
        this.referencesLabel = requireElement(doc, 'references-label', HTMLElement);
        this.matchField = requireElement(doc, 'match-size-field', HTMLElement);
        this.matchSize = requireElement(doc, 'match-size', HTMLInputElement);
        this.strengthField = requireElement(doc, 'strength-field', HTMLElement);
        this.strength = requireElement(doc, 'strength', HTMLInputElement);
        this.strengthValue = requireElement(doc, 'strength-value', HTMLOutputElement);
        this.strengthSteps = requireElement(doc, 'strength-steps', HTMLElement);
        this.references = new ReferencesView(doc, { onChange: () => this.#syncSize() });
        this.painter = new MaskPainter(doc, { onSourceChange: () => this.#syncSize() });
        this.outpaint = new OutpaintFields(doc, { onChange: () => this.#syncSize() });

        for (const input of this.modeInputs) input.addEventListener('change', () => this.#show());
        this.#onFiles(this.references.input, (files) => this.references.add(files));
        this.#onFiles(this.painter.sourceInput, (files) => this.#setSource(files));
        this.#onFiles(this.painter.maskInput, ([file]) => this.painter.loadMask(file, file.name));
        this.matchSize.addEventListener('change', () => this.#syncSize());
        // Choosing a size by hand ends "match the first image" (it would otherwise undo the choice).
        for (const control of [form.size, form.width, form.height]) {
            control.addEventListener('input', () => {
                if (this.mode === 'edit') this.matchSize.checked = false;
            });
        }
        this.strength.value = String(DEFAULT_STRENGTH);
        this.strength.addEventListener('input', () => this.#syncStrength());
        form.steps.addEventListener('input', () => this.#syncStrength());
        this.#acceptDrops(form.form, doc);
        doc.addEventListener('paste', (event) => {
            const files = transferFiles(event.clipboardData);
            if (files.length === 0) return; // text: the prompt's own paste
            event.preventDefault();
            this.#route(files, null);
        });
        this.#show();
    }

    /** @returns {Mode} */
    get mode() {
        const checked = this.modeInputs.find((input) => input.checked);
        return /** @type {Mode} */ (checked?.value ?? 'text');
    }

    /** @param {Mode} mode */
    setMode(mode) {
        for (const input of this.modeInputs) input.checked = input.value === mode;
        this.#show();
    }

    /**
     * The request's images, mask and strength for the current mode, or an InputError saying what is missing.
     * @returns {Promise<Collected>}
     */
    async collect() {
        const mode = this.mode;
        if (mode === 'text') return { params: {}, record: null };
        const references = this.references.images.map(({ name, blob }) => ({ name, blob }));
        if (mode === 'edit') {
            if (references.length === 0) {
                throw new InputError(
                    'Edit needs at least one reference image: drop, paste or choose one, or switch to Text to image.',
                );
            }
            const record = { mode, images: references, mask: null, strength: null };
            const images = await Promise.all(references.map((r, i) => imageInput(r, `Reference ${i + 1} (${r.name})`)));
            return { params: { images }, record };
        }
        const source = this.painter.source;
        if (!source) throw new InputError('Inpaint needs the image to repaint: drop, paste or choose one.');
        const extension = this.outpaint.collect(source);
        // Outpainting repaints the new area whatever the mask says: a mask is optional there.
        const painted = !this.painter.isEmpty();
        if (!painted && !extension) {
            throw new InputError(
                'The mask is empty: paint over the part of the image to repaint (or load a mask file), or extend ' +
                    'the image.',
            );
        }
        const mask = painted ? await this.painter.exportMask() : null;
        const images = [{ name: source.name, blob: source.blob }, ...references];
        const strength = Number(this.strength.value);
        const record = { mode, images, mask, strength, extension };
        /** @type {Collected['params']} */
        const params = {
            images: await Promise.all(
                images.map((image, i) =>
                    imageInput(
                        image,
                        i === 0 ? `The image to inpaint (${image.name})` : `Reference ${i} (${image.name})`,
                    ),
                ),
            ),
            strength,
        };
        if (mask) params.mask = await imageInput(mask, `The mask (${mask.name})`);
        if (extension) params.extend = extension;
        return { params, record };
    }

    /**
     * Puts a history entry's inputs back (null: a text-to-image entry). The size is the entry's own, already
     * written to the form; "match the first image" stays on only when that is what it was.
     * @param {RunInputs | null} inputs
     * @param {{width: number, height: number}} size
     */
    async restore(inputs, size) {
        if (!inputs) {
            this.setMode('text');
            return;
        }
        const references = inputs.mode === 'inpaint' ? inputs.images.slice(1) : inputs.images;
        await this.references.add(
            references.map((image) => image.blob),
            { replace: true, names: references.map((image) => image.name) },
        );
        if (inputs.mode === 'inpaint') {
            const [source] = inputs.images;
            await this.painter.setSource(source.blob, source.name);
            if (inputs.mask) await this.painter.loadMask(inputs.mask.blob, inputs.mask.name);
            this.outpaint.write(inputs.extension ?? null);
            this.strength.value = String(inputs.strength ?? DEFAULT_STRENGTH);
        } else {
            const first = this.references.images[0]?.used;
            this.matchSize.checked = first !== undefined && first.width === size.width && first.height === size.height;
        }
        this.setMode(inputs.mode);
    }

    /**
     * Runs `take` on the files chosen in a picker; a refusal goes to onProblem. The picker is emptied so that
     * choosing the same file again is a change too.
     * @param {HTMLInputElement} input
     * @param {(files: File[]) => Promise<void>} take
     */
    #onFiles(input, take) {
        input.addEventListener('change', () => {
            const files = [...(input.files ?? [])];
            input.value = '';
            if (files.length) this.#take(() => take(files));
        });
    }

    /** @param {() => Promise<void>} action */
    #take(action) {
        action().then(
            () => this.onAdded(),
            (err) => this.onProblem(err),
        );
    }

    /** @param {File[]} files */
    async #setSource(files) {
        if (files.length !== 1) {
            throw new InputError(
                `Inpaint repaints one image at a time (got ${files.length}); add references separately.`,
            );
        }
        await this.painter.setSource(files[0], blobName(files[0], 'pasted image'));
    }

    /**
     * Files dropped or pasted go where the mode takes them. In Text to image an image means Edit.
     * @param {File[]} files
     * @param {EventTarget | null} target  Where they were dropped (null: pasted).
     */
    #route(files, target) {
        if (this.mode === 'text') this.setMode('edit');
        const onSource = target instanceof Node && this.sourceField.contains(target);
        if (this.mode === 'inpaint' && (onSource || !this.painter.source)) {
            this.#take(() => this.#setSource(files));
        } else {
            this.#take(() => this.references.add(files));
        }
    }

    /**
     * @param {HTMLElement} zone
     * @param {Document} doc
     */
    #acceptDrops(zone, doc) {
        /** @param {DragEvent} event */
        const carriesFiles = (event) => event.dataTransfer?.types.includes('Files') ?? false;
        zone.addEventListener('dragover', (event) => {
            if (!carriesFiles(event)) return;
            event.preventDefault();
            if (event.dataTransfer) event.dataTransfer.dropEffect = 'copy';
            zone.classList.add('dropping');
        });
        zone.addEventListener('dragleave', (event) => {
            const inside = event.relatedTarget instanceof Node && zone.contains(event.relatedTarget);
            if (!inside) zone.classList.remove('dropping');
        });
        zone.addEventListener('drop', (event) => {
            zone.classList.remove('dropping');
            const files = transferFiles(event.dataTransfer);
            if (files.length === 0) return;
            event.preventDefault();
            this.#route(files, event.target);
        });
        // A file dropped beside the form would make the browser open it, leaving the page and its inputs.
        doc.addEventListener('dragover', (event) => {
            if (carriesFiles(event)) event.preventDefault();
        });
        doc.addEventListener('drop', (event) => {
            if (carriesFiles(event)) event.preventDefault();
        });
    }

    #show() {
        const mode = this.mode;
        this.panel.hidden = mode === 'text';
        this.sourceField.hidden = mode !== 'inpaint';
        this.strengthField.hidden = mode !== 'inpaint';
        this.outpaint.field.hidden = mode !== 'inpaint';
        this.matchField.hidden = mode !== 'edit';
        this.referencesLabel.textContent = mode === 'inpaint' ? 'Reference images (optional)' : 'Reference images';
        this.#syncSize();
        this.#syncStrength();
    }

    /** The output size the inputs imply: Inpaint's is fixed, Edit's a default the user may override. */
    #syncSize() {
        const mode = this.mode;
        const source = this.painter.source;
        const extended = mode === 'inpaint' ? this.outpaint.sync(source) : null;
        if (mode === 'inpaint' && source) {
            const size = extended ?? source.used;
            const what = extended ? 'the extended image' : 'the image';
            this.form.lockSize(size, `Inpainting keeps the size of ${what}: ${size.width}x${size.height}.`);
            return;
        }
        this.form.lockSize(null, '');
        const first = this.references.images[0];
        if (mode === 'edit' && this.matchSize.checked && first) {
            this.form.write({ width: String(first.used.width), height: String(first.used.height) });
        }
    }

    #syncStrength() {
        const strength = Number(this.strength.value);
        this.strengthValue.value = strength.toFixed(2);
        const steps = Number(this.form.steps.value);
        if (!Number.isInteger(steps) || steps < LIMITS.stepsMin || steps > LIMITS.stepsMax) {
            this.strengthSteps.textContent = 'Set the steps to see how many run.';
            return;
        }
        const run = stepsRun(steps, strength);
        this.strengthSteps.textContent =
            run === 0
                ? `Runs 0 of ${steps} steps: the image would come back unchanged.`
                : `Runs ${run} of ${steps} step${steps === 1 ? '' : 's'}` +
                  (run < steps
                      ? ': lower strength keeps more of the image.'
                      : ': the masked area is redrawn from noise.');
    }
}
