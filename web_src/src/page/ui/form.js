// @ts-check
/**
 * @file The settings form: prompt, seed, steps and size, and a base model's guidance (ui/guidance.js). Validates
 * everything before a single message goes to the worker (a bad size never starts a download), and reads/writes share
 * links (`?prompt=&seed=&steps=&size=WxH&guidance=&negative=`). The model's kind sets the steps' default.
 * @module page/ui/form
 */

import { InputError } from '../../shared/errors.js';
import { LIMITS } from '../../shared/limits.js';
import { requireElement } from './dom.js';
import { GuidanceFields, parseGuidanceScale } from './guidance.js';

/** Values of the size `<select>` besides "custom". */
export const SIZE_PRESETS = Object.freeze(['512x512', '768x768', '1024x1024']);

/**
 * What the form holds, already validated. `modelBase` is added by the caller.
 * @typedef {Object} FormValues
 * @property {string} prompt
 * @property {number} seed
 * @property {number} steps
 * @property {number} width
 * @property {number} height
 * @property {number} [guidanceScale]  A base model's; absent: the model's default.
 * @property {string} [negativePrompt]  A base model's; absent: none (`""`).
 */

/**
 * The raw strings of the form (or of a share link) before validation.
 * @typedef {Object} RawValues
 * @property {string} [prompt]
 * @property {string} [seed]
 * @property {string} [steps]
 * @property {string} [width]
 * @property {string} [height]
 * @property {string} [guidance]  The guidance scale's text.
 * @property {string} [negativePrompt]
 */

/** @returns {number} A uniformly random integer in [0, 2^32). */
export function randomSeed() {
    return crypto.getRandomValues(new Uint32Array(1))[0];
}

/**
 * `"768x512"` -> `{width: 768, height: 512}`; anything else -> null.
 * @param {string} text
 * @returns {{width: number, height: number} | null}
 */
export function parseSize(text) {
    const match = /^\s*(\d{1,5})\s*[x×]\s*(\d{1,5})\s*$/i.exec(text);
    return match ? { width: Number(match[1]), height: Number(match[2]) } : null;
}

/**
 * @param {string} field  Element id of the offending input.
 * @param {string} message
 * @returns {never}
 */
function reject(field, message) {
    throw new InputError(message, { field });
}

/**
 * A whole number in [min, max] or an InputError naming the field, the bad value and the fix.
 * @param {string} field
 * @param {string} label
 * @param {string | undefined} text
 * @param {number} min
 * @param {number} max
 * @param {string} fix
 * @returns {number}
 */
function parseInteger(field, label, text, min, max, fix) {
    const trimmed = (text ?? '').trim();
    if (!/^\d+$/.test(trimmed))
        reject(field, `${label} must be a whole number from ${min} to ${max} (got "${trimmed}"). ${fix}`);
    const value = Number(trimmed);
    if (value < min || value > max) reject(field, `${label} ${value} is outside ${min}–${max}. ${fix}`);
    return value;
}

/**
 * @param {string} field
 * @param {string} label
 * @param {string | undefined} text
 * @returns {number}
 */
function parseSide(field, label, text) {
    const { sizeMin, sizeMax, sizeMultiple } = LIMITS;
    const value = parseInteger(
        field,
        label,
        text,
        sizeMin,
        sizeMax,
        `Use a multiple of ${sizeMultiple} between ${sizeMin} and ${sizeMax} pixels.`,
    );
    if (value % sizeMultiple !== 0) {
        const lower = Math.max(sizeMin, Math.floor(value / sizeMultiple) * sizeMultiple);
        const upper = Math.min(sizeMax, lower + sizeMultiple);
        reject(
            field,
            `${label} ${value} is not a multiple of ${sizeMultiple} ` +
                `(the model works on ${sizeMultiple}-pixel patches). ` +
                `Use ${lower} or ${upper}.`,
        );
    }
    return value;
}

/**
 * Validates raw form strings. Throws InputError with `detail.field` = the id of the input to fix.
 * @param {RawValues} raw
 * @returns {FormValues}
 */
export function validateValues(raw) {
    const prompt = raw.prompt ?? '';
    const seed = parseInteger('seed', 'Seed', raw.seed, 0, LIMITS.seedMax - 1, 'Click the dice for a random seed.');
    const steps = parseInteger(
        'steps',
        'Steps',
        raw.steps,
        LIMITS.stepsMin,
        LIMITS.stepsMax,
        'klein is distilled for 4 steps; more rarely helps.',
    );
    const width = parseSide('width', 'Width', raw.width);
    const height = parseSide('height', 'Height', raw.height);
    /** @type {FormValues} */
    const values = { prompt, seed, steps, width, height };
    const guidanceScale = parseGuidanceScale(raw.guidance);
    if (guidanceScale !== undefined) values.guidanceScale = guidanceScale;
    if (raw.negativePrompt) values.negativePrompt = raw.negativePrompt;
    return values;
}

