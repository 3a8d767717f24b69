// @ts-check
/**
 * @file `#error`: turns an error's stable `code` (shared/errors.js) into what the user can do next.
 * Messages from the worker already say what went wrong; this adds the action for each kind.
 * @module page/ui/error_view
 */

import { ErrorCode, KleinError } from '../../shared/errors.js';
import { formatBytes } from '../../shared/format.js';
import { requireElement } from './dom.js';

/**
 * @typedef {Object} ErrorAdvice
 * @property {string} title
 * @property {string} message   The error's own message.
 * @property {string} action    What to do now ('' when the message already says it).
 */

/**
 * The first sentence of a message: the worker's no-WebGPU text ends with generic advice that the page
 * replaces with advice for this very browser.
 * @param {string} text
 * @returns {string}
 */
export function firstSentence(text) {
    const match = /^.*?[.!?](?=\s|$)/s.exec(text.trim());
    return match ? match[0] : text.trim();
}

/**
 * @param {unknown} value
 * @returns {number | null}
 */
function bytes(value) {
    return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/**
 * @param {unknown} error
 * @param {{width?: number, height?: number, advice?: string}} context  Size of the failed run; browser advice.
 * @returns {ErrorAdvice}
 */
export function adviseError(error, context) {
    const code = error instanceof KleinError ? error.code : ErrorCode.INTERNAL;
    const message = error instanceof Error ? error.message : String(error);
    const detail = error instanceof KleinError && error.detail && typeof error.detail === 'object' ? error.detail : {};
    switch (code) {
        case ErrorCode.INPUT:
            return { title: 'Check the settings', message, action: '' };
        case ErrorCode.NO_WEBGPU:
            return {
                title: 'WebGPU is not available',
                message: context.advice ? firstSentence(message) : message,
                action: context.advice ?? '',
            };
        case ErrorCode.DEVICE_LOST:
            return {
                title: 'The GPU was reset',
                message,
                action: 'This happens when the driver restarts or another app claims the GPU. Click Generate to try again: the model reloads from this browser’s cache.',
            };
        case ErrorCode.OUT_OF_MEMORY: {
            const size = context.width && context.height ? ` at ${context.width}×${context.height}` : '';
            return {
                title: `Out of GPU memory${size}`,
                message,
                action: 'Choose a smaller size (512×512 needs the least), close other GPU-heavy tabs, then Generate again.',
            };
        }
        case ErrorCode.NETWORK:
            return {
                title: 'The download stopped',
                message,
                action: 'Check the connection and click Generate: the download resumes where it stopped, finished files are kept.',
            };
        case ErrorCode.QUOTA: {
            // store/weights.js puts {needed, usage, quota} in the detail: lead with needed vs available.
            const needed = bytes(detail.needed);
            const quota = bytes(detail.quota);
            const usage = bytes(detail.usage);
            const numbers =
                needed !== null && quota !== null && usage !== null
                    ? `: ${formatBytes(needed)} needed, ${formatBytes(Math.max(0, quota - usage))} available`
                    : '';
            return {
                title: `Not enough browser storage for the model${numbers}`,
                message,
                action: 'Free disk space (the browser lets a site use a share of it) or clear other sites’ data, then Generate again.',
            };
        }
        case ErrorCode.DEGENERATE_OUTPUT:
            return {
                title: 'The model produced an unusable image',
                message,
                action: 'Nothing is shown rather than a black square. Try another seed or size; if it keeps happening on this GPU, please report it with the details under “This device”.',
            };
        case ErrorCode.MODEL_FILE:
            return {
                title: 'A model file is missing or damaged',
                message,
                action: 'Click “Clear cached model” below and Generate again to download a fresh copy.',
            };
        case ErrorCode.INTEGRITY:
            return {
                title: 'A downloaded model file failed its checksum',
                message,
                action:
                    'The bad copy was deleted. Click Generate to download it again; if it fails again, the model server ' +
                    'sends other bytes than its `manifest.json` lists (a stale manifest or a re-converted model): publish ' +
                    'the model again with `klein-web fetch` or `klein-web convert`, or use another model URL.',
            };
        case ErrorCode.BUSY:
            return {
                title: 'Another tab is downloading the model',
                message,
                action: 'Let that tab finish (or close it), then Generate again here: the files are shared.',
            };
        case ErrorCode.UNSUPPORTED:
            return {
                title: 'This GPU lacks a feature the model needs',
                message,
                action: 'Check `chrome://gpu` (shader-f16), update the GPU driver, or use a model folder that has fp32 graphs.',
            };
        case ErrorCode.RUNTIME:
            return {
                title: 'The model runtime failed',
                message,
                action: 'Try again, or a smaller size; if it keeps happening, reload the page.',
            };
        case ErrorCode.WORKER_CRASHED:
            return { title: 'The inference worker stopped', message, action: '' };
        default:
            return {
                title: 'Something went wrong',
                message,
                action: 'Try again; if it keeps happening, reload the page.',
            };
    }
}

/**
 * Fills `element` with `text`, turning `backticked` parts into <code> (flags and chrome:// addresses
 * must not wrap mid-word or be mistaken for prose). Text only: never innerHTML.
 * @param {HTMLElement} element
 * @param {string} text
 */
export function renderInline(element, text) {
    const parts = text.split('`');
    element.replaceChildren(
        ...parts.map((part, index) => {
            if (index % 2 === 0) return document.createTextNode(part);
            const code = document.createElement('code');
            code.textContent = part;
            return code;
        }),
    );
}

export class ErrorView {
    /** @param {Document} doc */
    constructor(doc) {
        this.region = requireElement(doc, 'error', HTMLElement);
    }

    /**
     * @param {ErrorAdvice} advice
     * @param {ErrorCode} code  Kept in `data-code` for automation and CSS.
     * @param {{reveal?: boolean}} [options]  reveal: scroll the message into view (not at page load).
     */
    show(advice, code, { reveal = true } = {}) {
        const title = document.createElement('strong');
        title.textContent = advice.title;
        const message = document.createElement('p');
        message.textContent = advice.message;
        const parts = [title, message];
        if (advice.action) {
            const action = document.createElement('p');
            action.className = 'action';
            renderInline(action, advice.action);
            parts.push(action);
        }
        this.region.dataset.code = code;
        this.region.replaceChildren(...parts);
        // In a narrow window the message may sit below the fold: bring it into view.
        if (reveal) this.region.scrollIntoView({ block: 'nearest' });
    }

    clear() {
        delete this.region.dataset.code;
        this.region.replaceChildren();
    }
}
