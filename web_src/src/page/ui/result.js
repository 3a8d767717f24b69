// @ts-check
/**
 * @file The finished image: `#result-image`, the Download PNG button (PNG with the settings in text
 * chunks), the per-stage timings with the graph variant / EP of each component, the worker's notes and
 * the prompt's token count.
 * @module page/ui/result
 */

import { extensionText } from '../../shared/outpaint.js';
import { formatDuration } from '../../shared/format.js';
import { addTextChunks, guidanceText } from '../../shared/png_text.js';
import { cell, requireElement } from './dom.js';

/** @typedef {import('../../protocol.js').GenerateResult} GenerateResult */
/** @typedef {import('../../protocol.js').StageTimings} StageTimings */

/** Longest edge of a history thumbnail, in CSS pixels (x2 for sharp thumbnails on HiDPI screens). */
const THUMB_EDGE = 192;

/**
 * Rows of the timings table: the pipeline's stages in order (pipeline/generate.js), stage 2 in its two parts.
 * @type {ReadonlyArray<readonly [keyof StageTimings, string]>}
 */
const TIMING_ROWS = Object.freeze([
    ['check', 'Check inputs'],
    ['download', 'Download'],
    ['load', 'Load graphs'],
    ['encode', 'Encode prompt'],
    ['images', 'Encode images'],
    ['latents', 'Prepare latents'],
    ['timesteps', 'Prepare timesteps'],
    ['denoise', 'Denoise'],
    ['decode', 'Decode'],
]);

const COMPONENT_NAMES = Object.freeze({
    text_encoder: 'Text encoder',
    transformer: 'Transformer',
    vae_decoder: 'VAE decoder',
});

/**
 * @typedef {Object} EncodedImage
 * @property {Blob} png     Full-size PNG carrying the settings as text chunks.
 * @property {Blob} thumb   Small JPEG for the history.
 * @property {string} fileName
 */

/**
 * @param {HTMLCanvasElement} canvas
 * @param {string} type
 * @param {number} [quality]
 * @returns {Promise<Blob>}
 */
function canvasBlob(canvas, type, quality) {
    return new Promise((resolve, reject) => {
        canvas.toBlob(
            (blob) => (blob ? resolve(blob) : reject(new Error(`The browser could not encode a ${type}.`))),
            type,
            quality,
        );
    });
}

/**
 * The text chunks that say what an Edit or Inpaint run started from (none for text to image, whose PNGs keep
 * exactly the keys they always had). Each input image is a line `<sha256> <usedW>x<usedH> <name>`, in request
 * order, as the reference CLI writes them, so the file shows which images made it.
 * @param {GenerateResult['inputs'] | undefined} inputs
 * @returns {Record<string, string>}
 */
export function inputChunks(inputs) {
    if (!inputs || inputs.mode === 'text') return {};
    /** @param {import('../../protocol.js').InputImageInfo} image */
    const line = (image) => `${image.sha256} ${image.usedWidth}x${image.usedHeight} ${image.name}`;
    /** @type {Record<string, string>} */
    const chunks = { mode: inputs.mode, images: inputs.images.map(line).join('\n') };
    if (inputs.mode === 'inpaint') {
        if (inputs.mask) chunks.mask = line(inputs.mask);
        chunks.strength = String(inputs.strength);
        if (inputs.extension) chunks.outpaint = extensionText(inputs.extension);
    }
    return chunks;
}

/**
 * The worker's RGBA -> PNG (text chunks: prompt, seed, steps, size, model, the inputs of Edit and Inpaint, and a
 * base model's guidance)
 * + a JPEG thumbnail. Both
 * encodings are the browser's own (`toBlob`, off the main thread), so the page never stalls.
 * @param {GenerateResult} result
 * @param {{modelLabel: string, version: string}} context
 * @returns {Promise<EncodedImage>}
 */
