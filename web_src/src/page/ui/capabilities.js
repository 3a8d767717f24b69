// @ts-check
/**
 * @file `#capabilities`: what the worker's probe found (adapter, GPU features, the graphs they run, buffer limit
 * and the sizes that fit, storage and OPFS, memory, isolation, threads), with what each missing piece costs
 * (shared/browser_needs.js decides), and the "Clear cached model" control.
 * @module page/ui/capabilities
 */

import { decide } from '../../shared/browser_needs.js';
import { formatBinaryBytes, formatBytes } from '../../shared/format.js';
import { LIMITS } from '../../shared/limits.js';
import { requireElement } from './dom.js';
import { firstSentence } from './error_view.js';

/** @typedef {import('../../shared/browser_needs.js').CapabilityRecord} CapabilityRecord */
/** @typedef {import('../../shared/browser_needs.js').Decision} Decision */
/** @typedef {import('../../shared/browser_needs.js').RepoFacts} RepoFacts */
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
 * The panel's rows: the adapter, each GPU feature with what its absence costs, the graphs that run, the buffer
 * limit with the sizes that fit, storage and the OPFS methods, memory; from the capability decision
 * (shared/browser_needs.js), so a browser is described by what it has, whatever its name.
 * @param {CapabilityRecord} caps
 * @param {{linux: boolean}} platform  Whether the browser runs on Linux (where WebGPU goes through Vulkan).
 * @param {RepoFacts | null} [repo]  The model's manifest once the worker has read it: its sizes, not klein-4B's.
 * @returns {Row[]}
 */
export function describeCapabilities(caps, { linux }, repo = null) {
    const decision = decide(caps, { repo });
    const modelBytes = decision.model.downloadBytes;
    /** @param {string} feature */
    const cost = (feature) => decision.lacks.find((lack) => lack.feature === feature)?.cost;
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
            note: caps.shaderF16 ? undefined : withoutShaderF16(caps, cost('shader-f16') ?? '', { linux }),
        });
        rows.push({
            label: 'subgroups',
            value: caps.subgroups ? 'yes' : 'no',
            tone: caps.subgroups ? 'ok' : 'warn',
            note: cost('subgroups'),
        });
        rows.push({
            label: 'Matrix units',
            value: caps.subgroupMatrix ? 'yes' : 'no',
            tone: caps.subgroupMatrix ? 'ok' : '',
            note: cost('subgroup-matrix'),
        });
        rows.push({ label: 'Graphs', value: `${decision.family}, on ${decision.kernels}`, tone: '' });
        const tooSmall = decision.missing.find((m) => m.need === 'buffer-size');
        rows.push({
            label: 'Max buffer size',
            value: formatBinaryBytes(decision.bufferLimit),
            tone: tooSmall ? 'bad' : decision.largestSide < LIMITS.sizeMax ? 'warn' : 'ok',
            note: tooSmall ? `The app needs ${tooSmall.what}.` : cost('buffer-size'),
        });
    }
    const { usage, quota, persisted } = caps.storage;
    const free = quota - usage;
    const opfsMissing = decision.missing.find((m) => m.need === 'opfs' || m.need === 'sync-access-handle');
    const opfsNotes = [cost('move'), cost('create-writable')].filter(Boolean);
    const roomy = free >= modelBytes || usage >= modelBytes;
    rows.push({
        label: 'Storage',
        value: `${formatBytes(usage)} used of ${formatBytes(quota)}${persisted ? ' · persistent' : ''}`,
        tone: opfsMissing ? 'bad' : roomy ? 'ok' : 'warn',
        note: opfsMissing
            ? `The app needs ${opfsMissing.what}.`
            : [
                  roomy
                      ? ''
                      : `The model needs about ${formatBytes(modelBytes)}; only ${formatBytes(Math.max(0, free))} is available to this site.`,
                  ...opfsNotes,
              ]
                  .filter(Boolean)
                  .join(' ') || undefined,
    });
    if (typeof caps.deviceMemory === 'number') {
        const memory = cost('memory');
        rows.push({
            label: 'Device memory',
            value: `${caps.deviceMemory} GB or more`,
            tone: memory ? 'warn' : '',
            note: memory,
        });
    }
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
 * @param {CapabilityRecord} caps
 * @param {string} cost  The decision's sentence.
 * @param {{linux: boolean}} platform
 * @returns {string}
 */
function withoutShaderF16(caps, cost, { linux }) {
    const nvidia = /nvidia/i.test(`${caps.adapter?.vendor} ${caps.adapter?.description}`);
    if (!(linux && nvidia)) return cost;
    return `This NVIDIA GPU has fp16 shaders, but Chrome on Linux hides them unless it is started with ${NVIDIA_F16_FLAG} (the fast q4f16 model). ${cost}`;
}

/**
 * The note at the top of the page once the probe has answered: what this browser lacks and what that costs, or
 * exactly what is missing. `tone` 'bad' when the app cannot run here.
 * @param {Decision} decision
 * @returns {{text: string, tone: 'ok' | 'warn' | 'bad'}}
 */
export function summaryNote(decision) {
    if (!decision.canRun) {
        const what = decision.missing.map((m) => m.what).join('; ');
        return {
            text: `The app cannot run in this browser: it needs ${what}. What to do is shown under the Generate button.`,
            tone: 'bad',
        };
    }
    const costs = decision.lacks.filter((lack) => lack.tone === 'warn').map((lack) => lack.cost);
    const runs = `This browser runs the app: the ${decision.family} graphs, on ${decision.kernels}.`;
    if (costs.length === 0) {
        const size = formatBytes(decision.model.downloadBytes);
        return { text: `${runs} About ${size} is downloaded once, then cached.`, tone: 'ok' };
    }
    return { text: `${runs} ${costs.join(' ')}`, tone: 'warn' };
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
        /** @type {CapabilityRecord | null} */
        this.caps = null;
        /** @type {RepoFacts | null} The model's manifest, once the worker has read it. */
        this.repo = null;
    }

    /**
     * The model is known: the panel's sizes become its own.
     * @param {RepoFacts} repo
     */
    setModel(repo) {
        this.repo = repo;
        if (this.caps) this.render(this.caps);
    }

    /** @param {string} text  While probing, or when the probe itself failed. */
    placeholder(text) {
        const item = document.createElement('div');
        item.className = 'muted';
        item.textContent = text;
        this.list.replaceChildren(item);
    }

    /** @param {CapabilityRecord} caps */
    render(caps) {
        this.caps = caps;
        this.panel.dataset.json = JSON.stringify(caps);
        const children = [];
        const linux = /Linux/.test(navigator.userAgent) && !/Android/.test(navigator.userAgent);
        for (const row of describeCapabilities(caps, { linux }, this.repo)) {
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
