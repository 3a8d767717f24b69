// @ts-check
/**
 * @file `#capabilities`: what the worker's probe found (adapter, shader-f16, buffer limit, storage,
 * isolation, threads), with plain-language warnings, and the "Clear cached model" control.
 * @module page/ui/capabilities
 */

import { formatBinaryBytes, formatBytes } from '../../shared/format.js';
import { requireElement } from './dom.js';
import { firstSentence } from './error_view.js';

/** @typedef {import('../../shared/types.js').Capabilities} Capabilities */

/** About what the q4 model needs in browser storage (text encoder 2.48 + transformer 3.00 + VAE 0.10 GB). */
const MODEL_BYTES = 5.6e9;
/** The VAE's mid-block attention alone needs about 1 GB at 1024x1024 (seed model card). */
const LARGE_BUFFER = 2 ** 30;
/**
 * Dawn hides shader-f16 on NVIDIA + Vulkan (every NVIDIA GPU under Linux) unless this toggle is on; with it the
 * q4f16 graphs run instead of the q4 ones (int8 activations, slower per step: docs/machines.md).
 */
export const NVIDIA_F16_FLAG = '--enable-dawn-features=vulkan_enable_f16_on_nvidia';

/**
 * One row of the panel.
 * @typedef {Object} Row
 * @property {string} label
 * @property {string} value
 * @property {'ok' | 'warn' | 'bad' | ''} tone
 * @property {string} [note]
 */

/**
 * @param {Capabilities} caps
 * @param {{linux: boolean}} platform  Whether the browser runs on Linux (where WebGPU goes through Vulkan).
 * @returns {Row[]}
 */
export function describeCapabilities(caps, { linux }) {
    /** @type {Row[]} */
    const rows = [];
    if (!caps.webgpu || !caps.adapter) {
        rows.push({
            label: 'WebGPU',
            value: 'not available',
            tone: 'bad',
            note: caps.error ? firstSentence(caps.error) : undefined,
        });
    } else {
        const { vendor, architecture, description } = caps.adapter;
        const name = [vendor, architecture].filter(Boolean).join(' · ') || 'unnamed adapter';
        rows.push({
            label: 'GPU adapter',
            value: name,
            tone: caps.software ? 'warn' : 'ok',
            note: caps.software
                ? 'Software adapter (no GPU is used): it works, but an image takes many minutes. Enable graphics acceleration and check chrome://gpu.'
                : description || undefined,
        });
        rows.push({
            label: 'shader-f16',
            value: caps.shaderF16 ? 'yes' : 'no',
            tone: caps.shaderF16 ? 'ok' : 'warn',
            note: caps.shaderF16 ? undefined : withoutShaderF16(caps, { linux }),
        });
        rows.push({
            label: 'Max buffer size',
            value: formatBinaryBytes(caps.maxBufferSize),
            tone: caps.maxBufferSize >= LARGE_BUFFER ? 'ok' : 'warn',
            note:
                caps.maxBufferSize >= LARGE_BUFFER ? undefined : 'Large sizes (1024×1024) may not fit: prefer 512×512.',
        });
    }
    const { usage, quota, persisted } = caps.storage;
    const free = quota - usage;
    rows.push({
        label: 'Storage',
        value: `${formatBytes(usage)} used of ${formatBytes(quota)}${persisted ? ' · persistent' : ''}`,
        tone: free >= MODEL_BYTES || usage >= MODEL_BYTES ? 'ok' : 'warn',
        note:
            free >= MODEL_BYTES || usage >= MODEL_BYTES
                ? undefined
                : `The model needs about ${formatBytes(MODEL_BYTES)}; only ${formatBytes(Math.max(0, free))} is available to this site.`,
    });
    rows.push({
        label: 'Cross-origin isolated',
        value: caps.crossOriginIsolated ? 'yes' : 'no',
        tone: caps.crossOriginIsolated ? 'ok' : '',
        note: caps.crossOriginIsolated
            ? undefined
            : 'CPU work runs on one thread (the server sends no COOP/COEP headers).',
    });
    rows.push({ label: 'CPU threads', value: String(caps.threads), tone: '' });
    return rows;
}

/**
 * What a missing shader-f16 costs, and the fix where there is one.
 * @param {Capabilities} caps
 * @param {{linux: boolean}} platform
 * @returns {string}
 */
function withoutShaderF16(caps, { linux }) {
    const cost = 'fp16 graphs run as fp32 graphs or on the CPU instead: slower, and within rounding of the fp16 result.';
    const nvidia = /nvidia/i.test(`${caps.adapter?.vendor} ${caps.adapter?.description}`);
    if (!(linux && nvidia)) return cost;
    return `This NVIDIA GPU has fp16 shaders, but Chrome on Linux hides them unless it is started with ${NVIDIA_F16_FLAG} (the fast q4f16 model, about 1.8x faster per step). ${cost}`;
}

export class CapabilitiesView {
    /**
     * @param {Document} doc
     * @param {{onClearCache: () => void}} handlers
     */
    constructor(doc, { onClearCache }) {
        this.panel = requireElement(doc, 'capabilities', HTMLElement);
        this.list = requireElement(doc, 'capabilities-list', HTMLElement);
        this.clearButton = requireElement(doc, 'clear-cache', HTMLButtonElement);
        this.cacheMessage = requireElement(doc, 'cache-message', HTMLElement);
        this.clearButton.addEventListener('click', onClearCache);
    }

    /** @param {string} text  While probing, or when the probe itself failed. */
    placeholder(text) {
        const item = document.createElement('div');
        item.className = 'muted';
        item.textContent = text;
        this.list.replaceChildren(item);
    }

    /** @param {Capabilities} caps */
    render(caps) {
        this.panel.dataset.json = JSON.stringify(caps);
        const children = [];
        const linux = /Linux/.test(navigator.userAgent) && !/Android/.test(navigator.userAgent);
        for (const row of describeCapabilities(caps, { linux })) {
            const term = document.createElement('dt');
            term.textContent = row.label;
            const value = document.createElement('dd');
            if (row.tone) value.dataset.tone = row.tone;
            const text = document.createElement('span');
            text.className = 'value';
            text.textContent = row.value;
            value.append(text);
            if (row.note) {
                const note = document.createElement('span');
                note.className = 'note';
                note.textContent = row.note;
                value.append(note);
            }
            children.push(term, value);
        }
        this.list.replaceChildren(...children);
    }

    /**
     * @param {boolean} busy  Clearing must not race a running generation.
     */
    setBusy(busy) {
        this.clearButton.disabled = busy;
    }

    /** @param {string} text */
    message(text) {
        this.cacheMessage.textContent = text;
    }
}