export async function encodeImage(result, { modelLabel, version }) {
    const { width, height, params } = result;
    const canvas = document.createElement('canvas');
    canvas.width = width;
    canvas.height = height;
    // willReadFrequently keeps the canvas in CPU memory: toBlob then needs no GPU readback, which on a
    // busy (or software) GPU blocked the page thread for hundreds of milliseconds.
    const context = canvas.getContext('2d', { willReadFrequently: true });
    if (!context) throw new Error('This browser has no 2D canvas: the image cannot be shown.');
    // The worker transfers a plain ArrayBuffer (never shared memory), which ImageData requires.
    const rgba = new Uint8ClampedArray(
        /** @type {ArrayBuffer} */ (result.rgba.buffer),
        result.rgba.byteOffset,
        width * height * 4,
    );
    context.putImageData(new ImageData(rgba, width, height), 0, 0);

    const variants = Object.entries(result.graphs ?? {})
        .map(([component, graph]) => `${component}=${graph.variant}/${graph.ep}`)
        .join(', ');
    const plain = new Uint8Array(await (await canvasBlob(canvas, 'image/png')).arrayBuffer());
    const tagged = addTextChunks(plain, {
        prompt: params.prompt,
        seed: String(params.seed),
        steps: String(params.steps),
        size: `${width}x${height}`,
        model: params.modelBase,
        'model-source': modelLabel,
        graphs: variants,
        ...inputChunks(result.inputs),
        ...guidanceText(result.inputs?.guidance),
        Software: `klein-web ${version} (FLUX.2 [klein] 4B, ONNX Runtime Web, WebGPU)`,
    });

    const scale = Math.min(1, THUMB_EDGE / Math.max(width, height));
    const small = document.createElement('canvas');
    small.width = Math.max(1, Math.round(width * scale));
    small.height = Math.max(1, Math.round(height * scale));
    const smallContext = small.getContext('2d', { willReadFrequently: true });
    if (!smallContext) throw new Error('This browser has no 2D canvas: the image cannot be shown.');
    smallContext.imageSmoothingQuality = 'high';
    smallContext.drawImage(canvas, 0, 0, small.width, small.height);

    return {
        png: new Blob([/** @type {Uint8Array<ArrayBuffer>} */ (tagged)], { type: 'image/png' }),
        thumb: await canvasBlob(small, 'image/jpeg', 0.85),
        fileName: `klein-${params.seed}-${width}x${height}.png`,
    };
}

/**
 * One line on the GPU device the sessions shared: the features that decide onnxruntime's kernel paths
 * (shader-f16: fp16 kernels; subgroups: subgroup kernels, among them the int8 (DP4A) kernels of the q4 graphs;
 * chromium-experimental-subgroup-matrix: its matrix-unit kernels), the limits that size its workgroups, how
 * attention runs (MatMul + Softmax + MatMul in query blocks: onnxruntime's flash attention lives only inside its
 * fused attention ops, which measured slower in Chrome), and each optional feature the device was made without
 * because it failed in this browser. docs/machines.md has what each path is worth.
 * @param {import('../../protocol.js').GenerateResult['device'] | undefined} device
 * @param {string | undefined} transformerVariant  The transformer graph that ran (q4 weights: DP4A or not).
 * @returns {HTMLElement[]}
 */