/**
 * The form fields a share link sets. Values are kept raw: a bad one is shown and then rejected by
 * validation on Generate, never silently "fixed". A `size` that is not WIDTHxHEIGHT cannot be shown
 * in the form, so it is reported in `problems` instead.
 * @param {string} search  `location.search`
 * @returns {{values: RawValues, problems: string[]}}
 */
export function valuesFromUrl(search) {
    const query = new URLSearchParams(search);
    /** @type {RawValues} */
    const values = {};
    const problems = [];
    const prompt = query.get('prompt');
    if (prompt !== null) values.prompt = prompt;
    const seed = query.get('seed');
    if (seed !== null) values.seed = seed;
    const steps = query.get('steps');
    if (steps !== null) values.steps = steps;
    const guidance = query.get('guidance');
    if (guidance !== null) values.guidance = guidance;
    const negative = query.get('negative');
    if (negative !== null) values.negativePrompt = negative;
    const size = query.get('size');
    if (size !== null) {
        const parsed = parseSize(size);
        if (parsed) {
            values.width = String(parsed.width);
            values.height = String(parsed.height);
        } else {
            problems.push(
                `The link's size=${size} is not WIDTHxHEIGHT (e.g. size=768x512); the size was left as it is.`,
            );
        }
    }
    return { values, problems };
}

/**
 * A link that reproduces this setup. Keeps `?model=` and `?precision=` when the page was opened with them.
 * @param {string} pageHref  `location.href`
 * @param {FormValues} values
 * @returns {string}
 */
export function shareUrl(pageHref, values) {
    const url = new URL(pageHref);
    const model = url.searchParams.get('model');
    const precision = url.searchParams.get('precision');
    url.hash = '';
    url.search = '';
    if (values.prompt) url.searchParams.set('prompt', values.prompt);
    url.searchParams.set('seed', String(values.seed));
    url.searchParams.set('steps', String(values.steps));
    url.searchParams.set('size', `${values.width}x${values.height}`);
    if (values.guidanceScale !== undefined) url.searchParams.set('guidance', String(values.guidanceScale));
    if (values.negativePrompt) url.searchParams.set('negative', values.negativePrompt);
    if (model !== null) url.searchParams.set('model', model);
    if (precision !== null) url.searchParams.set('precision', precision);
    return url.toString();
}

/**
 * @param {HTMLInputElement} input
 * @param {number} min
 * @param {number} max
 * @param {number} step
 */
function setRange(input, min, max, step) {
    input.min = String(min);
    input.max = String(max);
    input.step = String(step);
}

/** The form's elements and the small amount of behaviour that belongs to them. */
export class FormView {
    /** @param {Document} doc */
    constructor(doc) {
        this.form = requireElement(doc, 'form', HTMLFormElement);
        this.prompt = requireElement(doc, 'prompt', HTMLTextAreaElement);
        this.seed = requireElement(doc, 'seed', HTMLInputElement);
        this.seedRandom = requireElement(doc, 'seed-random', HTMLButtonElement);
        this.steps = requireElement(doc, 'steps', HTMLInputElement);
        this.stepsHint = requireElement(doc, 'steps-hint', HTMLElement);
        /** The steps were set by the user, a link or a history entry: the model's default leaves them alone. */
        this.stepsChosen = false;
        this.guidance = new GuidanceFields(doc);
        this.size = requireElement(doc, 'size', HTMLSelectElement);
        this.width = requireElement(doc, 'width', HTMLInputElement);
        this.height = requireElement(doc, 'height', HTMLInputElement);
        this.customSize = requireElement(doc, 'custom-size', HTMLElement);
        this.generate = requireElement(doc, 'generate', HTMLButtonElement);
        this.cancel = requireElement(doc, 'cancel', HTMLButtonElement);
        this.running = false;
        this.blocked = false;
        // The browser's own constraint hints (spinner steps, :invalid) follow the same contract as validation.
        setRange(this.steps, LIMITS.stepsMin, LIMITS.stepsMax, 1);
        for (const side of [this.width, this.height]) {
            setRange(side, LIMITS.sizeMin, LIMITS.sizeMax, LIMITS.sizeMultiple);
        }

        this.seedRandom.addEventListener('click', () => {
            this.seed.value = String(randomSeed());
            this.clearInvalid();
        });
        this.size.addEventListener('change', () => this.#syncSize());
        for (const input of [this.seed, this.steps, this.width, this.height]) {
            input.addEventListener('input', () => input.removeAttribute('aria-invalid'));
        }
        this.steps.addEventListener('input', () => (this.stepsChosen = true));
        this.#syncSize();
    }

    /**
     * Ctrl+Enter / Cmd+Enter anywhere in the form, and the Generate button, both call `handler`.
     * @param {() => void} handler
     */
    onSubmit(handler) {
        this.form.addEventListener('submit', (event) => {
            event.preventDefault();
            handler();
        });
        this.form.addEventListener('keydown', (event) => {
            if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
                event.preventDefault();
                if (!this.generate.disabled) this.form.requestSubmit(this.generate);
            }
        });
    }

