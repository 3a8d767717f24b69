// @ts-check
/**
 * @file The form's Guidance scale and Negative prompt. A base model runs classifier-free guidance, two transformer
 * calls a step (pipeline/guidance.js), and shows both fields with its defaults; a distilled model (klein-4B, klein-9B)
 * runs none, and a line says so instead. The model's manifest decides (the worker's `modelInfo` answer); until the page
 * knows it, the line says that. `#guidance[data-model]` tells which: `unknown` until the page knows, then
 * `distilled`, `base`, or `error` when the manifest could not be read.
 * An empty scale sends none: the worker takes the model's default for the mode, as diffusers does.
 * @module page/ui/guidance
 */

import { InputError } from '../../shared/errors.js';
import { LIMITS } from '../../shared/limits.js';
import { requireElement } from './dom.js';

/** @typedef {import('../../shared/model_repo.js').PipelineDefaults} PipelineDefaults */

/**
 * The Guidance scale field's text as a scale: undefined when empty (the model's default), else a number in
 * [guidanceMin, guidanceMax], or an InputError naming the field.
 * @param {string | undefined} text
 * @returns {number | undefined}
 */
export function parseGuidanceScale(text) {
    const trimmed = (text ?? '').trim();
    if (trimmed === '') return undefined;
    const { guidanceMin, guidanceMax } = LIMITS;
    const value = /^\d+(\.\d+)?$/.test(trimmed) ? Number(trimmed) : NaN;
    if (!(value >= guidanceMin && value <= guidanceMax)) {
        throw new InputError(
            `Guidance scale must be a number from ${guidanceMin} to ${guidanceMax} (got "${trimmed}"); 1 turns ` +
                "guidance off, 4 is diffusers' default. Leave it empty for the model's default.",
            { field: 'guidance-scale' },
        );
    }
    return value;
}

/**
 * @param {number | null} scale
 * @returns {string}
 */
function describeScale(scale) {
    return scale === null || scale <= 1 ? 'none' : String(scale);
}

export class GuidanceFields {
    /** @param {Document} doc */
    constructor(doc) {
        this.section = requireElement(doc, 'guidance', HTMLElement);
        this.fields = requireElement(doc, 'guidance-fields', HTMLElement);
        this.scale = requireElement(doc, 'guidance-scale', HTMLInputElement);
        this.negative = requireElement(doc, 'negative-prompt', HTMLTextAreaElement);
        this.note = requireElement(doc, 'guidance-note', HTMLElement);
        /** @type {PipelineDefaults | null} The model's kind and defaults, once known. */
        this.pipeline = null;
        this.scale.addEventListener('input', () => this.scale.removeAttribute('aria-invalid'));
        this.#show(
            'unknown',
            "Guidance scale and negative prompt appear here for base models, once the model's manifest is read.",
        );
    }

    /** Whether the fields apply: the model is a base model. */
    get applies() {
        return this.pipeline !== null && !this.pipeline.isDistilled;
    }

    /**
     * The model's kind and defaults are known: show the fields for a base model, the reason for a distilled one.
     * @param {PipelineDefaults} pipeline
     */
    setModel(pipeline) {
        this.pipeline = pipeline;
        if (pipeline.isDistilled) {
            this.#show(
                'distilled',
                'No guidance scale or negative prompt: this model is distilled and runs one transformer call a step ' +
                    '(diffusers ignores both for it).',
            );
            return;
        }
        const text = describeScale(pipeline.guidanceScale);
        const inpaint = describeScale(pipeline.inpaintGuidanceScale);
        this.scale.placeholder = inpaint === text ? text : `${text} (${inpaint} for Inpaint)`;
        this.#show(
            'base',
            'This base model runs classifier-free guidance: above 1, each step runs the transformer twice (once on ' +
                `the negative prompt). Empty: the model's default, ${text}` +
                (inpaint === text ? '' : ` (${inpaint} for Inpaint)`) +
                '; 1 turns it off.',
        );
    }

    /**
     * The model's kind could not be learned (its manifest unreachable): the fields stay away, and `why` says so.
     * @param {string} why
     */
    unreadable(why) {
        this.pipeline = null;
        this.#show('error', `Guidance scale and negative prompt: unknown whether this model takes them (${why}).`);
    }

    /**
     * The raw texts to validate, or {} when the fields do not apply (nothing is sent then).
     * @returns {{guidance?: string, negativePrompt?: string}}
     */
    readRaw() {
        if (!this.applies) return {};
        return { guidance: this.scale.value, negativePrompt: this.negative.value };
    }

    /**
     * Fills the fields (from a share link or a history entry); kept while hidden, sent only for a base model.
     * @param {{guidance?: string, negativePrompt?: string}} raw
     */
    write(raw) {
        if (raw.guidance !== undefined) this.scale.value = raw.guidance;
        if (raw.negativePrompt !== undefined) this.negative.value = raw.negativePrompt;
    }

    /**
     * @param {'unknown' | 'distilled' | 'base' | 'error'} kind
     * @param {string} note
     */
    #show(kind, note) {
        this.section.dataset.model = kind;
        this.fields.hidden = kind !== 'base';
        this.note.textContent = note;
    }
}