function deviceLine(device, transformerVariant) {
    if (!device) return [];
    const { limits } = device;
    const off = device.off ?? [];
    const matrixOff = off.find((o) => o.feature === 'chromium-experimental-subgroup-matrix');
    const parts = [
        device.features.length > 0 ? `features ${device.features.join(', ')}` : 'no optional features',
        `workgroup storage ${Math.round((limits.maxComputeWorkgroupStorageSize ?? 0) / 1024)} KiB`,
        `${limits.maxComputeInvocationsPerWorkgroup ?? '?'} invocations per workgroup`,
        `${limits.maxStorageBuffersPerShaderStage ?? '?'} storage buffers per stage`,
        device.features.includes('chromium-experimental-subgroup-matrix')
            ? 'matrix units on (subgroup-matrix kernels)'
            : matrixOff
              ? 'matrix units off (subgroup-matrix failed in this browser: plain matrix kernels)'
              : 'matrix units off (no subgroup-matrix: plain matrix kernels)',
        'attention as MatMul + Softmax + MatMul (no flash attention: it exists only inside fused attention ops, slower in Chrome)',
    ];
    if (transformerVariant === 'q4') {
        parts.push(
            device.features.includes('subgroups')
                ? 'q4 weights as int8 dot products (DP4A kernels)'
                : 'q4 weights on fp32 kernels (no subgroups: no DP4A)',
        );
    }
    for (const { feature, reason, remembered } of off) {
        parts.push(
            `${feature} off: it failed in this browser${remembered ? ' on an earlier visit' : ''} (${reason.slice(0, 160)})`,
        );
    }
    const line = document.createElement('p');
    line.className = 'device';
    line.textContent = `GPU device: ${parts.join('; ')}.`;
    return [line];
}

/**
 * The memory mode the run used and why (models/memory_mode.js).
 * @param {GenerateResult['memory'] | undefined} memory
 * @returns {HTMLElement[]}
 */
function memoryLine(memory) {
    if (!memory) return [];
    const line = document.createElement('p');
    line.className = 'memory-mode';
    line.textContent = `Memory: ${memory.why}.`;
    return [line];
}

/** Kernel rows shown per component (the result's data-json holds them all). */
const KERNEL_ROWS_SHOWN = 12;

/**
 * A profiled run's GPU time per kernel program (`?profile=kernels`), one table per component: the programs are
 * onnxruntime's kernel paths (MatMulNBitsWideTile or a subgroup-matrix one; MatMul + Softmax for attention).
 * @param {GenerateResult['kernels']} kernels
 * @returns {HTMLElement[]}
 */
function kernelTables(kernels) {
    if (!kernels) return [];
    return Object.entries(kernels).map(([component, times]) => {
        const table = document.createElement('table');
        table.className = 'kernels';
        const name = /** @type {Record<string, string>} */ (COMPONENT_NAMES)[component] ?? component;
        const runs = times.runs === 1 ? 'one run' : `per run of ${times.runs}`;
        table.append(
            cell(
                'caption',
                `${name}: GPU ${formatDuration(times.gpuMs)} ${runs} (of ${formatDuration(times.runMs)} in the run; dispatching it ${formatDuration(times.hostMs)}; CPU-placed nodes ${formatDuration(times.cpuNodeMs)})`,
            ),
        );
        const head = document.createElement('tr');
        head.append(
            cell('th', 'Op'),
            cell('th', 'Program'),
            cell('th', 'Calls'),
            cell('th', 'GPU'),
            cell('th', 'Share'),
        );
        const thead = document.createElement('thead');
        thead.append(head);
        const body = document.createElement('tbody');
        for (const kernel of times.kernels.slice(0, KERNEL_ROWS_SHOWN)) {
            const row = document.createElement('tr');
            row.append(
                cell('th', kernel.op),
                cell('td', kernel.program),
                cell('td', String(Math.round(kernel.calls)), 'num'),
                cell('td', formatDuration(kernel.gpuMs), 'num'),
                cell('td', `${(100 * kernel.share).toFixed(1)}%`, 'num'),
            );
            body.append(row);
        }
        table.append(thead, body);
        return table;
    });
}

/**
 * @param {GenerateResult['inputs'] | undefined} inputs
 * @returns {string}  What the caption says before the seed: the mode's inputs, then a base model's guidance.
 */
function captionMode(inputs) {
    const guidance = inputs?.guidance ? `Guidance ${inputs.guidance.scale} · ` : '';
    return `${captionInputs(inputs)}${guidance}`;
}