    /** @returns {RawValues} */
    readRaw() {
        const preset = parseSize(this.size.value);
        return {
            prompt: this.prompt.value,
            seed: this.seed.value,
            steps: this.steps.value,
            width: preset ? String(preset.width) : this.width.value,
            height: preset ? String(preset.height) : this.height.value,
            ...this.guidance.readRaw(),
        };
    }

    /**
     * Validated values, or an InputError (after marking and focusing the field to fix).
     * @returns {FormValues}
     */
    read() {
        this.clearInvalid();
        try {
            return validateValues(this.readRaw());
        } catch (err) {
            const field = err instanceof InputError ? err.detail?.field : undefined;
            const input = typeof field === 'string' ? this.form.querySelector(`#${field}`) : null;
            if (input instanceof HTMLInputElement) {
                input.setAttribute('aria-invalid', 'true');
                input.focus();
            }
            throw err;
        }
    }

    /**
     * Fills the form; sizes that match a preset select it, others switch to custom.
     * @param {RawValues} raw
     */
    write(raw) {
        if (raw.prompt !== undefined) this.prompt.value = raw.prompt;
        if (raw.seed !== undefined) this.seed.value = raw.seed;
        if (raw.steps !== undefined) {
            this.steps.value = raw.steps;
            this.stepsChosen = true;
        }
        this.guidance.write(raw);
        if (raw.width !== undefined && raw.height !== undefined) {
            const key = `${raw.width}x${raw.height}`;
            this.size.value = SIZE_PRESETS.includes(key) ? key : 'custom';
            this.width.value = raw.width;
            this.height.value = raw.height;
        }
        this.clearInvalid();
        this.#syncSize();
    }

    /**
     * The model's kind and defaults are known (the worker read its manifest): the guidance fields follow it, and so
     * do the steps, unless chosen already.
     * @param {import('../../shared/model_repo.js').PipelineDefaults} pipeline
     */
    setModel(pipeline) {
        this.guidance.setModel(pipeline);
        if (!this.stepsChosen) this.steps.value = String(pipeline.steps);
        this.stepsHint.textContent = pipeline.isDistilled
            ? `${pipeline.steps} is what klein is tuned for.`
            : `${pipeline.steps} is this base model's default (diffusers').`;
    }

    clearInvalid() {
        for (const input of this.form.querySelectorAll('[aria-invalid]')) input.removeAttribute('aria-invalid');
    }

    /**
     * While a job runs, Generate is off and Cancel on; settings stay editable for the next run.
     * @param {boolean} running
     */
    setRunning(running) {
        this.running = running;
        this.generate.disabled = running || this.blocked;
        this.cancel.disabled = !running;
    }

    /**
     * Turns Generate off for good on this page (no WebGPU): nothing could run.
     * @param {string} reason  Shown as the button's tooltip.
     */
    block(reason) {
        this.blocked = true;
        this.generate.disabled = true;
        this.generate.title = reason;
    }

    /**
     * Fixes the output size to `size` (Inpaint: the image's used size), or frees it again (null). The size
     * controls are disabled meanwhile, with `reason` as their tooltip.
     * @param {{width: number, height: number} | null} size
     * @param {string} reason
     */
    lockSize(size, reason) {
        if (size) this.write({ width: String(size.width), height: String(size.height) });
        for (const control of [this.size, this.width, this.height]) {
            control.disabled = size !== null;
            control.title = size ? reason : '';
        }
    }

    /** Shows the width/height inputs only for "custom"; they start at the preset's size when opened. */
    #syncSize() {
        const custom = this.size.value === 'custom';
        this.customSize.hidden = !custom;
        const preset = parseSize(this.size.value);
        if (preset) {
            this.width.value = String(preset.width);
            this.height.value = String(preset.height);
        }
    }
}
