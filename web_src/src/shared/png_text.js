// @ts-check
/**
 * @file Text metadata in PNG files (prompt, seed, steps... in the downloaded image), per the PNG spec
 * (W3C PNG 3rd ed., 11.3.3): `addTextChunks` inserts one chunk per entry before the first IDAT, as `tEXt`
 * when key and value are Latin-1 and as uncompressed `iTXt` (UTF-8) when the value is not, so emoji and
 * CJK prompts survive; `readTextChunks` reads `tEXt` and uncompressed `iTXt` back.
 * Compressed chunks (`zTXt`, compressed `iTXt`) are skipped: inflating them would need zlib here.
 * @module shared/png_text
 */

import { concat } from './bytes.js';
import { InputError } from './errors.js';
import { chunks, crcMatches, encodeChunk, hasPngSignature } from './png_chunks.js';

/** @typedef {import('./png_chunks.js').Chunk} Chunk */

/**
 * A whole PNG's chunks, checking the signature and that every chunk fits.
 * @param {Uint8Array} png
 * @returns {Chunk[]}
 */
function parseChunks(png) {
    if (!(png instanceof Uint8Array)) {
        throw new InputError(`\`png\` must be a Uint8Array, got ${Object.prototype.toString.call(png)}.`);
    }
    if (!hasPngSignature(png)) {
        throw new InputError('`png` does not start with the PNG signature: this is not a PNG file.');
    }
    const list = [];
    let next = 8;
    for (const chunk of chunks(png)) {
        if (chunk.cut) {
            throw new InputError(
                `\`png\` is truncated: chunk ${chunk.type} at byte ${chunk.offset} runs past the end of the file.`,
            );
        }
        list.push(chunk);
        next = chunk.offset + 12 + chunk.length;
    }
    if (list.at(-1)?.type !== 'IEND' && next < png.length) {
        throw new InputError(`\`png\` is truncated: an incomplete chunk header at byte ${next}.`);
    }
    return list;
}

/**
 * A keyword is 1-79 printable Latin-1 characters without leading, trailing or double spaces.
 * @param {string} key
 */
function checkKeyword(key) {
    // eslint-disable-next-line no-control-regex
    const printable = /^[\x20-\x7e\xa1-\xff]{1,79}$/.test(key);
    if (!printable || key.startsWith(' ') || key.endsWith(' ') || key.includes('  ')) {
        throw new InputError(
            `PNG text keyword ${JSON.stringify(key)} is invalid: use 1-79 printable Latin-1 characters ` +
                'without leading, trailing or double spaces (e.g. "prompt", "seed").',
            { key },
        );
    }
}

/**
 * @param {string} text Only code points <= 0xFF.
 * @returns {Uint8Array}
 */
function latin1Bytes(text) {
    const out = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
    return out;
}

/**
 * ISO 8859-1 bytes to text (TextDecoder's 'latin1' is really windows-1252, which remaps 0x80-0x9F).
 * @param {Uint8Array} bytes
 * @returns {string}
 */
function latin1Text(bytes) {
    let text = '';
    for (let i = 0; i < bytes.length; i += 8192) text += String.fromCharCode(...bytes.subarray(i, i + 8192));
    return text;
}

/**
 * The tEXt or iTXt chunk for one entry.
 * @param {string} key
 * @param {string} value
 * @returns {Uint8Array}
 */
function textChunk(key, value) {
    checkKeyword(key);
    if (typeof value !== 'string' || value.includes('\0')) {
        throw new InputError(`PNG text value for ${JSON.stringify(key)} must be a string without NUL characters.`, {
            key,
        });
    }
    const keyBytes = latin1Bytes(key);
    if (/^[\x00-\xff]*$/.test(value)) {
        // tEXt: keyword, NUL, Latin-1 text
        return encodeChunk('tEXt', concat([keyBytes, new Uint8Array([0]), latin1Bytes(value)]));
    }
    // iTXt: keyword, NUL, compression flag 0, method 0, empty language tag, NUL, empty translated keyword, NUL, UTF-8
    const header = new Uint8Array([0, 0, 0, 0, 0]);
    return encodeChunk('iTXt', concat([keyBytes, header, new TextEncoder().encode(value)]));
}

/**
 * Returns a copy of `png` with one text chunk per entry inserted right before the first IDAT chunk
 * (the image itself is untouched).
 * @param {Uint8Array} png A complete PNG file.
 * @param {Record<string, string>} entries keyword -> text
 * @returns {Uint8Array}
 */
export function addTextChunks(png, entries) {
    const chunks = parseChunks(png);
    const idat = chunks.find((c) => c.type === 'IDAT');
    if (!idat) throw new InputError('`png` has no IDAT chunk, so there is no image to attach text to.');
    const inserted = Object.entries(entries).map(([key, value]) => textChunk(key, value));
    return concat([png.subarray(0, idat.offset), ...inserted, png.subarray(idat.offset)]);
}

/**
 * Reads every `tEXt` and uncompressed `iTXt` chunk; a later chunk with the same keyword wins (as in Pillow).
 * @param {Uint8Array} png A complete PNG file.
 * @returns {Record<string, string>} keyword -> text
 */
export function readTextChunks(png) {
    /** @type {Record<string, string>} */
    const out = {};
    for (const chunk of parseChunks(png)) {
        if (chunk.type !== 'tEXt' && chunk.type !== 'iTXt') continue;
        if (!crcMatches(png, chunk)) {
            throw new InputError(
                `\`png\` is corrupted: the ${chunk.type} chunk at byte ${chunk.offset} fails its CRC.`,
            );
        }
        const data = chunk.data;
        const nul = data.indexOf(0);
        if (nul < 1) continue; // no keyword: not a valid text chunk
        const key = latin1Text(data.subarray(0, nul));
        if (chunk.type === 'tEXt') {
            out[key] = latin1Text(data.subarray(nul + 1));
            continue;
        }
        const compressed = data[nul + 1] !== 0;
        const langEnd = data.indexOf(0, nul + 3);
        const translatedEnd = langEnd < 0 ? -1 : data.indexOf(0, langEnd + 1);
        if (compressed || translatedEnd < 0) continue;
        out[key] = new TextDecoder('utf-8').decode(data.subarray(translatedEnd + 1));
    }
    return out;
}

/**
 * The text keys of a base model's classifier-free guidance (builder/pipeline/imaging.py png_text writes the same keys
 * and values): `guidance_scale` as Python writes the float (its repr: `4.0`, `7.25`) and `negative_prompt`; none
 * without guidance (a distilled model's image has neither).
 * @param {{scale: number, negativePrompt: string} | null | undefined} guidance
 * @returns {Record<string, string>}
 */
export function guidanceText(guidance) {
    if (!guidance) return {};
    return { guidance_scale: pythonFloat(guidance.scale), negative_prompt: guidance.negativePrompt };
}

/**
 * Python's `repr(float(value))` for numbers between 1e-4 and 1e16, where both languages write the shortest digits
 * that read back the same double without an exponent; Python adds `.0` to a whole number.
 * @param {number} value
 * @returns {string}
 */
function pythonFloat(value) {
    return Number.isInteger(value) ? value.toFixed(1) : String(value);
}