/**
 * @param {GenerateResult['inputs'] | undefined} inputs
 * @returns {string}  "Edit of 2 images · " / "Inpaint, strength 0.8 · " / "Inpaint, strength 0.8, extended
 *   left=0 right=128 top=0 bottom=0 · " / '' (text to image).
 */
function captionInputs(inputs) {
    if (!inputs || inputs.mode === 'text') return '';
    const count = inputs.images.length;
    if (inputs.mode === 'edit') return `Edit of ${count} image${count === 1 ? '' : 's'} · `;
    const extended = inputs.extension ? `, extended ${extensionText(inputs.extension)}` : '';
    return `Inpaint, strength ${inputs.strength}${extended} · `;
}

export class ResultView {
    /** @param {Document} doc */
    constructor(doc) {
        this.image = requireElement(doc, 'result-image', HTMLImageElement);
        this.caption = requireElement(doc, 'result-caption', HTMLElement);
        this.downloadButton = requireElement(doc, 'download', HTMLButtonElement);
        this.timings = requireElement(doc, 'timings', HTMLElement);
        this.notes = requireElement(doc, 'notes', HTMLElement);
        this.tokenInfo = requireElement(doc, 'token-info', HTMLElement);
        /** @type {{url: string, fileName: string} | null} */
        this.current = null;
        this.downloadButton.addEventListener('click', () => this.download());
    }

    /**
     * @param {GenerateResult} result
     * @param {EncodedImage} encoded
     */
    show(result, encoded) {
        if (this.current) URL.revokeObjectURL(this.current.url);
        const url = URL.createObjectURL(encoded.png);
        this.current = { url, fileName: encoded.fileName };
        const { params } = result;
        this.image.src = url;
        this.image.width = result.width;
        this.image.height = result.height;
        this.image.alt = params.prompt ? `Generated image: ${params.prompt}` : 'Generated image (empty prompt)';
        this.image.hidden = false;
        this.caption.textContent = `${captionMode(result.inputs)}Seed ${params.seed} · ${result.width}×${result.height} · ${params.steps} step${params.steps === 1 ? '' : 's'} · ${formatDuration(result.timings.total)}`;
        this.downloadButton.disabled = false;
        this.#renderTimings(result);
        this.#renderNotes(result.notes ?? []);
        this.#renderTokens(result.prompt);
    }

    /** Saves the current PNG as klein-SEED-WxH.png. */
    download() {
        if (!this.current) return;
        const link = document.createElement('a');
        link.href = this.current.url;
        link.download = this.current.fileName;
        link.click();
    }

    /** @param {GenerateResult} result */
    #renderTimings(result) {
        const { timings, graphs } = result;
        this.timings.dataset.json = JSON.stringify({
            timings,
            stepMs: result.stepMs,
            transformerCalls: result.transformerCalls,
            guidance: result.inputs?.guidance ?? null,
            graphs,
            notes: result.notes ?? [],
            prompt: result.prompt,
            device: result.device ?? null,
            memory: result.memory ?? null,
            preview: result.preview ?? null,
            timeline: result.timeline ?? [],
            ...(result.kernels ? { kernels: result.kernels } : {}),
        });

        const table = document.createElement('table');
        table.append(cell('caption', 'Time per stage'));
        const body = document.createElement('tbody');
        const withImages = (result.inputs?.images.length ?? 0) > 0;
        // Inpainting's strength runs only the last steps of the schedule.
        const ranSteps = result.inputs?.steps ?? result.params.steps;
        for (const [key, label] of TIMING_ROWS) {
            if (key === 'images' && !withImages) continue;
            const ms = timings[key];
            const row = document.createElement('tr');
            const extra = key === 'denoise' && ranSteps > 0 ? ` (${formatDuration(ms / ranSteps)}/step)` : '';
            row.append(cell('th', label), cell('td', `${formatDuration(ms)}${extra}`, 'num'));
            body.append(row);
        }
        const total = document.createElement('tr');
        total.className = 'total';
        total.append(cell('th', 'Total'), cell('td', formatDuration(timings.total), 'num'));
        body.append(total);
        if (Number.isFinite(result.transformerCalls)) {
            const calls = document.createElement('tr');
            calls.className = 'sub';
            // A base model's guidance runs the transformer twice a step: the denoising time doubles.
            const how = result.inputs?.guidance ? ' (2 a step: classifier-free guidance)' : '';
            calls.append(cell('th', `transformer calls${how}`), cell('td', String(result.transformerCalls), 'num'));
            body.append(calls);
        }
        if (Number.isFinite(timings.sessionRun)) {
            const run = document.createElement('tr');
            run.className = 'sub';
            const share = timings.total > 0 ? ` (${Math.round((100 * timings.sessionRun) / timings.total)}%)` : '';
            run.append(
                cell('th', 'inside session.run'),
                cell('td', `${formatDuration(timings.sessionRun)}${share}`, 'num'),
            );
            body.append(run);
        }
        if (result.preview) {
            const preview = document.createElement('tr');
            preview.className = 'sub';
            // Tenths: a preview takes about a millisecond.
            const perStep =
                result.preview.frames > 0 ? ` (${(result.preview.ms / result.preview.frames).toFixed(1)} ms/step)` : '';
            preview.append(
                cell('th', `step previews (${result.preview.map} colours)`),
                cell('td', `${formatDuration(result.preview.ms)}${perStep}`, 'num'),
            );
            body.append(preview);
        }
        table.append(body);

        const graphTable = document.createElement('table');
        graphTable.append(cell('caption', 'What ran where'));
        const head = document.createElement('tr');
        head.append(
            cell('th', 'Component'),
            cell('th', 'Variant'),
            cell('th', 'Runs on'),
            cell('th', 'How'),
            cell('th', 'Loaded in'),
        );
        const graphHead = document.createElement('thead');
        graphHead.append(head);
        const graphBody = document.createElement('tbody');
        for (const [component, graph] of Object.entries(graphs ?? {})) {
            const row = document.createElement('tr');
            const ep = graph.ep === 'webgpu' ? 'GPU (WebGPU)' : graph.ep === 'wasm' ? 'CPU (wasm)' : graph.ep;
            row.append(
                cell('th', /** @type {Record<string, string>} */ (COMPONENT_NAMES)[component] ?? component),
                cell('td', graph.variant),
                cell('td', ep),
                cell('td', graph.detail ?? ''),
                // Session creation with shader compilation; 0 when this image reused a loaded session.
                cell('td', graph.loadMs > 0 ? formatDuration(graph.loadMs) : 'already loaded', 'num'),
            );
            graphBody.append(row);
        }
        graphTable.append(graphHead, graphBody);
        this.timings.replaceChildren(
            table,
            graphTable,
            ...deviceLine(result.device, result.graphs?.transformer?.variant),
            ...memoryLine(result.memory),
            ...kernelTables(result.kernels),
        );
    }

    /** @param {string[]} notes */
    #renderNotes(notes) {
        this.notes.replaceChildren(...notes.map((note) => cell('li', note)));
    }

    /** @param {{tokens: number, droppedTokens: number} | undefined} prompt */
    #renderTokens(prompt) {
        if (!prompt) {
            this.tokenInfo.textContent = '';
            return;
        }
        this.tokenInfo.classList.toggle('warn', prompt.droppedTokens > 0);
        this.tokenInfo.textContent =
            prompt.droppedTokens > 0
                ? `Prompt too long: the last ${prompt.droppedTokens} token${prompt.droppedTokens === 1 ? ' was' : 's were'} dropped (the text encoder reads 512 tokens, chat template included). Shorten the prompt to keep its end.`
                : `${prompt.tokens} of 512 tokens used (chat template included).`;
    }
}
